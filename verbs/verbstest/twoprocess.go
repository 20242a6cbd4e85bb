package verbstest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// twoProcess runs the cross-process cases against re-executed peers.
func (s *suite) twoProcess(t *testing.T) {
	s.run(t, "Ops", s.testCrossProcessOps)
	s.run(t, "Atomics", s.testCrossProcessAtomics)
	s.run(t, "WaiterWokenByPeer", s.testCrossProcessWake)
	s.run(t, "PeerKilled", s.testPeerKilled)
}

// connectPeer builds a local endpoint on devA and connects its QP to the
// peer's, both sides at once.
func (s *suite) connectPeer(t *testing.T, pp *peerProc, local, remote verbs.ConnectOptions) *endpoint {
	t.Helper()
	e := s.newEndpoint(t, s.devA, pairConfig{mrSize: peerMRSize})
	ctx := s.ctx(t)
	var wg sync.WaitGroup
	var err error
	wg.Add(1)
	go func() { defer wg.Done(); err = verbs.Connect(e.qp, pp.hello.Addr, local) }()
	pp.call(ctx, peerReq{Op: "connect", Remote: e.qp.Address(), Connect: remote})
	wg.Wait()
	require.NoError(t, err, "connecting to the peer process")
	return e
}

func (s *suite) testCrossProcessOps(t *testing.T) {
	pp := s.startPeer(t)
	e := s.connectPeer(t, pp, s.opts.Connect, s.opts.Connect)
	ctx := s.ctx(t)
	const n = 256 << 10

	// WRITE, then SEND_WITH_IMM as the doorbell: when the peer's receive
	// completes, the written bytes are in its memory.
	pattern(e.mr.Bytes()[:n], 61)
	pp.call(ctx, peerReq{Op: "postRecv", ID: 7, Off: n, Len: 64})
	wr := sendWR(2, verbs.OpSendWithImm, verbs.SGEOf(e.mr, 0, 64))
	wr.Imm = 0xc0ffee01
	require.NoError(t, e.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, pp.remote(), 0, verbs.SGEOf(e.mr, 0, n)), wr))
	armed := pp.callArmed(ctx, "waitRecv")
	wc := armed.WC
	requireWC(t, wc, 7, verbs.WCRecv, wc.QPNum, "peer's receive of SEND_WITH_IMM")
	require.EqualValues(t, 64, wc.ByteLen)
	require.NotZero(t, wc.Flags&verbs.WCWithImm)
	require.EqualValues(t, 0xc0ffee01, wc.Imm)
	requireBytes(t, e.mr.Bytes()[:n], pp.call(ctx, peerReq{Op: "read", Off: 0, Len: n}).Data, "WRITE into the peer process")
	requireBytes(t, e.mr.Bytes()[:64], pp.call(ctx, peerReq{Op: "read", Off: n, Len: 64}).Data, "SEND into the peer process")
	sw := collect(ctx, t, e.scq, 2)
	requireWC(t, sw[0], 1, verbs.WCRDMAWrite, e.qp.Num(), "cross-process WRITE")
	requireWC(t, sw[1], 2, verbs.WCSend, e.qp.Num(), "cross-process SEND_WITH_IMM")

	// READ of memory the peer filled.
	pp.call(ctx, peerReq{Op: "fill", Off: 2 * n, Len: n, Seed: 62})
	require.NoError(t, e.qp.PostSend(rdmaWR(3, verbs.OpRDMARead, remoteMR{pp.hello.MRAddr + 2*n, pp.hello.RKey}, 0, verbs.SGEOf(e.mr, n, n))))
	requireWC(t, collect1(ctx, t, e.scq), 3, verbs.WCRDMARead, e.qp.Num(), "cross-process READ")
	requireBytes(t, patterned(n, 62), e.mr.Bytes()[n:2*n], "READ from the peer process")

	// SEND from the peer.
	require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 3*n, 4096)}}))
	pp.call(ctx, peerReq{Op: "fill", Off: 0, Len: 4096, Seed: 63})
	sent := pp.call(ctx, peerReq{Op: "send", ID: 4, Off: 0, Len: 4096, WithImm: true, Imm: 0x01020304}).WC
	require.Equal(t, verbs.StatusSuccess, sent.Status, "peer's SEND: %s", fmtWCs([]verbs.WC{sent}))
	rwc := collect1(ctx, t, e.rcq)
	requireWC(t, rwc, 9, verbs.WCRecv, e.qp.Num(), "receive of the peer's SEND")
	require.EqualValues(t, 0x01020304, rwc.Imm)
	requireBytes(t, patterned(4096, 63), e.mr.Bytes()[3*n:3*n+4096], "SEND from the peer process")
}

func (s *suite) testCrossProcessAtomics(t *testing.T) {
	skipNoAtomics(t, s)
	pp := s.startPeer(t)
	skipUnless(t, pp.hello.Atomics, "the peer's provider memory does not support atomics")
	e := s.connectPeer(t, pp, s.opts.Connect, s.opts.Connect)
	a := &atomics{t: t, ctx: s.ctx(t), qp: e.qp, scq: e.scq, local: e.mr, remote: pp.remote(), roff: 4096}
	a.calibrate()
	require.EqualValues(t, 1, a.do(verbs.OpAtomicFetchAdd, 10, 0))
	require.EqualValues(t, 11, a.do(verbs.OpAtomicCmpAndSwp, 11, 5))
	require.EqualValues(t, 5, a.do(verbs.OpAtomicCmpAndSwp, 11, 6), "CMP_AND_SWP that does not match")
	require.EqualValues(t, 5, a.do(verbs.OpAtomicFetchAdd, 0, 0))
}

// testCrossProcessWake: a waiter blocked in CQ.Wait is woken by work the
// other process does, in both directions.
func (s *suite) testCrossProcessWake(t *testing.T) {
	pp := s.startPeer(t)
	e := s.connectPeer(t, pp, s.opts.Connect, s.opts.Connect)
	ctx := s.ctx(t)

	// We block; the peer's SEND wakes us.
	require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 64)}}))
	woke := make(chan error, 1)
	go func() { woke <- e.rcq.Wait(ctx) }()
	time.Sleep(10 * time.Millisecond) // let the waiter block
	pp.call(ctx, peerReq{Op: "send", ID: 1, Off: 0, Len: 64})
	select {
	case err := <-woke:
		require.NoError(t, err, "CQ.Wait woken by the peer process")
	case <-ctx.Done():
		t.Fatal("a SEND from the peer process did not wake CQ.Wait")
	}
	requireWC(t, collect1(ctx, t, e.rcq), 1, verbs.WCRecv, e.qp.Num(), "receive that woke the waiter")

	// The peer blocks; our SEND wakes it.
	pp.call(ctx, peerReq{Op: "postRecv", ID: 2, Off: 0, Len: 64})
	wc := pp.callArmed(ctx, "waitRecv", func() {
		time.Sleep(10 * time.Millisecond) // let the peer block
		require.NoError(t, e.qp.PostSend(sendWR(2, verbs.OpSend, verbs.SGEOf(e.mr, 0, 64))))
	}).WC
	require.Equal(t, verbs.StatusSuccess, wc.Status, "peer's receive: %s", fmtWCs([]verbs.WC{wc}))
	require.EqualValues(t, 2, wc.ID)
	requireWC(t, collect1(ctx, t, e.scq), 2, verbs.WCSend, e.qp.Num(), "SEND that woke the peer")
}

// testPeerKilled: the peer process dies (SIGKILL) with our work outstanding;
// the first outstanding request fails with RETRY_EXC_ERR, the rest and our
// receives are flushed, nothing hangs.
func (s *suite) testPeerKilled(t *testing.T) {
	pp := s.startPeer(t)
	local := *s.lossConnect()
	local.RNRRetry = 7 // the SENDs below wait for a receive that never comes
	e := s.connectPeer(t, pp, local, s.opts.Connect)
	ctx := s.ctx(t)
	// Prove the connection works first.
	require.NoError(t, e.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, pp.remote(), 0, verbs.SGEOf(e.mr, 0, 8))))
	requireWC(t, collect1(ctx, t, e.scq), 1, verbs.WCRDMAWrite, e.qp.Num(), "WRITE before the kill")
	require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 50, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8)}}))
	require.NoError(t, e.qp.PostSend(sendWR(2, verbs.OpSend, verbs.SGEOf(e.mr, 0, 8)),
		rdmaWR(3, verbs.OpRDMAWrite, pp.remote(), 0, verbs.SGEOf(e.mr, 0, 8))))
	time.Sleep(10 * time.Millisecond)
	requireEmpty(t, e.scq, "SEND stalled on a peer without receives")
	pp.kill()
	wcs := collect(ctx, t, e.scq, 2)
	requireStatus(t, wcs[0], 2, "outstanding SEND to a killed peer", verbs.StatusRetryExcErr)
	requireStatus(t, wcs[1], 3, "WRITE queued behind it", verbs.StatusWRFlushErr)
	requireStatus(t, collect1(ctx, t, e.rcq), 50, "receive of a QP whose peer was killed", verbs.StatusWRFlushErr)
	require.Equal(t, verbs.QPErr, e.qp.State())
	requireFlushed(t, s, e, "QP whose peer was killed")
}

// callArmed sends a request the peer answers twice (armed, then done), runs
// then between the two answers, and returns the second.
func (p *peerProc) callArmed(ctx context.Context, op string, then ...func()) peerResp {
	p.t.Helper()
	if err := p.enc.Encode(peerReq{Op: op}); err != nil {
		p.t.Fatalf("sending %q to the peer: %v", op, err)
	}
	if r := p.reply(ctx, op); r.Err != "" || !r.Armed {
		p.t.Fatalf("peer %s: first reply %+v, want armed", op, r)
	}
	for _, f := range then {
		f()
	}
	r := p.reply(ctx, op)
	if r.Err != "" {
		p.t.Fatalf("%s", r.Err)
	}
	return r
}
