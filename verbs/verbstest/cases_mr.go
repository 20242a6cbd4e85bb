package verbstest

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var mrCases = []tcase{
	{"AccessValidation", testMRAccessValidation},
	{"ProviderMemory", testMRProviderMemory},
	{"UserMemory", testMRUserMemory},
	{"DeregisteredLocalKey", testMRDeregisteredLocal},
	{"PDInUse", testPDInUse},
}

func testMRAccessValidation(t *testing.T, s *suite) {
	pd, err := s.devA.AllocPD()
	require.NoError(t, err)
	t.Cleanup(func() { closeBounded(t, "PD.Close", s.opts.CaseTimeout, pd.Close) })
	for _, bad := range []verbs.Access{verbs.AccessRemoteWrite, verbs.AccessRemoteAtomic, verbs.AccessRemoteWrite | verbs.AccessRemoteRead, 1 << 7} {
		mr, err := pd.AllocMR(4096, bad)
		if err == nil {
			mr.Close()
		}
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "AllocMR with access %v", bad)
		mr, err = pd.RegMR(make([]byte, 4096), bad)
		if err == nil {
			mr.Close()
		}
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "RegMR with access %v", bad)
	}
	for _, good := range []verbs.Access{0, verbs.AccessLocalWrite, verbs.AccessRemoteRead, allAccess} {
		mr := s.allocMR(t, pd, 4096, good)
		require.Equal(t, good, mr.Access())
		buf := make([]byte, 4096)
		umr, err := pd.RegMR(buf, good)
		require.NoError(t, err, "RegMR with access %v", good)
		require.Equal(t, good, umr.Access())
		require.NoError(t, umr.Close())
	}
}

func testMRProviderMemory(t *testing.T, s *suite) {
	pd, err := s.devA.AllocPD()
	require.NoError(t, err)
	t.Cleanup(func() { closeBounded(t, "PD.Close", s.opts.CaseTimeout, pd.Close) })
	caps := s.devA.Caps()
	var prev verbs.MR
	for _, n := range []int{1, 4096, 100000} {
		mr := s.allocMR(t, pd, n, allAccess)
		require.Equal(t, n, mr.Len())
		require.Equal(t, verbs.MemProvider, mr.Kind())
		require.NotZero(t, mr.Addr())
		require.Equal(t, make([]byte, n), mr.Bytes(), "AllocMR memory is zeroed")
		require.Equal(t, uint64(uintptr(unsafe.Pointer(&mr.Bytes()[0]))), mr.Addr(), "MR.Addr is the address of Bytes()[0]")
		require.Equal(t, caps.Atomics != verbs.AtomicNone, mr.SupportsAtomics(), "provider memory supports atomics iff the device has them")
		if prev != nil {
			require.NotEqual(t, prev.LKey(), mr.LKey(), "two regions share an lkey")
			require.NotEqual(t, prev.RKey(), mr.RKey(), "two regions share an rkey")
		}
		prev = mr
	}
}

// testMRUserMemory: a registered Go slice is the region's memory, both for
// the local and for the remote side of every operation.
func testMRUserMemory(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	abuf, bbuf := make([]byte, 8192), make([]byte, 8192)
	amr, err := p.a.pd.RegMR(abuf, allAccess)
	require.NoError(t, err)
	t.Cleanup(func() { closeBounded(t, "MR.Close", s.opts.CaseTimeout, amr.Close) })
	bmr, err := p.b.pd.RegMR(bbuf, allAccess)
	require.NoError(t, err)
	t.Cleanup(func() { closeBounded(t, "MR.Close", s.opts.CaseTimeout, bmr.Close) })
	require.Equal(t, verbs.MemUser, amr.Kind())
	require.Equal(t, len(abuf), amr.Len())
	require.Same(t, &abuf[0], &amr.Bytes()[0], "RegMR's Bytes is the registered slice")

	pattern(abuf[:4096], 51)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, bmr, 100, verbs.SGEOf(amr, 0, 4096))))
	requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE between user regions")
	doorbell(t, s, p, 2)
	requireBytes(t, abuf[:4096], bbuf[100:4196], "WRITE between user regions")

	pattern(bbuf[:4096], 52)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(3, verbs.OpRDMARead, bmr, 0, verbs.SGEOf(amr, 4096, 4096))))
	requireWC(t, collect1(ctx, t, p.a.scq), 3, verbs.WCRDMARead, p.a.qp.Num(), "READ between user regions")
	requireBytes(t, bbuf[:4096], abuf[4096:], "READ between user regions")

	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 4, SGL: []verbs.SGE{verbs.SGEOf(bmr, 5000, 100)}}))
	require.NoError(t, p.a.qp.PostSend(sendWR(4, verbs.OpSend, verbs.SGEOf(amr, 10, 100))))
	requireWC(t, collect1(ctx, t, p.b.rcq), 4, verbs.WCRecv, p.b.qp.Num(), "SEND between user regions")
	requireBytes(t, abuf[10:110], bbuf[5000:5100], "SEND between user regions")
	collect1(ctx, t, p.a.scq)
}

func testMRDeregisteredLocal(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	mr, err := p.a.pd.AllocMR(4096, allAccess)
	require.NoError(t, err)
	sge := verbs.SGEOf(mr, 0, 8)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 0, sge)))
	requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE from a registered region")
	require.NoError(t, mr.Close())
	requirePostErr(t, p.a.qp.PostSend(rdmaWR(2, verbs.OpRDMAWrite, p.b.mr, 0, sge)), 0, verbs.ErrBadKey, "lkey of a closed region")
}

func testPDInUse(t *testing.T, s *suite) {
	pd, err := s.devA.AllocPD()
	require.NoError(t, err)
	mr, err := pd.AllocMR(4096, allAccess)
	require.NoError(t, err)
	require.ErrorIs(t, pd.Close(), verbs.ErrInUse, "PD.Close with an open MR")
	require.NoError(t, mr.Close())
	cq := s.newCQ(t, s.devA, 8)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.ErrorIs(t, pd.Close(), verbs.ErrInUse, "PD.Close with an open QP")
	require.NoError(t, qp.Close())
	require.NoError(t, pd.Close(), "PD.Close once its MR and QP are closed")
}
