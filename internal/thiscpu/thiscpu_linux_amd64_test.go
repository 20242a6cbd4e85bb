package thiscpu

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestIDFollowsAffinity pins the test's thread to each CPU it may run on
// in turn; ID must name that CPU every time.
func TestIDFollowsAffinity(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var all unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &all))
	defer func() { require.NoError(t, unix.SchedSetaffinity(0, &all)) }()
	tried := 0
	for cpu := 0; cpu < 1024 && tried < all.Count(); cpu++ {
		if !all.IsSet(cpu) {
			continue
		}
		tried++
		var one unix.CPUSet
		one.Set(cpu)
		require.NoError(t, unix.SchedSetaffinity(0, &one))
		for range 3 { // a migration after SchedSetaffinity returns is done
			require.Equal(t, cpu, ID(), "pinned to CPU %d", cpu)
		}
	}
	require.Positive(t, tried)
}

// TestLSLRefusesABadSelector: a selector with no segment behind it is
// not read as CPU 0.
func TestLSLRefusesABadSelector(t *testing.T) {
	_, ok := lsl(0x3fff)
	assert.False(t, ok)
	_, ok = lsl(cpuNodeSeg)
	assert.True(t, ok)
}
