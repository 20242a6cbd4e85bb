package verbstest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var teardownCases = []tcase{
	{"QPCloseFlushes", testQPCloseFlushes},
	{"DeviceCloseWithOutstandingWork", testDeviceClose},
	{"PeerQPClosed", testPeerQPClosed},
	{"PeerDisconnect", testPeerDisconnect},
}

// lossConnect is Options.Connect with a short ACK timeout (code 12, about
// 17 ms, 3 retries), for cases that wait for RETRY_EXC_ERR.
func (s *suite) lossConnect() *verbs.ConnectOptions {
	o := s.opts.Connect
	if o.Timeout == 0 || o.Timeout > 12 {
		o.Timeout = 12
	}
	o.RetryCnt = min(o.RetryCnt, 3)
	return &o
}

// stall posts n SENDs that meet no receive (the responder has none and the
// requester retries RNR forever) and k receives: outstanding work.
func stall(t *testing.T, e *endpoint, n, k int) {
	t.Helper()
	for i := range n {
		require.NoError(t, e.qp.PostSend(sendWR(uint64(i+1), verbs.OpSend, verbs.SGEOf(e.mr, 0, 8))))
	}
	for i := range k {
		require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{verbs.SGEOf(e.mr, 64, 8)}}))
	}
}

func testQPCloseFlushes(t *testing.T, s *suite) {
	ca := s.opts.Connect
	ca.RNRRetry = 7
	p := s.newPair(t, pairConfig{connA: &ca})
	ctx := s.ctx(t)
	stall(t, p.a, 3, 4)
	requireEmpty(t, p.a.scq, "stalled SENDs")
	require.NoError(t, p.a.qp.Close())
	for i, wc := range collect(ctx, t, p.a.scq, 3) {
		requireStatus(t, wc, uint64(i+1), "SEND outstanding at QP.Close", verbs.StatusWRFlushErr)
	}
	for i, wc := range collect(ctx, t, p.a.rcq, 4) {
		requireStatus(t, wc, uint64(100+i), "receive outstanding at QP.Close", verbs.StatusWRFlushErr)
	}
}

// testDeviceClose closes a device whose QP has outstanding work: Close
// returns, the device refuses new work, and the peer's work fails with
// RETRY_EXC_ERR instead of hanging.
func testDeviceClose(t *testing.T, s *suite) {
	dev := s.openDevice(t)
	ca := s.opts.Connect
	ca.RNRRetry = 7
	p := s.newPair(t, pairConfig{devA: dev, connA: &ca, connB: s.lossConnect()})
	ctx := s.ctx(t)
	stall(t, p.a, 3, 2)
	closeBounded(t, "Device.Close with outstanding work", s.opts.CaseTimeout, dev.Close)
	_, err := dev.AllocPD()
	require.ErrorIs(t, err, verbs.ErrClosed, "AllocPD on a closed device")
	// The peer notices: its next request fails with RETRY_EXC_ERR (or is
	// flushed, if it already noticed and moved to ERR).
	require.NoError(t, p.b.qp.PostSend(sendWR(1, verbs.OpSend, verbs.SGEOf(p.b.mr, 0, 8))))
	requireStatus(t, collect1(ctx, t, p.b.scq), 1, "SEND to a QP whose device was closed", verbs.StatusRetryExcErr, verbs.StatusWRFlushErr)
	waitState(ctx, t, p.b.qp, verbs.QPErr, "QP whose peer device was closed")
	requireFlushed(t, s, p.b, "QP whose peer device was closed")
}

func testPeerQPClosed(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{connA: s.lossConnect()})
	ctx := s.ctx(t)
	require.NoError(t, p.a.qp.PostRecv(verbs.RecvWR{ID: 50, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 8)}}))
	require.NoError(t, p.b.qp.Close())
	require.NoError(t, p.a.qp.PostSend(sendWR(1, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8)),
		rdmaWR(2, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8))))
	wcs := collect(ctx, t, p.a.scq, 2)
	requireStatus(t, wcs[0], 1, "SEND to a closed QP", verbs.StatusRetryExcErr)
	requireStatus(t, wcs[1], 2, "WRITE behind it", verbs.StatusWRFlushErr)
	requireStatus(t, collect1(ctx, t, p.a.rcq), 50, "receive of a QP whose peer was closed", verbs.StatusWRFlushErr)
	require.Equal(t, verbs.QPErr, p.a.qp.State())
	requireFlushed(t, s, p.a, "QP whose peer was closed")
}

func testPeerDisconnect(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{connA: s.lossConnect(), connB: s.lossConnect()})
	d, ok := p.a.qp.(verbs.Disconnector)
	skipUnless(t, ok, "provider's QP (%T) does not implement verbs.Disconnector", p.a.qp)
	ctx := s.ctx(t)
	require.NoError(t, p.a.qp.PostRecv(verbs.RecvWR{ID: 50, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 8)}}))
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 60, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 8)}}))
	require.NoError(t, d.Disconnect())
	require.NoError(t, p.a.qp.PostSend(sendWR(1, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))))
	require.NoError(t, p.b.qp.PostSend(sendWR(2, verbs.OpSend, verbs.SGEOf(p.b.mr, 0, 8))))
	// Both sides' work fails as if the link died: RETRY_EXC_ERR, or
	// WR_FLUSH_ERR if the QP had already gone to ERR.
	requireStatus(t, collect1(ctx, t, p.a.scq), 1, "SEND after Disconnect", verbs.StatusRetryExcErr, verbs.StatusWRFlushErr)
	requireStatus(t, collect1(ctx, t, p.b.scq), 2, "peer's SEND after Disconnect", verbs.StatusRetryExcErr, verbs.StatusWRFlushErr)
	requireStatus(t, collect1(ctx, t, p.a.rcq), 50, "receive after Disconnect", verbs.StatusWRFlushErr)
	requireStatus(t, collect1(ctx, t, p.b.rcq), 60, "peer's receive after Disconnect", verbs.StatusWRFlushErr)
	waitState(ctx, t, p.a.qp, verbs.QPErr, "after Disconnect")
	waitState(ctx, t, p.b.qp, verbs.QPErr, "peer after Disconnect")
}
