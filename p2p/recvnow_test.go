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

// TestRecvPingPong: Recvs that wait for their message (the peer answers
// from another goroutine), completed by their own polls or the other
// side's, return each message's data and status.
func TestRecvPingPong(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	require.NoError(t, err)
	defer p2ptest.Close(eps)

	const rounds = 300
	echo := make(chan error, 1)
	go func() {
		buf := make([]byte, 64)
		for range rounds {
			st, err := eps[1].Recv(ctx, 0, p2p.AnyTag, buf)
			if err == nil {
				err = eps[1].Send(ctx, 0, st.Tag+1, buf[:st.Count])
			}
			if err != nil {
				echo <- err
				return
			}
		}
		echo <- nil
	}()
	buf := make([]byte, 64)
	for i := range rounds {
		n := 1 + i%64
		msg := pattern(n, byte(i))
		require.NoError(t, eps[0].Send(ctx, 1, i, msg))
		st, err := eps[0].Recv(ctx, 1, i+1, buf)
		require.NoError(t, err, "round %d", i)
		require.Equal(t, p2p.Status{Source: 1, Tag: i + 1, Count: n}, st)
		require.True(t, bytes.Equal(msg, buf[:n]), "round %d: got %v", i, buf[:n])
	}
	require.NoError(t, <-echo)
}
