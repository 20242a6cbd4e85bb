package p2p_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs/faulty"
)

// sendsHeld is what the injectors saw posted under a hold (PostBatcher).
func sendsHeld(inj []*faulty.Injector) int {
	n := 0
	for _, in := range inj {
		n += in.Stats().SendsHeld
	}
	return n
}

// TestQueuedSendsLeaveTogether: eager sends that queue for want of credits
// are posted under one hold of their QP's posts when credits come back
// (flushDirtyLocked), so that a software transport writes them together, and
// arrive intact and in order. The poll's own batching is off, so only the
// flush can have held them.
func TestQueuedSendsLeaveTogether(t *testing.T) {
	inj, open := faultyOpener(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "loop", P2P: p2p.Options{
		EagerLimit: 1024, EagerSlots: 4, LivenessTimeout: -1, OpenDevice: open}})
	require.NoError(t, err)
	defer p2ptest.Close(eps)
	for _, ep := range eps {
		ep.SetPollBatching(false)
	}
	const n = 32
	reqs := make([]*p2p.Request, n)
	for i := range n {
		reqs[i], err = eps[0].Isend(1, 7, []byte{byte(i), 1, 2, 3, 4, 5, 6, 7})
		require.NoError(t, err)
	}
	buf := make([]byte, 8)
	for i := range n {
		_, err := eps[1].Recv(ctx, 0, 7, buf)
		require.NoError(t, err)
		require.Equal(t, byte(i), buf[0], "message %d out of order", i)
	}
	require.NoError(t, p2p.WaitAll(ctx, reqs...))
	require.Greater(t, sendsHeld(inj), 1, "the sends that waited for credits were posted one by one")
}

// TestPolledCompletionsAnsweredTogether: the posts that one poll's
// completions cause (here the READs of a window of rendezvous messages
// whose RTSs arrived while the receiver did not poll) are held until all
// of them are handled, so that they leave together, and the messages
// arrive intact.
func TestPolledCompletionsAnsweredTogether(t *testing.T) {
	inj, open := faultyOpener(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "loop", P2P: p2p.Options{
		EagerLimit: 1024, PipelineLimit: -1, LivenessTimeout: -1, OpenDevice: open}})
	require.NoError(t, err)
	defer p2ptest.Close(eps)
	const n, size = 4, 64 << 10
	rbufs := make([][]byte, n)
	rreqs := make([]*p2p.Request, n)
	for i := range n {
		rbufs[i] = make([]byte, size)
		rreqs[i], err = eps[1].Irecv(0, i, rbufs[i])
		require.NoError(t, err)
	}
	before := sendsHeld(inj)
	release := eps[1].HoldPolls()
	sreqs := make([]*p2p.Request, n)
	for i := range n {
		b := make([]byte, size)
		for j := range b {
			b[j] = byte(i + j*3)
		}
		sreqs[i], err = eps[0].Isend(1, i, b)
		require.NoError(t, err)
	}
	// The loop provider delivers as it posts: every RTS is in rank 1's CQ
	// before it polls again, and one poll takes them all.
	release()
	require.NoError(t, p2p.WaitAll(ctx, rreqs...))
	require.NoError(t, p2p.WaitAll(ctx, sreqs...))
	for i := range n {
		for j := 0; j < size; j += 997 {
			require.Equal(t, byte(i+j*3), rbufs[i][j])
		}
	}
	require.GreaterOrEqual(t, sendsHeld(inj)-before, n, "the READs one poll posted were not held together")
}
