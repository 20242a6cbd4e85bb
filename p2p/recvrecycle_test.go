package p2p_test

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestRecvRecycles: a blocking Recv's request goes back to the endpoint
// (cleared while the next Recv waits), so a loop of Send and Recv
// allocates nothing, and the endpoint keeps no hold on a buffer a Recv
// has returned.
func TestRecvRecycles(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	require.NoError(t, err)
	defer p2ptest.Close(eps)

	s, in := pattern(8, 5), make([]byte, 8)
	var loopErr error
	step := func() {
		// Rank 1's Recv finds the message there, or waits for it: both
		// paths recycle.
		if err := eps[0].Send(ctx, 1, 1, s); err != nil {
			loopErr = err
			return
		}
		if _, err := eps[1].Recv(ctx, 0, 1, in); err != nil {
			loopErr = err
		}
	}
	step()
	require.NoError(t, loopErr)
	if !raceOn {
		allocs := testing.AllocsPerRun(200, step)
		require.NoError(t, loopErr)
		require.Zero(t, allocs, "allocations per Send and Recv")
	}

	big := make([]byte, 1<<20)
	held := weak.Make(&big[0])
	require.NoError(t, eps[0].Send(ctx, 1, 2, s))
	_, err = eps[1].Recv(ctx, 0, 2, big)
	require.NoError(t, err)
	big = nil
	for i := 0; held.Value() != nil; i++ {
		require.Less(t, i, 100, "the endpoint still holds the buffer of a Recv that returned")
		runtime.GC()
	}
}
