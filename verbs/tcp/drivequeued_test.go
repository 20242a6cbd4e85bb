package tcp

import (
	"context"
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
