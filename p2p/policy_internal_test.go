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
	for _, c := range []struct {
		id   string
		mask []byte
	}{
		{"boot-1/netns-2", []byte{0x03}},
		{"", nil},
		{"h", []byte{0, 0, 0x80}},
	} {
		id, mask := decodeHostInfo(encodeHostInfo(c.id, c.mask))
		assert.Equal(t, c.id, id)
		assert.Equal(t, len(c.mask), len(mask))
		assert.Equal(t, onesIn(c.mask), onesIn(mask))
	}
	// A record without a mask (an empty value, or an identity only) decodes.
	id, mask := decodeHostInfo([]byte("old"))
	assert.Equal(t, "old", id)
	assert.Nil(t, mask)
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
