package futex

import (
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/stacks"
)

// Wait returns at once when the word already differs, after Wake when a
// waker changes it, and after its timeout when nobody does.
func TestWaitWake(t *testing.T) {
	var w uint32 = 1
	start := time.Now()
	Wait(&w, 0, 5*time.Second) // *addr != val: no sleep
	require.Less(t, time.Since(start), 2*time.Second)

	woke := make(chan struct{})
	go func() {
		for atomic.LoadUint32(&w) == 1 {
			Wait(&w, 1, 5*time.Second)
		}
		close(woke)
	}()
	if runtime.GOOS == "linux" {
		// Wake only a waiter asleep in the kernel (elsewhere Wait polls).
		require.Eventually(t, func() bool {
			for _, g := range stacks.All() {
				if g.State == "syscall" && strings.Contains(g.Stack, "futex.Wait(") && strings.Contains(g.Stack, "TestWaitWake") {
					return true
				}
			}
			return false
		}, 5*time.Second, time.Millisecond, "the waiter never slept in futex(2)")
	}
	atomic.AddUint32(&w, 1)
	Wake(&w)
	select {
	case <-woke:
	case <-time.After(4 * time.Second):
		t.Fatal("Wake did not wake the sleeper")
	}

	start = time.Now()
	Wait(&w, 2, 20*time.Millisecond) // nobody wakes: the timeout ends it
	require.Less(t, time.Since(start), 2*time.Second)
	Yield()
}
