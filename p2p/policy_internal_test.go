package p2p

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestWaitPolicy(t *testing.T) {
	shm := []*device{{provider: "shm"}}
	tcp := []*device{{provider: "tcp"}}
	both := []*device{{provider: "shm"}, {provider: "tcp"}}
	for _, c := range []struct {
		name        string
		o           Options
		devs        []*device
		local, cpus int
		spin, yield time.Duration
	}{
		{"shm, a core per rank", Options{}, shm, 2, 2, shmSpinOwnCore, 0},
		{"shm, oversubscribed", Options{}, shm, 8, 2, shmSpinShared, 0},
		{"shm, explicit", Options{Spin: 7 * time.Microsecond, Yield: time.Microsecond}, shm, 8, 2, 7 * time.Microsecond, time.Microsecond},
		{"shm, none", Options{Spin: -1, Yield: -1}, shm, 2, 2, 0, 0},
		{"tcp", Options{}, tcp, 1, 2, 0, 0},
		{"shm and tcp", Options{}, both, 2, 2, 0, 0},
		{"ibv", Options{}, []*device{{provider: "ibv"}}, 1, 2, 20 * time.Microsecond, 200 * time.Microsecond},
	} {
		spin, yield := waitPolicy(c.o, c.devs, c.local, c.cpus)
		assert.Equal(t, c.spin, spin, c.name)
		assert.Equal(t, c.yield, yield, c.name)
	}
}

func TestHostInfo(t *testing.T) {
	for _, c := range []hostInfo{
		{id: "boot-1/netns-2", mask: []byte{0x03}},
		{id: "", mask: nil},
		{id: "h", ibv: true, mask: []byte{0, 0, 0x80}},
	} {
		got := decodeHostInfo(c.encode())
		assert.Equal(t, c.id, got.id)
		assert.Equal(t, c.ibv, got.ibv)
		assert.Equal(t, len(c.mask), len(got.mask))
		assert.Equal(t, onesIn(c.mask), onesIn(got.mask))
	}
	// A record with an identity only decodes.
	got := decodeHostInfo([]byte("old"))
	assert.Equal(t, "old", got.id)
	assert.Nil(t, got.mask)
	// Two ranks bound to one core each share two CPUs; bound to the same
	// core, one.
	assert.Equal(t, 2, onesIn(orMask([]byte{0x01}, []byte{0x02})))
	assert.Equal(t, 1, onesIn(orMask([]byte{0x01}, []byte{0x01})))
	assert.Equal(t, 3, onesIn(orMask([]byte{0x01}, []byte{0x00, 0x03})))
	// This process's own mask covers at least one CPU on Linux.
	if m := cpuMask(); m != nil {
		assert.GreaterOrEqual(t, onesIn(m), 1)
	}
}

// The automatic transport: shm on one host whatever else, ibv across hosts
// only when both ends have it, tcp otherwise; an unknown identity never
// means one host.
func TestPickProvider(t *testing.T) {
	a, b := "boot-a/ns-1", "boot-b/ns-1"
	for _, c := range []struct {
		me, peer hostInfo
		want     string
	}{
		{hostInfo{id: a}, hostInfo{id: a}, "shm"},
		{hostInfo{id: a, ibv: true}, hostInfo{id: a, ibv: true}, "shm"},
		{hostInfo{id: a, ibv: true}, hostInfo{id: b, ibv: true}, "ibv"},
		{hostInfo{id: a, ibv: true}, hostInfo{id: b}, "tcp"},
		{hostInfo{id: a}, hostInfo{id: b, ibv: true}, "tcp"},
		{hostInfo{id: ""}, hostInfo{id: ""}, "tcp"},
		{hostInfo{id: "", ibv: true}, hostInfo{id: "", ibv: true}, "ibv"},
	} {
		assert.Equal(t, c.want, pickProvider(c.me, c.peer), "%+v / %+v", c.me, c.peer)
		assert.Equal(t, c.want, pickProvider(c.peer, c.me), "symmetric: %+v / %+v", c.peer, c.me)
	}
}
