package tcp

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/stretchr/testify/require"
)

// TestWaiterReadsQueuedSendWhole: a large SEND whose rest is all queued
// when a waiter finds its header is read at once, not streamed: a stream
// would first pay the system calls a waiter makes before it may block.
// (Two ranks that exchange such SENDs find each other's there.)
func TestWaiterReadsQueuedSendWhole(t *testing.T) {
	const n = readBufSize + 40<<10
	o := testOptions()
	o.MinAckTimeout = time.Minute
	o.PollSpin = time.Hour // the waiter polls until its frame comes
	// The reader goroutine takes the socket back only after a pause this
	// long between waits.
	o.PollGrace = 10 * time.Millisecond
	a, mr, c := fakeTargetWith(t, o, n, 0)
	l := attachedLink(t, a.qp)
	pending := a.cq.(interface{ Pending() bool })
	// Waiters poll the socket for SENDs that come meanwhile (and keep it
	// quiet): they leave it to the next waiter for PollGrace.
	seq := uint32(0)
	send := func(queuedFirst bool) {
		t.Helper()
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(seq), SGL: []verbs.SGE{verbs.SGEOf(mr, 0, n)}}))
		f := sendFrame(a.qp, seq, n)
		seq++
		wrote := make(chan error, 1)
		go func() { _, err := c.Write(f); wrote <- err }()
		if queuedFirst {
			// Queued whole, or taken by the reader goroutine already
			// (after a pause on a loaded machine; then the completion is
			// in the CQ).
			require.Eventually(t, func() bool { return pending.Pending() || queuedIn(t, l) >= len(f) }, 10*time.Second, 50*time.Microsecond)
		}
		wc := wait(t, a.cq)
		require.NoError(t, <-wrote)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:n]))
	}
	for range 10 {
		send(false)
	}
	ahead := l.aheadReads.Load()
	streamed := l.streamed.Load()
	for range 5 {
		send(true)
	}
	require.Equal(t, streamed, l.streamed.Load(), "a SEND queued whole was streamed")
	require.Greater(t, l.aheadReads.Load(), ahead, "no SEND found queued was read at once")
}

// TestStreamedSendReadsInPieces: a waiter that polls the socket while it
// streams a SEND (PollSpin) reads its body once streamReadMin bytes of it
// are queued, not each segment as it comes: a trickle below that stays in
// the socket until more arrives, and then it is read.
func TestStreamedSendReadsInPieces(t *testing.T) {
	const n, pre = readBufSize + 100<<10, 64
	o := testOptions()
	o.MinAckTimeout = time.Minute
	o.PollSpin = time.Minute
	a, mr, c := fakeTargetWith(t, o, n, 0)
	l := attachedLink(t, a.qp)
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 5, SGL: []verbs.SGE{verbs.SGEOf(mr, 0, n)}}))
	f := sendFrame(a.qp, 0, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The header and the first 64 KiB: the waiter streams them.
	at := HeaderLen + 64<<10
	res := waitAndSend(t, ctx, a, c, f, at)
	require.Eventually(t, func() bool { return l.streamBytes.Load() >= 32<<10 }, 10*time.Second, time.Millisecond,
		"the waiter did not stream the SEND")
	// A trickle of 4 KiB writes, less than streamReadMin in all, stays
	// queued: the waiter does not read it piece by piece.
	read := l.streamBytes.Load()
	for range 8 {
		_, err := c.Write(f[at : at+4<<10])
		require.NoError(t, err)
		at += 4 << 10
	}
	require.Eventually(t, func() bool { return queuedIn(t, l) >= 32<<10 }, 10*time.Second, time.Millisecond,
		"the waiter read a trickle below streamReadMin as it came")
	require.Equal(t, read, l.streamBytes.Load())
	// More makes a piece worth a read.
	_, err := c.Write(f[at : at+40<<10])
	require.NoError(t, err)
	at += 40 << 10
	require.Eventually(t, func() bool { return l.streamBytes.Load() >= read+64<<10 }, 10*time.Second, time.Millisecond,
		"the waiter did not read a queued piece")
	_, err = c.Write(f[at:])
	require.NoError(t, err)
	require.NoError(t, <-res)
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:n]), "the SEND's payload is not in its receive intact")
	require.Equal(t, int32(1), l.streamed.Load())
}
