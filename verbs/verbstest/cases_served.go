package verbstest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var servedCases = []tcase{
	{"Reported", testReadServedReported},
	{"LastOfSeveral", testReadServedLastOfSeveral},
	{"NotForFailedRead", testReadServedNotForFailedRead},
}

// servedWR is a READ of n bytes at remote+roff into the local buffer that
// asks the responder to report it served with tag.
func servedWR(id uint64, remote region, roff int, tag uint64, sgl ...verbs.SGE) verbs.SendWR {
	wr := rdmaWR(id, verbs.OpRDMARead, remote, roff, sgl...)
	wr.Flags |= verbs.SendReportServed
	wr.CompareAdd = tag
	return wr
}

// testReadServedReported: a device with Caps.ReadServed reports a READ
// that asked, with its tag and length, on the responder's send CQ, and
// only that one; a device without it refuses the flag at post time.
func testReadServedReported(t *testing.T, s *suite) {
	if !s.devA.Caps().ReadServed {
		p := s.newPair(t, pairConfig{})
		wr := servedWR(1, p.b.mr, 0, 7, verbs.SGEOf(p.a.mr, 0, 8))
		requirePostErr(t, p.a.qp.PostSend(wr), 0, verbs.ErrInvalidArgument, "SendReportServed without Caps.ReadServed")
		return
	}
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		const off, n = 1000, 30000
		const tag = 0xfeedface12345678
		src := patterned(n, 21)
		copy(p.b.mr.Bytes()[off:], src)
		// A plain READ first: it must report nothing, so the first
		// completion on the responder's send CQ is the tagged one's.
		require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMARead, p.b.mr, off, verbs.SGEOf(p.a.mr, 0, n))))
		requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCRDMARead, p.a.qp.Num(), "plain READ")
		require.NoError(t, p.a.qp.PostSend(servedWR(2, p.b.mr, off, tag, verbs.SGEOf(p.a.mr, n, n))))
		requireWC(t, collect1(ctx, t, p.a.scq), 2, verbs.WCRDMARead, p.a.qp.Num(), "READ that asks to be reported")
		requireBytes(t, src, p.a.mr.Bytes()[n:2*n], "read data")
		wc := collect1(ctx, t, p.b.scq)
		requireWC(t, wc, tag, verbs.WCReadServed, p.b.qp.Num(), "responder's report")
		require.Equal(t, uint32(n), wc.ByteLen, "reported length")
		requireEmpty(t, p.b.scq, "one report per READ that asked")
		requireEmpty(t, p.b.rcq, "a READ completes no receive at the target")
	})
}

// testReadServedLastOfSeveral: several READs posted at once, the last
// asking, are reported once, after all of them are answered.
func testReadServedLastOfSeveral(t *testing.T, s *suite) {
	skipUnless(t, s.devA.Caps().ReadServed, "the device does not report READs served")
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	const k, n = 4, 8192
	src := patterned(k*n, 22)
	copy(p.b.mr.Bytes(), src)
	wrs := make([]verbs.SendWR, k)
	for i := range wrs {
		wrs[i] = rdmaWR(uint64(10+i), verbs.OpRDMARead, p.b.mr, i*n, verbs.SGEOf(p.a.mr, i*n, n))
	}
	wrs[k-1].Flags |= verbs.SendReportServed
	wrs[k-1].CompareAdd = 99
	require.NoError(t, p.a.qp.PostSend(wrs...))
	wc := collect1(ctx, t, p.b.scq)
	requireWC(t, wc, 99, verbs.WCReadServed, p.b.qp.Num(), "report of the last READ")
	require.Equal(t, uint32(n), wc.ByteLen)
	for i, w := range collect(ctx, t, p.a.scq, k) {
		requireWC(t, w, uint64(10+i), verbs.WCRDMARead, p.a.qp.Num(), "READ")
	}
	requireBytes(t, src, p.a.mr.Bytes()[:k*n], "read data")
	requireEmpty(t, p.b.scq, "one report")
}

// testReadServedNotForFailedRead: a READ the responder refuses (a bad
// rkey) is never reported served.
func testReadServedNotForFailedRead(t *testing.T, s *suite) {
	skipUnless(t, s.devA.Caps().ReadServed, "the device does not report READs served")
	p := s.newPair(t, pairConfig{})
	wr := servedWR(0, p.b.mr, 64, 5, verbs.SGEOf(p.a.mr, 0, 8))
	wr.RKey ^= 0x5a5a5a00
	s.remoteAccessFailure(t, p, wr, verbs.StatusRemAccessErr)
	requireEmpty(t, p.b.scq, "a refused READ is not served")
}
