package p2p_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestRequestColdState: eager messages' requests carry no rendezvous or
// window state (it stays out of the cache lines a window of small messages
// touches); a rendezvous receive gets it, gives it back cleared when
// released, and the next rendezvous receive reuses it and gets its data
// whole, split and fallback included (over shm within one process the
// sender cannot write its half: see TestSplitRendezvousFallback).
func TestRequestColdState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	require.NoError(t, err)
	defer p2ptest.Close(eps)

	small := make([]byte, 8)
	exchange := func(n int, b byte) *p2p.Request {
		t.Helper()
		buf := make([]byte, n)
		rr, err := eps[1].Irecv(0, 3, buf)
		require.NoError(t, err)
		rs, err := eps[0].Isend(1, 3, pattern(n, b))
		require.NoError(t, err)
		_, err = rr.Wait(ctx)
		require.NoError(t, err)
		_, err = rs.Wait(ctx)
		require.NoError(t, err)
		require.True(t, bytes.Equal(pattern(n, b), buf), "%d bytes arrived wrong", n)
		require.False(t, rs.HasCold(), "a send's request carries cold state")
		rs.Release()
		return rr
	}

	rr := exchange(len(small), 1)
	require.False(t, rr.HasCold(), "an eager receive's request carries cold state")
	rr.Release()

	const big = 300 << 10 // a split rendezvous
	for i := range 3 {
		rr = exchange(big+i, byte(i+2))
		require.True(t, rr.HasCold(), "a rendezvous receive has no cold state")
		rr.Release()
		n, clear := eps[1].FreeColds()
		require.Equal(t, 1, n, "the released cold state waits for reuse")
		require.True(t, clear, "the released cold state was not cleared")
		// The request is reused for an eager message without it.
		rr = exchange(len(small), byte(i+5))
		require.False(t, rr.HasCold(), "a recycled request kept its cold state")
		rr.Release()
	}
}
