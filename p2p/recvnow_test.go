package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestRecvArrived: a blocking Recv of messages that were sent before it
// (so that its first poll, made while it posts, completes it) returns each
// one's data and status, in order, with wildcards; a truncated one returns
// a *TruncatedError with both sizes and leaves nothing behind for the
// next Recv, whose recycled request starts clean.
func TestRecvArrived(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	require.NoError(t, err)
	defer p2ptest.Close(eps)

	for round := range 20 {
		seed := byte(round)
		require.NoError(t, eps[0].Send(ctx, 1, 3, pattern(8, seed)))
		require.NoError(t, eps[0].Send(ctx, 1, 4, pattern(24, seed+1)))
		require.NoError(t, eps[0].Send(ctx, 1, 5, pattern(16, seed+2)))

		buf := make([]byte, 16)
		st, err := eps[1].Recv(ctx, p2p.AnySource, p2p.AnyTag, buf)
		require.NoError(t, err)
		require.Equal(t, p2p.Status{Source: 0, Tag: 3, Count: 8}, st)
		require.True(t, bytes.Equal(pattern(8, seed), buf[:8]), "round %d: got %v", round, buf[:8])

		_, err = eps[1].Recv(ctx, 0, 4, buf)
		var te *p2p.TruncatedError
		require.True(t, errors.As(err, &te), "round %d: want a *TruncatedError, got %v", round, err)
		require.Equal(t, 24, te.Size)
		require.Equal(t, 16, te.Cap)

		st, err = eps[1].Recv(ctx, 0, p2p.AnyTag, buf)
		require.NoError(t, err, "round %d: the receive after a truncated one", round)
		require.Equal(t, p2p.Status{Source: 0, Tag: 5, Count: 16}, st)
		require.True(t, bytes.Equal(pattern(16, seed+2), buf), "round %d: got %v", round, buf)
	}
}
