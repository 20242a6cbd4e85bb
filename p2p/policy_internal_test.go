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
