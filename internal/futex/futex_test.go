package futex

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
	time.Sleep(10 * time.Millisecond)
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
