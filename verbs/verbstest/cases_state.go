package verbstest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var stateCases = []tcase{
	{"LegalPath", testLegalPath},
	{"AnyToErrOrReset", testAnyToErrOrReset},
	{"MissingAttribute", testMissingAttribute},
	{"ExtraAttribute", testExtraAttribute},
	{"IllegalTransition", testIllegalTransition},
	{"BadValues", testBadValues},
	{"ErrFlushesOutstanding", testErrFlushes},
	{"ReceiveInRTR", testReceiveInRTR},
}

// stateFixture is a lone QP (plus a peer QP whose address it can use) that
// the state cases drive by hand.
type stateFixture struct {
	s    *suite
	e    *endpoint
	peer *endpoint
}

func (s *suite) newStateFixture(t *testing.T) *stateFixture {
	return &stateFixture{s: s, e: s.newEndpoint(t, s.devA, pairConfig{}), peer: s.newEndpoint(t, s.devB, pairConfig{})}
}

func (f *stateFixture) initAttr() verbs.QPAttr {
	return verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: f.s.opts.Connect.Access}
}

func (f *stateFixture) rtrAttr() verbs.QPAttr {
	o := f.s.opts.Connect
	return verbs.QPAttr{State: verbs.QPRTR, Remote: f.peer.qp.Address(), PathMTU: o.PathMTU, MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer}
}

func (f *stateFixture) rtsAttr(qp verbs.QP) verbs.QPAttr {
	o := f.s.opts.Connect
	return verbs.QPAttr{State: verbs.QPRTS, SQPSN: qp.PSN(), Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MaxQPRdAtomic: o.MaxQPRdAtomic}
}

// qpIn returns a new QP brought to state st (RESET, INIT, RTR or RTS).
func (f *stateFixture) qpIn(t *testing.T, st verbs.QPState) verbs.QP {
	t.Helper()
	qp := f.s.newQP(t, f.e.pd, verbs.QPInitAttr{SendCQ: f.e.scq, RecvCQ: f.e.rcq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	steps := []struct {
		st   verbs.QPState
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{{verbs.QPInit, f.initAttr(), initMask}, {verbs.QPRTR, f.rtrAttr(), rtrMask}, {verbs.QPRTS, f.rtsAttr(qp), rtsMask}}
	for _, step := range steps {
		if step.st > st {
			break
		}
		require.NoError(t, qp.Modify(&step.attr, step.mask), "Modify to %v", step.st)
		require.Equal(t, step.st, qp.State())
	}
	return qp
}

func testLegalPath(t *testing.T, s *suite) {
	f := s.newStateFixture(t)
	qp := f.qpIn(t, verbs.QPReset)
	step := func(attr verbs.QPAttr, mask verbs.AttrMask, want verbs.QPState) {
		t.Helper()
		require.NoError(t, qp.Modify(&attr, mask), "Modify %v with %v", want, mask)
		require.Equal(t, want, qp.State())
	}
	step(f.initAttr(), initMask, verbs.QPInit)
	// INIT→INIT may change the access flags, with or without AttrState.
	step(verbs.QPAttr{State: verbs.QPInit, AccessFlags: verbs.AccessRemoteWrite}, verbs.AttrState|verbs.AttrAccessFlags, verbs.QPInit)
	step(verbs.QPAttr{AccessFlags: verbs.AccessRemoteRead}, verbs.AttrAccessFlags, verbs.QPInit)
	step(f.rtrAttr(), rtrMask, verbs.QPRTR)
	step(f.rtsAttr(qp), rtsMask, verbs.QPRTS)
	step(verbs.QPAttr{State: verbs.QPRTS, MinRNRTimer: 3}, verbs.AttrState|verbs.AttrMinRNRTimer, verbs.QPRTS)
	step(verbs.QPAttr{AccessFlags: verbs.AccessRemoteWrite | verbs.AccessRemoteRead}, verbs.AttrAccessFlags, verbs.QPRTS)
	step(verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState, verbs.QPErr)
	step(verbs.QPAttr{State: verbs.QPReset}, verbs.AttrState, verbs.QPReset)
	step(f.initAttr(), initMask, verbs.QPInit)
	// Optional attributes of INIT→RTR and RTR→RTS are accepted.
	rtr := f.rtrAttr()
	rtr.AccessFlags = verbs.AccessRemoteWrite
	step(rtr, rtrMask|verbs.AttrAccessFlags|verbs.AttrPKeyIndex, verbs.QPRTR)
	rts := f.rtsAttr(qp)
	rts.MinRNRTimer = 2
	step(rts, rtsMask|verbs.AttrMinRNRTimer|verbs.AttrAccessFlags, verbs.QPRTS)
}

func testAnyToErrOrReset(t *testing.T, s *suite) {
	f := s.newStateFixture(t)
	for _, from := range []verbs.QPState{verbs.QPReset, verbs.QPInit, verbs.QPRTR, verbs.QPRTS} {
		for _, to := range []verbs.QPState{verbs.QPErr, verbs.QPReset} {
			qp := f.qpIn(t, from)
			require.NoError(t, qp.Modify(&verbs.QPAttr{State: to}, verbs.AttrState), "%v→%v", from, to)
			require.Equal(t, to, qp.State(), "%v→%v", from, to)
			require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPReset}, verbs.AttrState), "%v→RESET", to)
			require.Equal(t, verbs.QPReset, qp.State())
		}
	}
}

// requireRefused checks that a Modify failed with want (or any error when
// want is nil) and changed nothing.
func requireRefused(t *testing.T, qp verbs.QP, attr verbs.QPAttr, mask verbs.AttrMask, want error, what string) {
	t.Helper()
	before := qp.State()
	err := qp.Modify(&attr, mask)
	require.Error(t, err, "%s: Modify(%v) from %v succeeded", what, mask, before)
	if want != nil {
		require.ErrorIs(t, err, want, "%s", what)
	}
	require.Equal(t, before, qp.State(), "%s: a failed Modify changed the state", what)
}

func (f *stateFixture) transitions() []struct {
	name string
	from verbs.QPState
	attr verbs.QPAttr
	mask verbs.AttrMask
} {
	return []struct {
		name string
		from verbs.QPState
		attr verbs.QPAttr
		mask verbs.AttrMask
	}{
		{"RESET→INIT", verbs.QPReset, f.initAttr(), initMask},
		{"INIT→RTR", verbs.QPInit, f.rtrAttr(), rtrMask},
		{"RTR→RTS", verbs.QPRTR, verbs.QPAttr{}, rtsMask}, // attr filled per QP
	}
}

func testMissingAttribute(t *testing.T, s *suite) {
	f := s.newStateFixture(t)
	for _, tr := range f.transitions() {
		qp := f.qpIn(t, tr.from)
		attr := tr.attr
		if tr.from == verbs.QPRTR {
			attr = f.rtsAttr(qp)
		}
		for bit := verbs.AttrMask(1); bit != 0 && bit <= tr.mask; bit <<= 1 {
			if tr.mask&bit == 0 {
				continue
			}
			var want error = verbs.ErrInvalidArgument
			if bit == verbs.AttrState {
				want = nil // then it is no transition at all: ErrInvalidState or ErrInvalidArgument
			}
			requireRefused(t, qp, attr, tr.mask&^bit, want, fmt.Sprintf("%s without %v", tr.name, bit))
		}
		// The complete mask still works afterwards.
		require.NoError(t, qp.Modify(&attr, tr.mask), "%s after refused attempts", tr.name)
	}
}

func testExtraAttribute(t *testing.T, s *suite) {
	f := s.newStateFixture(t)
	for _, tc := range []struct {
		from  verbs.QPState
		attr  func(qp verbs.QP) verbs.QPAttr
		mask  verbs.AttrMask
		extra verbs.AttrMask
	}{
		{verbs.QPReset, func(verbs.QP) verbs.QPAttr { return f.initAttr() }, initMask, verbs.AttrSQPSN},
		{verbs.QPReset, func(verbs.QP) verbs.QPAttr { return f.initAttr() }, initMask, verbs.AttrPathMTU},
		{verbs.QPInit, func(verbs.QP) verbs.QPAttr { return f.rtrAttr() }, rtrMask, verbs.AttrSQPSN},
		{verbs.QPInit, func(verbs.QP) verbs.QPAttr { return f.rtrAttr() }, rtrMask, verbs.AttrTimeout},
		{verbs.QPRTR, f.rtsAttr, rtsMask, verbs.AttrPathMTU},
		{verbs.QPRTR, f.rtsAttr, rtsMask, verbs.AttrDestQPN},
		{verbs.QPRTS, func(verbs.QP) verbs.QPAttr { return verbs.QPAttr{State: verbs.QPErr} }, verbs.AttrState, verbs.AttrPort},
	} {
		qp := f.qpIn(t, tc.from)
		attr := tc.attr(qp)
		attr.Port = 1
		attr.PathMTU = verbs.MTU1024
		requireRefused(t, qp, attr, tc.mask|tc.extra, verbs.ErrInvalidArgument, fmt.Sprintf("from %v with extra %v", tc.from, tc.extra))
	}
}

func testIllegalTransition(t *testing.T, s *suite) {
	f := s.newStateFixture(t)
	full := verbs.QPAttr{State: 0, Port: 1, PathMTU: verbs.MTU1024, Remote: f.peer.qp.Address(), Timeout: 10, RetryCnt: 1, RNRRetry: 1, MinRNRTimer: 1}
	for _, tc := range []struct{ from, to verbs.QPState }{
		{verbs.QPReset, verbs.QPRTR}, {verbs.QPReset, verbs.QPRTS}, {verbs.QPInit, verbs.QPRTS},
		{verbs.QPRTR, verbs.QPInit}, {verbs.QPRTS, verbs.QPRTR}, {verbs.QPRTS, verbs.QPInit},
		{verbs.QPRTR, verbs.QPRTR},
	} {
		qp := f.qpIn(t, tc.from)
		attr := full
		attr.State = tc.to
		attr.SQPSN = qp.PSN()
		for _, mask := range []verbs.AttrMask{initMask, rtrMask, rtsMask} {
			requireRefused(t, qp, attr, mask, nil, fmt.Sprintf("%v→%v with %v", tc.from, tc.to, mask))
		}
	}
	// From ERR only RESET (or ERR) is legal.
	qp := f.qpIn(t, verbs.QPRTS)
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState))
	requireRefused(t, qp, verbs.QPAttr{State: verbs.QPRTS, SQPSN: qp.PSN(), Timeout: 10, RetryCnt: 1, RNRRetry: 1}, rtsMask, verbs.ErrInvalidState, "ERR→RTS")
	requireRefused(t, qp, f.initAttr(), initMask, verbs.ErrInvalidState, "ERR→INIT")
}

func testBadValues(t *testing.T, s *suite) {
	f := s.newStateFixture(t)
	caps := f.e.dev.Caps()
	garbage := []byte("not a QP address")
	foreign, err := verbs.QPAddress{Provider: "no-such-provider", QPNum: 1, PSN: 1}.Encode()
	require.NoError(t, err)
	type tc struct {
		name string
		from verbs.QPState
		mod  func(a *verbs.QPAttr)
	}
	cases := []tc{
		{"Port0", verbs.QPReset, func(a *verbs.QPAttr) { a.Port = 0 }},
		{"UnknownAccessBits", verbs.QPReset, func(a *verbs.QPAttr) { a.AccessFlags = 1 << 7 }},
		{"MTU0", verbs.QPInit, func(a *verbs.QPAttr) { a.PathMTU = 0 }},
		{"MTU6", verbs.QPInit, func(a *verbs.QPAttr) { a.PathMTU = 6 }},
		{"MinRNRTimer32", verbs.QPInit, func(a *verbs.QPAttr) { a.MinRNRTimer = 32 }},
		{"NilRemote", verbs.QPInit, func(a *verbs.QPAttr) { a.Remote = nil }},
		{"GarbageRemote", verbs.QPInit, func(a *verbs.QPAttr) { a.Remote = garbage }},
		{"ForeignRemote", verbs.QPInit, func(a *verbs.QPAttr) { a.Remote = foreign }},
		{"Timeout32", verbs.QPRTR, func(a *verbs.QPAttr) { a.Timeout = 32 }},
		{"RetryCnt8", verbs.QPRTR, func(a *verbs.QPAttr) { a.RetryCnt = 8 }},
		{"RNRRetry8", verbs.QPRTR, func(a *verbs.QPAttr) { a.RNRRetry = 8 }},
		{"SQPSN25Bits", verbs.QPRTR, func(a *verbs.QPAttr) { a.SQPSN = 1 << 24 }},
	}
	if caps.MaxRdAtom < 255 {
		cases = append(cases,
			tc{"MaxDestRdAtomicAboveCaps", verbs.QPInit, func(a *verbs.QPAttr) { a.MaxDestRdAtomic = uint8(caps.MaxRdAtom + 1) }},
			tc{"MaxQPRdAtomicAboveCaps", verbs.QPRTR, func(a *verbs.QPAttr) { a.MaxQPRdAtomic = uint8(caps.MaxRdAtom + 1) }})
	}
	for _, c := range cases {
		qp := f.qpIn(t, c.from)
		var attr verbs.QPAttr
		var mask verbs.AttrMask
		switch c.from {
		case verbs.QPReset:
			attr, mask = f.initAttr(), initMask
		case verbs.QPInit:
			attr, mask = f.rtrAttr(), rtrMask
		default:
			attr, mask = f.rtsAttr(qp), rtsMask
		}
		c.mod(&attr)
		requireRefused(t, qp, attr, mask, verbs.ErrInvalidArgument, c.name)
	}
}

func testErrFlushes(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	for i := range 5 {
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: uint64(i + 1), SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 8)}}))
	}
	require.NoError(t, p.b.qp.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState))
	for i, wc := range collect(ctx, t, p.b.rcq, 5) {
		requireStatus(t, wc, uint64(i+1), "receive outstanding when the QP moved to ERR", verbs.StatusWRFlushErr)
		require.Equal(t, p.b.qp.Num(), wc.QPNum, "flushed WC.QPNum")
	}
	requireFlushed(t, s, p.b, "QP moved to ERR by Modify")
	// ERR→RESET discards whatever is left; the QP is usable again from INIT.
	require.NoError(t, p.b.qp.Modify(&verbs.QPAttr{State: verbs.QPReset}, verbs.AttrState))
	requirePostErr(t, p.b.qp.PostSend(sendWR(1, verbs.OpSend)), 0, verbs.ErrInvalidState, "PostSend after ERR→RESET")
	if err := p.b.qp.PostRecv(verbs.RecvWR{ID: 1}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostRecv after ERR→RESET: %v, want ErrInvalidState", err)
	}
}

// testReceiveInRTR: a QP in RTR (ready to receive) takes SENDs and WRITEs
// before it is ever moved to RTS.
func testReceiveInRTR(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{noConnect: true})
	ctx := s.ctx(t)
	o := s.opts.Connect
	require.NoError(t, p.b.qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: o.Access}, initMask))
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 8)}}))
	rtr := verbs.QPAttr{State: verbs.QPRTR, Remote: p.a.qp.Address(), PathMTU: o.PathMTU, MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer}
	require.NoError(t, p.b.qp.Modify(&rtr, rtrMask))
	errc := make(chan error, 1)
	go func() { errc <- verbs.Connect(p.a.qp, p.b.qp.Address(), o) }()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Connect to a peer in RTR did not return")
	}
	binary.LittleEndian.PutUint64(p.a.mr.Bytes(), 0x1122334455667788)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 64, verbs.SGEOf(p.a.mr, 0, 8)),
		sendWR(2, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))))
	requireWC(t, collect1(ctx, t, p.b.rcq), 1, verbs.WCRecv, p.b.qp.Num(), "receive of a QP in RTR")
	require.Equal(t, verbs.QPRTR, p.b.qp.State())
	require.EqualValues(t, 0x1122334455667788, binary.LittleEndian.Uint64(p.b.mr.Bytes()[64:]), "WRITE into a QP in RTR")
	require.EqualValues(t, 0x1122334455667788, binary.LittleEndian.Uint64(p.b.mr.Bytes()), "SEND into a QP in RTR")
	sw := collect(ctx, t, p.a.scq, 2)
	requireWC(t, sw[0], 1, verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE to a QP in RTR")
	requireWC(t, sw[1], 2, verbs.WCSend, p.a.qp.Num(), "SEND to a QP in RTR")
	requirePostErr(t, p.b.qp.PostSend(sendWR(3, verbs.OpSend)), 0, verbs.ErrInvalidState, "PostSend in RTR")
}
