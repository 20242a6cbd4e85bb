package cputime

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestThreadCountsThisThreadsWork: the reading grows with CPU work done on
// the calling thread.
func TestThreadCountsThisThreadsWork(t *testing.T) {
	if runtime.GOOS != "linux" {
		assert.Equal(t, int64(-1), Thread())
		return
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	before := Thread()
	require.GreaterOrEqual(t, before, int64(0))
	// Work until 2 ms of CPU show (the clock's tick is coarser than one
	// loop), for at most 10 s of wall time on a busy machine.
	x := uint64(1)
	for end := time.Now().Add(10 * time.Second); Thread()-before < 2e6 && time.Now().Before(end); {
		for i := 0; i < 1e5; i++ {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	assert.NotZero(t, x)
	assert.GreaterOrEqual(t, Thread()-before, int64(2e6), "the thread's work did not show")
}

// TestWakeupsCountsSleeps: a goroutine that sleeps on its own locked
// thread makes that thread sleep and be woken, which Wakeups counts.
func TestWakeupsCountsSleeps(t *testing.T) {
	if runtime.GOOS != "linux" {
		assert.Equal(t, -1, Wakeups())
		return
	}
	before := Wakeups()
	require.GreaterOrEqual(t, before, 0)
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		for range 20 {
			time.Sleep(100 * time.Microsecond)
		}
	}()
	<-done
	require.GreaterOrEqual(t, Wakeups()-before, 20, "each sleep of the locked thread is a wake-up")
}
