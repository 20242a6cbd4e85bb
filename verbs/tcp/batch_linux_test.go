package tcp

import (
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/stretchr/testify/require"
)

// TestHeldPostsLeaveInOneWrite: small sends posted while the QP's posts
// are held (verbs.PostBatcher) leave in one write system call at the last
// ReleasePosts; posted one by one without a hold, they take several.
func TestHeldPostsLeaveInOneWrite(t *testing.T) {
	const n = 5
	o := testOptions()
	o.MinAckTimeout = time.Minute // the fake peer never acknowledges
	a, _, c := fakeTargetWith(t, o, 64, 0)
	l := attachedLink(t, a.qp)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	post := func(i int) {
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.SendInline,
			Inline: []byte{byte(i), 2, 3, 4, 5, 6, 7, 8}}))
	}
	// readFrames reads k SEND frames from the fake peer's end.
	readFrames := func(k int) {
		for range k {
			readFrame(t, c)
		}
	}
	pb := a.qp.(verbs.PostBatcher)
	w0 := l.writes.Load()
	pb.HoldPosts()
	for i := range n {
		post(i)
	}
	require.Equal(t, w0, l.writes.Load(), "a held post was written")
	pb.ReleasePosts()
	readFrames(n)
	require.Equal(t, w0+1, l.writes.Load(), "held posts did not leave in one write")

	w0 = l.writes.Load()
	for i := range n {
		post(n + i)
	}
	readFrames(n)
	require.Greater(t, l.writes.Load(), w0+1, "posts without a hold went in one write")
}

// TestAcksMerge: the ACKs a responder holds back together leave as one,
// the last, which acknowledges the earlier requests too: a window of
// signaled WRITEs posted at once (one write system call, so the
// responder reads them together) gets fewer ACK frames than WRITEs, and
// the requester still completes every WRITE, in order, and its data is
// in place.
func TestAcksMerge(t *testing.T) {
	const n = 12 // within newSide's send queue
	a, b := connected(t, verbs.DefaultConnectOptions())
	requireWorks(t, a, b)
	lb := attachedLink(t, b.qp)
	m0 := lb.merged.Load()
	pb := a.qp.(verbs.PostBatcher)
	pb.HoldPosts()
	for i := range n {
		a.mr.Bytes()[64+i] = byte(i + 1)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(100 + i), Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 64+i, 1)}, RemoteAddr: b.mr.Addr() + uint64(64+i), RKey: b.mr.RKey()}))
	}
	pb.ReleasePosts()
	for i := range n {
		wc := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status, "WRITE %d", i)
		require.Equal(t, uint64(100+i), wc.ID, "completions out of order")
	}
	for i := range n {
		require.Equal(t, byte(i+1), b.mr.Bytes()[64+i], "byte %d", i)
	}
	require.Greater(t, lb.merged.Load(), m0, "every WRITE of the window drew its own ACK frame")
}
