package collectives

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestKeepsCPUReadsThePeersNote: a crowded waiter keeps its CPU only for
// a peer whose latest note is recent, from another CPU, and says it waits
// for nobody, for this rank, or for a rank whose recent note is from a
// third CPU; an unknown CPU never keeps it.
func TestKeepsCPUReadsThePeersNote(t *testing.T) {
	t.Parallel()
	const (
		me, peer, third, fourth = 0, 1, 2, 3
		now, window             = int64(1_000_000), int64(8_000)
		mine, other, thirdCPU   = 0, 1, 2
	)
	type note struct {
		rank, cpu, waitsFor int
		age                 int64
	}
	for _, tc := range []struct {
		name  string
		cpu   int // this rank's
		notes []note
		keep  bool
	}{
		{name: "peer never noted", cpu: mine},
		{name: "elsewhere, waiting for nobody", cpu: mine, notes: []note{{peer, other, -1, 1000}}, keep: true},
		{name: "elsewhere, waiting for me", cpu: mine, notes: []note{{peer, other, me, 1000}}, keep: true},
		{name: "on my CPU", cpu: mine, notes: []note{{peer, mine, me, 10}}},
		{name: "noted too long ago", cpu: mine, notes: []note{{peer, other, me, window + 1}}},
		{name: "noted just within the window", cpu: mine, notes: []note{{peer, other, me, window}}, keep: true},
		{name: "waiting for a rank on my CPU", cpu: mine, notes: []note{{peer, other, third, 1000}, {third, mine, -1, 1000}}},
		{name: "waiting for a rank on its CPU", cpu: mine, notes: []note{{peer, other, third, 1000}, {third, other, -1, 1000}}},
		{name: "waiting for a rank on a third CPU", cpu: mine, notes: []note{{peer, other, third, 1000}, {third, thirdCPU, fourth, 1000}}, keep: true},
		{name: "waiting for a rank on a third CPU long ago", cpu: mine, notes: []note{{peer, other, third, 1000}, {third, thirdCPU, fourth, 50_000}}},
		{name: "waiting for a rank never noted", cpu: mine, notes: []note{{peer, other, fourth, 1000}}},
		{name: "waiting for a rank out of range", cpu: mine, notes: []note{{peer, other, 9, 1000}}},
		{name: "my CPU unknown", cpu: -1, notes: []note{{peer, other, me, 1000}}},
		{name: "peer's CPU unknown", cpu: mine, notes: []note{{peer, -1, me, 1000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &shmState{mem: make([][]byte, 4)}
			for r := range s.mem {
				s.mem[r] = make([]byte, shmEntry0)
			}
			for _, n := range tc.notes {
				s.noteAt(n.rank, n.waitsFor, n.cpu, now-n.age)
			}
			assert.Equal(t, tc.keep, s.keepsCPU(me, peer, tc.cpu, now, window))
		})
	}
}
