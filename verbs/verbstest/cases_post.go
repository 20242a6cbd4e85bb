package verbstest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var postErrorCases = []tcase{
	{"InvalidSendRequests", testInvalidSendRequests},
	{"TooManyRecvSGEs", testTooManyRecvSGEs},
	{"BadLKey", testBadLKey},
	{"IndexAndPartialPost", testPartialPost},
	{"SendQueueFull", testSendQueueFull},
	{"RecvQueueFull", testRecvQueueFull},
	{"WrongState", testPostWrongState},
	{"MessageTooLarge", testMessageTooLarge},
}

func testInvalidSendRequests(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	qc := p.a.qp.Cap()
	good := func() verbs.SendWR { return rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8)) }
	tooMany := make([]verbs.SGE, qc.MaxSendSGE+1)
	for i := range tooMany {
		tooMany[i] = verbs.SGEOf(p.a.mr, i, 1)
	}
	cases := []struct {
		name   string
		wr     verbs.SendWR
		atomic bool
	}{
		{"TooManySGEs", rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 0, tooMany...), false},
		{"InlineTooLong", verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendInline, Inline: make([]byte, qc.MaxInline+1)}, false},
		{"InlineRead", verbs.SendWR{ID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.SendInline, Inline: make([]byte, 1), RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()}, false},
		{"InlineWithoutFlag", verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Inline: make([]byte, 1)}, false},
		{"UnknownOpcode", verbs.SendWR{ID: 1, Opcode: 42}, false},
		{"UnknownFlags", verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: 0x80}, false},
		{"ServedOnSend", verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendReportServed}, false},
		{"MisalignedAtomic", atomicWR(1, verbs.OpAtomicFetchAdd, p.a.mr, 0, p.b.mr, 4, 1, 0), true},
		{"ShortAtomicSGE", func() verbs.SendWR {
			wr := atomicWR(1, verbs.OpAtomicCmpAndSwp, p.a.mr, 0, p.b.mr, 0, 1, 0)
			wr.SGL[0].Length = 4
			return wr
		}(), true},
		{"AtomicTwoSGEs", func() verbs.SendWR {
			wr := atomicWR(1, verbs.OpAtomicFetchAdd, p.a.mr, 0, p.b.mr, 0, 1, 0)
			wr.SGL = append(wr.SGL, verbs.SGEOf(p.a.mr, 8, 8))
			return wr
		}(), true},
	}
	for _, tc := range cases {
		s.run(t, tc.name, func(t *testing.T) {
			if tc.atomic {
				skipNoAtomics(t, s)
			}
			if tc.name == "TooManySGEs" {
				skipUnless(t, qc.MaxSendSGE < 64, "the QP takes %d SGEs", qc.MaxSendSGE)
			}
			requirePostErr(t, p.a.qp.PostSend(tc.wr), 0, verbs.ErrInvalidArgument, tc.name)
			requirePostErr(t, p.a.qp.PostSend(good(), tc.wr), 1, verbs.ErrInvalidArgument, tc.name+" after a good request")
			requireWC(t, collect1(s.ctx(t), t, p.a.scq), 1, verbs.WCRDMAWrite, p.a.qp.Num(), "the good request before the bad one")
			require.Equal(t, verbs.QPRTS, p.a.qp.State(), "a post-time error must not change the QP's state")
		})
	}
}

func testTooManyRecvSGEs(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	sgl := make([]verbs.SGE, p.b.qp.Cap().MaxRecvSGE+1)
	for i := range sgl {
		sgl[i] = verbs.SGEOf(p.b.mr, i, 1)
	}
	requirePostErr(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 1}, verbs.RecvWR{ID: 2, SGL: sgl}), 1, verbs.ErrInvalidArgument, "receive with too many SGEs")
	// The first receive was posted.
	ctx := s.ctx(t)
	require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}))
	requireWC(t, collect1(ctx, t, p.b.rcq), 1, verbs.WCRecv, p.b.qp.Num(), "receive posted before the bad one")
	requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCSend, p.a.qp.Num(), "SEND")
}

func testBadLKey(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	mr := p.a.mr
	closed, err := p.a.pd.AllocMR(4096, allAccess)
	require.NoError(t, err)
	closedSGE := verbs.SGEOf(closed, 0, 8)
	require.NoError(t, closed.Close())
	pd2, err := p.a.dev.AllocPD()
	require.NoError(t, err)
	t.Cleanup(func() { closeBounded(t, "PD.Close", s.opts.CaseTimeout, pd2.Close) })
	other := s.allocMR(t, pd2, 4096, allAccess)
	for _, tc := range []struct {
		name string
		sge  verbs.SGE
	}{
		{"UnknownKey", verbs.SGE{Addr: mr.Addr(), Length: 8, LKey: mr.LKey() ^ 0x5a5a5a00}},
		{"PastEnd", verbs.SGE{Addr: mr.Addr() + uint64(mr.Len()) - 4, Length: 8, LKey: mr.LKey()}},
		{"BeforeStart", verbs.SGE{Addr: mr.Addr() - 8, Length: 16, LKey: mr.LKey()}},
		{"DeregisteredMR", closedSGE},
		{"OtherPD", verbs.SGEOf(other, 0, 8)},
	} {
		s.run(t, tc.name, func(t *testing.T) {
			requirePostErr(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 0, tc.sge)), 0, verbs.ErrBadKey, "send SGE "+tc.name)
			requirePostErr(t, p.a.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{tc.sge}}), 0, verbs.ErrBadKey, "receive SGE "+tc.name)
			require.Equal(t, verbs.QPRTS, p.a.qp.State())
		})
	}
	s.run(t, "InlineSkipsKeyCheck", func(t *testing.T) {
		skipUnless(t, p.a.qp.Cap().MaxInline >= 8, "the QP takes %d bytes inline", p.a.qp.Cap().MaxInline)
		require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
			Inline: make([]byte, 8), RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()}))
		requireWC(t, collect1(s.ctx(t), t, p.a.scq), 2, verbs.WCRDMAWrite, p.a.qp.Num(), "inline WRITE")
	})
}

// testPartialPost: a list stops at its first bad request; the ones before
// it were posted and complete, the ones after it were not.
func testPartialPost(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	w := func(id uint64) verbs.SendWR {
		return rdmaWR(id, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8))
	}
	bad := w(3)
	bad.SGL[0].LKey ^= 0x5a5a5a00
	requirePostErr(t, p.a.qp.PostSend(w(1), w(2), bad, w(4)), 2, verbs.ErrBadKey, "third of four requests has a bad lkey")
	require.NoError(t, p.a.qp.PostSend(w(5)))
	wcs := collect(ctx, t, p.a.scq, 3)
	for i, id := range []uint64{1, 2, 5} {
		requireWC(t, wcs[i], id, verbs.WCRDMAWrite, p.a.qp.Num(), "requests around a refused one")
	}
	requireEmpty(t, p.a.scq, "request after the refused one must not have been posted")

	badRecv := verbs.RecvWR{ID: 12, SGL: []verbs.SGE{{Addr: p.b.mr.Addr(), Length: 8, LKey: p.b.mr.LKey() ^ 0x5a5a5a00}}}
	requirePostErr(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 11}, badRecv, verbs.RecvWR{ID: 13}), 1, verbs.ErrBadKey, "second of three receives has a bad lkey")
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 14}))
	require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 6, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}, verbs.SendWR{ID: 7, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}))
	rw := collect(ctx, t, p.b.rcq, 2)
	requireWC(t, rw[0], 11, verbs.WCRecv, p.b.qp.Num(), "receive before the refused one")
	requireWC(t, rw[1], 14, verbs.WCRecv, p.b.qp.Num(), "receive posted after the refused list")
	collect(ctx, t, p.a.scq, 2)
}

// testSendQueueFull stalls the send queue (SENDs that meet no receive, with
// infinite RNR retry) and overfills it.
func testSendQueueFull(t *testing.T, s *suite) {
	ca := s.opts.Connect
	ca.RNRRetry = 7
	p := s.newPair(t, pairConfig{cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}, connA: &ca})
	ctx := s.ctx(t)
	depth := p.a.qp.Cap().MaxSendWR
	wrs := make([]verbs.SendWR, depth+1)
	for i := range wrs {
		wrs[i] = sendWR(uint64(i+1), verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))
	}
	requirePostErr(t, p.a.qp.PostSend(wrs...), depth, verbs.ErrQueueFull, "one request more than the granted MaxSendWR")
	requirePostErr(t, p.a.qp.PostSend(wrs[0]), 0, verbs.ErrQueueFull, "a request on a full queue")
	// Receives unblock the queue: every posted SEND completes, in order.
	for i := range depth {
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: uint64(i + 1), SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 8)}}))
		requireWC(t, collect1(ctx, t, p.b.rcq), uint64(i+1), verbs.WCRecv, p.b.qp.Num(), "receive releasing a stalled SEND")
	}
	for i, wc := range collect(ctx, t, p.a.scq, depth) {
		requireWC(t, wc, uint64(i+1), verbs.WCSend, p.a.qp.Num(), "stalled SEND")
	}
	require.NoError(t, p.a.qp.PostSend(wrs[0]), "a drained queue takes requests again")
}

func testRecvQueueFull(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	depth := p.b.qp.Cap().MaxRecvWR
	wrs := make([]verbs.RecvWR, depth+1)
	for i := range wrs {
		wrs[i] = verbs.RecvWR{ID: uint64(i + 1)}
	}
	requirePostErr(t, p.b.qp.PostRecv(wrs...), depth, verbs.ErrQueueFull, "one receive more than the granted MaxRecvWR")
	ctx := s.ctx(t)
	require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}))
	requireWC(t, collect1(ctx, t, p.b.rcq), 1, verbs.WCRecv, p.b.qp.Num(), "first receive of a full queue")
	collect1(ctx, t, p.a.scq)
	require.NoError(t, p.b.qp.PostRecv(wrs[0]), "a consumed receive frees its slot")
}

func testPostWrongState(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{noConnect: true})
	ctx := s.ctx(t)
	send := sendWR(1, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))
	recv := func(id uint64) verbs.RecvWR {
		return verbs.RecvWR{ID: id, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 8)}}
	}
	requirePostErr(t, p.a.qp.PostSend(send), 0, verbs.ErrInvalidState, "PostSend in RESET")
	requirePostErr(t, p.b.qp.PostRecv(recv(1)), 0, verbs.ErrInvalidState, "PostRecv in RESET")

	o := s.opts.Connect
	for _, qp := range []verbs.QP{p.a.qp, p.b.qp} {
		require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: o.Access},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	}
	requirePostErr(t, p.a.qp.PostSend(send), 0, verbs.ErrInvalidState, "PostSend in INIT")
	require.NoError(t, p.b.qp.PostRecv(recv(2)), "PostRecv in INIT")

	require.NoError(t, p.a.qp.Modify(&verbs.QPAttr{State: verbs.QPRTR, Remote: p.b.qp.Address(), PathMTU: o.PathMTU,
		MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer}, rtrMask))
	requirePostErr(t, p.a.qp.PostSend(send), 0, verbs.ErrInvalidState, "PostSend in RTR")
	require.NoError(t, p.a.qp.PostRecv(verbs.RecvWR{ID: 3}), "PostRecv in RTR")

	// Connect finishes both from where they are; the receive posted in INIT is used.
	s.connect(t, p.a.qp, p.b.qp, o, o)
	require.NoError(t, p.a.qp.PostSend(send))
	requireWC(t, collect1(ctx, t, p.b.rcq), 2, verbs.WCRecv, p.b.qp.Num(), "receive posted in INIT")
	requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCSend, p.a.qp.Num(), "SEND after connecting")
}

const (
	initMask = verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
	rtrMask  = verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	rtsMask  = verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
)

// testMessageTooLarge: a request longer than Caps.MaxMsgSize is refused at
// post time (IBTA reports LOC_LEN_ERR; the verbs contract catches it when
// posted). Its SGEs all point into one lazily allocated region, so nothing
// is touched.
func testMessageTooLarge(t *testing.T, s *suite) {
	c := s.devA.Caps()
	l := min(c.MaxMRSize, 1<<30, 1<<32-1)
	k := int(c.MaxMsgSize/l) + 1
	skipUnless(t, k <= c.MaxSGE && k <= 16, "a message over MaxMsgSize %d needs %d SGEs of %d bytes; the device allows %d", c.MaxMsgSize, k, l, c.MaxSGE)
	p := s.newPair(t, pairConfig{cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: k, MaxRecvSGE: 1}})
	big, err := p.a.pd.AllocMR(int(l), verbs.AccessLocalWrite)
	if err != nil {
		t.Skipf("cannot allocate a %d-byte region to build the request: %v", l, err)
	}
	t.Cleanup(func() { closeBounded(t, "MR.Close", s.opts.CaseTimeout, big.Close) })
	sgl := make([]verbs.SGE, k)
	for i := range sgl {
		sgl[i] = verbs.SGEOf(big, 0, int(l))
	}
	requirePostErr(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 0, sgl...)), 0, verbs.ErrInvalidArgument,
		fmt.Sprintf("a %d-byte WRITE (MaxMsgSize %d)", uint64(k)*l, c.MaxMsgSize))
}
