//go:build linux

package shm

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// TestWaitPolicy: CQ.Wait spins 20 µs and yields 200 µs by default; where
// the ranks outnumber the CPUs (DeviceOptions.PollYield) it yields at once,
// since the sender may need this very core; SpinDuration and YieldDuration
// win over either default, a negative one meaning none. The device Open
// makes waits by that policy. A waiter keeps a CPU that others want for
// 3 ms (ContendedDuration), unless the ranks outnumber the CPUs.
func TestWaitPolicy(t *testing.T) {
	crowded := verbs.DeviceOptions{PollYield: true}
	for _, c := range []struct {
		name        string
		o           Options
		spin, yield time.Duration
		contended   time.Duration
	}{
		{"defaults", Options{}, 20 * time.Microsecond, 200 * time.Microsecond, 3 * time.Millisecond},
		{"crowded", Options{DeviceOptions: crowded}, 0, 200 * time.Microsecond, 0},
		{"crowded, explicit spin", Options{DeviceOptions: crowded, SpinDuration: 5 * time.Microsecond}, 5 * time.Microsecond, 200 * time.Microsecond, 0},
		{"crowded, explicit yield", Options{DeviceOptions: crowded, YieldDuration: time.Millisecond}, 0, time.Millisecond, 0},
		{"explicit", Options{SpinDuration: 3 * time.Microsecond, YieldDuration: 4 * time.Microsecond, ContendedDuration: time.Millisecond}, 3 * time.Microsecond, 4 * time.Microsecond, time.Millisecond},
		{"none", Options{SpinDuration: -1, YieldDuration: -1, ContendedDuration: -1}, 0, 0, 0},
		{"crowded, none", Options{DeviceOptions: crowded, SpinDuration: -1, YieldDuration: -1}, 0, 0, 0},
	} {
		p := waitPolicy(c.o)
		assert.Equal(t, shmsync.Policy{Spin: c.spin, Yield: c.yield, Nap: time.Second, Contended: c.contended}, p, c.name)
	}

	d, err := Open(context.Background(), Options{DeviceOptions: verbs.DeviceOptions{PollYield: true, Token: testToken}})
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, waitPolicy(Options{DeviceOptions: crowded}), d.wait, "Open does not wait by waitPolicy")
}
