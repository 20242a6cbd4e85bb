package verbstest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var errorCases = []tcase{
	{"RecvTooSmall", testRecvTooSmall},
	{"BadRKey", testBadRKey},
	{"OutOfRange", testOutOfRange},
	{"MRWithoutRemoteAccess", testMRWithoutRemoteAccess},
	{"RemoteMRFromOtherPD", testRemoteOtherPD},
	{"DeregisteredRemoteMR", testDeregisteredRemote},
	{"QPAccessFlags", testQPAccessFlags},
	{"NoResponderResources", testNoResponderResources},
	{"UnsignaledErrorCompletes", testUnsignaledError},
	{"ReadIntoMRWithoutLocalWrite", testReadIntoReadOnly},
}

// remoteAccessFailure runs wr (built against b's memory) on a fresh pair
// and checks the IBTA class C behaviour: the requester's request fails with
// one of want, the requests behind it are flushed, both QPs end in ERR, the
// responder's pending receive is flushed and later work on either side is
// flushed.
func (s *suite) remoteAccessFailure(t *testing.T, p *pair, wr verbs.SendWR, want ...verbs.Status) {
	t.Helper()
	ctx := s.ctx(t)
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 50, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 64)}}))
	wr.ID = 1
	require.NoError(t, p.a.qp.PostSend(wr, rdmaWR(2, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8)),
		sendWR(3, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))))
	wcs := collect(ctx, t, p.a.scq, 3)
	requireStatus(t, wcs[0], 1, wr.Opcode.String(), want...)
	requireStatus(t, wcs[1], 2, "WRITE queued behind the failed request", verbs.StatusWRFlushErr)
	requireStatus(t, wcs[2], 3, "SEND queued behind the failed request", verbs.StatusWRFlushErr)
	require.Equal(t, verbs.QPErr, p.a.qp.State(), "requester QP after %v", wcs[0].Status)
	requireFlushed(t, s, p.a, "requester after "+wcs[0].Status.String())
	if wcs[0].Status == verbs.StatusRemAccessErr || wcs[0].Status == verbs.StatusRemInvReqErr {
		// A NAK of class C moves the responder to ERR too. A receive that
		// was not in progress is flushed. A WRITE_WITH_IMM takes its receive
		// before the checks, so that receive completes with the error:
		// LOC_ACCESS_ERR on IBTA hardware, the NAK's status on rxe
		// (rxe_resp.c completes it with qp->resp.status).
		waitState(ctx, t, p.b.qp, verbs.QPErr, "responder after sending "+wcs[0].Status.String())
		recvOK := []verbs.Status{verbs.StatusWRFlushErr}
		if wr.Opcode == verbs.OpRDMAWriteWithImm {
			recvOK = []verbs.Status{verbs.StatusLocAccessErr, wcs[0].Status}
		}
		requireStatus(t, collect1(ctx, t, p.b.rcq), 50, "responder's pending receive", recvOK...)
		requireFlushed(t, s, p.b, "responder after "+wcs[0].Status.String())
	}
}

func testRecvTooSmall(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 16)}}))
	require.NoError(t, p.a.qp.PostSend(sendWR(1, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 64)),
		sendWR(2, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))))
	wcs := collect(ctx, t, p.a.scq, 2)
	requireStatus(t, wcs[0], 1, "SEND of 64 bytes into a 16-byte receive", verbs.StatusRemInvReqErr)
	requireStatus(t, wcs[1], 2, "SEND behind it", verbs.StatusWRFlushErr)
	// IBTA and hardware: LOC_LEN_ERR; rxe: REM_INV_REQ_ERR.
	requireStatus(t, collect1(ctx, t, p.b.rcq), 7, "16-byte receive of a 64-byte SEND", verbs.StatusLocLenErr, verbs.StatusRemInvReqErr)
	require.Equal(t, verbs.QPErr, p.a.qp.State())
	waitState(ctx, t, p.b.qp, verbs.QPErr, "responder after a too-small receive")
	requireFlushed(t, s, p.a, "requester after REM_INV_REQ_ERR")
	requireFlushed(t, s, p.b, "responder after a too-small receive")
}

func testBadRKey(t *testing.T, s *suite) {
	for _, op := range []verbs.Opcode{verbs.OpRDMAWrite, verbs.OpRDMARead, verbs.OpRDMAWriteWithImm} {
		s.run(t, op.String(), func(t *testing.T) {
			p := s.newPair(t, pairConfig{})
			wr := rdmaWR(0, op, p.b.mr, 64, verbs.SGEOf(p.a.mr, 0, 8))
			wr.RKey ^= 0x5a5a5a00
			s.remoteAccessFailure(t, p, wr, verbs.StatusRemAccessErr)
		})
	}
}

func testOutOfRange(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name string
		op   verbs.Opcode
		off  int64 // relative to the region's start; negative is below it
		n    int
	}{
		{"WritePastEnd", verbs.OpRDMAWrite, 64<<10 - 4, 8},
		{"WriteBeforeStart", verbs.OpRDMAWrite, -8, 8},
		{"ReadPastEnd", verbs.OpRDMARead, 64<<10 - 1, 2},
		{"ReadFarAway", verbs.OpRDMARead, 1 << 40, 8},
	} {
		s.run(t, tc.name, func(t *testing.T) {
			p := s.newPair(t, pairConfig{})
			wr := verbs.SendWR{Opcode: tc.op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, tc.n)},
				RemoteAddr: uint64(int64(p.b.mr.Addr()) + tc.off), RKey: p.b.mr.RKey()}
			s.remoteAccessFailure(t, p, wr, verbs.StatusRemAccessErr)
		})
	}
}

func testMRWithoutRemoteAccess(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name   string
		access verbs.Access
		op     verbs.Opcode
		atomic bool
	}{
		{"WriteWithoutRemoteWrite", verbs.AccessLocalWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, verbs.OpRDMAWrite, false},
		{"WriteWithImmWithoutRemoteWrite", verbs.AccessLocalWrite | verbs.AccessRemoteRead, verbs.OpRDMAWriteWithImm, false},
		{"ReadWithoutRemoteRead", verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic, verbs.OpRDMARead, false},
		{"AtomicWithoutRemoteAtomic", verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead, verbs.OpAtomicFetchAdd, true},
	} {
		s.run(t, tc.name, func(t *testing.T) {
			if tc.atomic {
				skipUnless(t, s.devB.Caps().Atomics != verbs.AtomicNone, "device has no atomics (Caps.Atomics = AtomicNone)")
			}
			p := s.newPair(t, pairConfig{})
			target := s.allocMR(t, p.b.pd, 4096, tc.access)
			s.remoteAccessFailure(t, p, rdmaWR(0, tc.op, target, 0, verbs.SGEOf(p.a.mr, 0, 8)), verbs.StatusRemAccessErr)
		})
	}
}

func testRemoteOtherPD(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	pd2, err := p.b.dev.AllocPD()
	require.NoError(t, err)
	t.Cleanup(func() { closeBounded(t, "PD.Close", s.opts.CaseTimeout, pd2.Close) })
	other := s.allocMR(t, pd2, 4096, allAccess)
	s.remoteAccessFailure(t, p, rdmaWR(0, verbs.OpRDMAWrite, other, 0, verbs.SGEOf(p.a.mr, 0, 8)), verbs.StatusRemAccessErr)
}

func testDeregisteredRemote(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	gone, err := p.b.pd.AllocMR(4096, allAccess)
	require.NoError(t, err)
	// It works while registered...
	require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, gone, 0, verbs.SGEOf(p.a.mr, 0, 8))))
	requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE to a registered region")
	wr := rdmaWR(0, verbs.OpRDMAWrite, gone, 0, verbs.SGEOf(p.a.mr, 0, 8))
	require.NoError(t, gone.Close())
	// ...and its rkey is refused once it is closed.
	s.remoteAccessFailure(t, p, wr, verbs.StatusRemAccessErr)
}

// testQPAccessFlags: an inbound operation the responder QP's access flags
// do not allow. rxe answers NAK-InvalidRequest (REM_INV_REQ_ERR), hardware
// may answer NAK-RemoteAccess (REM_ACCESS_ERR); both are accepted.
func testQPAccessFlags(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name   string
		access verbs.Access
		op     verbs.Opcode
		atomic bool
	}{
		{"WriteNotAllowed", verbs.AccessRemoteRead | verbs.AccessRemoteAtomic, verbs.OpRDMAWrite, false},
		{"ReadNotAllowed", verbs.AccessRemoteWrite | verbs.AccessRemoteAtomic, verbs.OpRDMARead, false},
		{"AtomicNotAllowed", verbs.AccessRemoteWrite | verbs.AccessRemoteRead, verbs.OpAtomicCmpAndSwp, true},
	} {
		s.run(t, tc.name, func(t *testing.T) {
			if tc.atomic {
				skipUnless(t, s.devB.Caps().Atomics != verbs.AtomicNone, "device has no atomics (Caps.Atomics = AtomicNone)")
			}
			cb := s.opts.Connect
			cb.Access = tc.access
			p := s.newPair(t, pairConfig{connB: &cb})
			s.remoteAccessFailure(t, p, rdmaWR(0, tc.op, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8)),
				verbs.StatusRemInvReqErr, verbs.StatusRemAccessErr)
		})
	}
	s.run(t, "SendNeedsNoAccess", func(t *testing.T) {
		cb := s.opts.Connect
		cb.Access = 0
		p := s.newPair(t, pairConfig{connB: &cb})
		ctx := s.ctx(t)
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 8)}}))
		require.NoError(t, p.a.qp.PostSend(sendWR(1, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))))
		requireWC(t, collect1(ctx, t, p.b.rcq), 1, verbs.WCRecv, p.b.qp.Num(), "SEND to a QP with no remote access")
		requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCSend, p.a.qp.Num(), "SEND to a QP with no remote access")
	})
}

// testNoResponderResources: a READ or atomic arriving at a responder whose
// MaxDestRdAtomic is 0 is an invalid request.
func testNoResponderResources(t *testing.T, s *suite) {
	cb := s.opts.Connect
	cb.MaxDestRdAtomic = 0
	p := s.newPair(t, pairConfig{connB: &cb})
	s.remoteAccessFailure(t, p, rdmaWR(0, verbs.OpRDMARead, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8)), verbs.StatusRemInvReqErr)
}

// testUnsignaledError: an error completes even an unsignaled request.
func testUnsignaledError(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	require.NoError(t, p.a.qp.PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 8)}, RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()},
		verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 8)}, RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey() ^ 0x77000000},
		verbs.SendWR{ID: 3, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 8)}, RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()}))
	wcs := collect(ctx, t, p.a.scq, 2)
	requireStatus(t, wcs[0], 2, "unsignaled WRITE with a bad rkey", verbs.StatusRemAccessErr)
	requireStatus(t, wcs[1], 3, "unsignaled WRITE behind it", verbs.StatusWRFlushErr)
	requireEmpty(t, p.a.scq, "the successful unsignaled WRITE before the error")
}

// testReadIntoReadOnly: READ results land locally, so the local region
// needs LocalWrite. A provider may refuse the request at post time
// (ErrBadKey or ErrInvalidArgument) or complete it with LOC_PROT_ERR.
func testReadIntoReadOnly(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	ro := s.allocMR(t, p.a.pd, 4096, verbs.AccessRemoteRead)
	err := p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMARead, p.b.mr, 0, verbs.SGEOf(ro, 0, 8)))
	if err != nil {
		var ve *verbs.Error
		require.ErrorAs(t, err, &ve)
		require.Equal(t, 0, ve.Index)
		require.True(t, errors.Is(err, verbs.ErrBadKey) || errors.Is(err, verbs.ErrInvalidArgument), "READ into a region without LocalWrite: %v", err)
		t.Logf("variant: refused at post time: %v", err)
		return
	}
	t.Logf("variant: completes with LOC_PROT_ERR")
	requireStatus(t, collect1(ctx, t, p.a.scq), 1, "READ into a region without LocalWrite", verbs.StatusLocProtErr)
	require.Equal(t, verbs.QPErr, p.a.qp.State())
}
