//go:build !race

// The race detector allocates on its own: this test runs without it.

package comm

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGeneralPathWaitsDoNotAllocate runs 2-rank allgathers of 16 bytes
// over tcp, whose every call blocks in the transport's CQ once per rank
// (the general path of a job across hosts), and counts the process's
// allocations per call: a context.WithCancel per blocking wait and the
// transport's context.AfterFunc on it made about eight for the two ranks;
// the reused waker and a watch only before a read that may sleep make
// none. The bound leaves room for what a call may allocate otherwise (a
// copy of a small message that arrives before its receive).
func TestGeneralPathWaitsDoNotAllocate(t *testing.T) {
	// The transport's waiters poll their sockets for 10 s before they
	// sleep: a wait that sleeps registers on its context, which
	// allocates, and on a loaded machine some would, whatever the waits
	// cost otherwise.
	o := Options{Transport: "tcp"}
	o.P2P.Device.PollSpin = 10 * time.Second
	comms := initPairWith(t, o)
	ctx := context.Background()
	// The warm-up touches every send queue entry (whose inline buffer is
	// made on first use) and fills the pools. A wait that another
	// goroutine's poll completes may allocate (its waker's next use makes
	// a channel): the best of a few measurements counts.
	const warm, runs, tries = 2000, 500, 3
	send := [2][]float32{make([]float32, 4), make([]float32, 4)}
	recv := [2][]float32{make([]float32, 8), make([]float32, 8)}
	call := func(r int) error { return Allgather(ctx, comms[r], send[r], recv[r]) }
	peer := make(chan error, 1)
	go func() {
		for range warm + tries*(runs+1) { // AllocsPerRun calls once more than runs
			if err := call(1); err != nil {
				peer <- err
				return
			}
		}
		peer <- nil
	}()
	for range warm {
		require.NoError(t, call(0))
	}
	var callErr error
	allocs := math.Inf(1)
	for range tries {
		allocs = min(allocs, testing.AllocsPerRun(runs, func() {
			if err := call(0); err != nil && callErr == nil {
				callErr = err
			}
		}))
	}
	require.NoError(t, callErr)
	require.NoError(t, <-peer)
	t.Logf("%.0f allocations per call, both ranks", allocs)
	require.Less(t, allocs, 3.0, "allocations per call, both ranks")
}
