package tcp

import (
	"context"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// TestDriveQueuedStaleDeadline: a read deadline left in the past (a
// poller interrupting a reader goroutine that had already let go of the
// token) does not fail the link: DriveQueued clears it and takes the
// frames that arrived. The test leaves the deadline itself, with the
// token out of the reader's hands, and then has a frame arrive.
func TestDriveQueuedStaleDeadline(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("DriveQueued reads the socket without blocking on Linux only")
	}
	o := testOptions()
	o.PollGrace = maxPollGrace // the reader goroutine stays out while the test sets up
	a, mr, c := fakeTargetWith(t, o, 4096, verbs.AccessRemoteWrite)
	l := attachedLink(t, a.qp)
	cq := a.cq.(*softrc.CQ)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
		// Take the token the way a poller does (from the reader goroutine
		// the first time), finding nothing: the reader stays out.
		took, left := l.DriveQueued(ctx, cq)
		require.False(t, took)
		require.False(t, left)
		require.NoError(t, l.c.SetReadDeadline(aLongTimeAgo))
		_, err := c.Write(writeImmFrame(a.qp, mr, uint32(i), 64, uint32(i)))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return l.Incoming() || cq.Pending() }, 5*time.Second, time.Millisecond)
		l.DriveQueued(ctx, cq) // the grace may have run out: the reader may have taken it
		wc, err := waitCtx(ctx, cq)
		require.NoError(t, err)
		require.Equal(t, verbs.StatusSuccess, wc.Status, "frame %d: %v", i, wc)
		require.Equal(t, uint32(i), wc.Imm)
	}
}

// TestArrivedWaitsForWriter: while the link's writer goroutine writes (a
// large WRITE the socket did not take at once, here to a peer that does
// not read), Arrived reports waiting, so that a poller which keeps the
// thread blocks and Go's network poller can resume the writer: a poller
// that went on yielding kept it off until the runtime's monitor polled
// the network, up to 10 ms a time.
func TestArrivedWaitsForWriter(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("Arrived polls sockets on Linux only")
	}
	const n = 32 << 20 // far more than loopback's socket buffers hold
	a, mr, c := fakeTargetWith(t, testOptions(), n, verbs.AccessRemoteWrite)
	l := attachedLink(t, a.qp)
	cq := a.cq.(*softrc.CQ)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	took, waiting := cq.Arrived(ctx)
	require.False(t, took)
	require.False(t, waiting, "an idle link has nothing waiting")
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(mr, 0, n)}, RemoteAddr: 1 << 20, RKey: 7}))
	require.Eventually(t, l.writing.Load, 5*time.Second, time.Millisecond, "the writer goroutine never took the write")
	_, waiting = cq.Arrived(ctx)
	require.True(t, waiting, "the writer's work was not reported")
	// Drain what the writer sends, so that it finishes and the link closes cleanly.
	go func() { _, _ = io.Copy(io.Discard, c) }()
	require.Eventually(t, func() bool { return !l.writing.Load() }, 10*time.Second, time.Millisecond)
}
