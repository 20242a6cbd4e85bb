package verbstest

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var orderingCases = []tcase{
	{"ExecutionOrder", testExecutionOrder},
	{"CompletionOrder", testCompletionOrder},
	{"WriteVisibleAtSend", testWriteVisibleAtSend},
	{"ReadAfterWrite", testReadAfterWrite},
	{"Fence", testFence},
	{"FenceAfterAtomic", testFenceAfterAtomic},
}

var rnrCases = []tcase{
	{"RetryExceeded", testRNRRetryExceeded},
	{"LateRecvSucceeds", testRNRLateRecv},
}

// testExecutionOrder: requests execute at the responder in posting order,
// and SENDs consume receives in posting order.
func testExecutionOrder(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	const k = 24
	// k WRITEs of the same remote word: the last posted must win.
	for i := range k {
		binary.LittleEndian.PutUint64(p.a.mr.Bytes()[i*8:], uint64(i+1))
	}
	for i := range k {
		require.NoError(t, p.a.qp.PostSend(rdmaWR(uint64(i+1), verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, i*8, 8))))
		if (i+1)%8 == 0 {
			wcs := collect(ctx, t, p.a.scq, 8)
			for j, wc := range wcs {
				requireWC(t, wc, uint64(i-7+j+1), verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE completions in posting order")
			}
		}
	}
	doorbell(t, s, p, 100)
	require.EqualValues(t, k, binary.LittleEndian.Uint64(p.b.mr.Bytes()), "the last of %d WRITEs to one word did not win", k)

	// SENDs consume receives in order: receive i gets message i.
	const m = 16
	for i := range m {
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: uint64(200 + i), SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 1024+i*8, 8)}}))
	}
	for i := range m {
		binary.LittleEndian.PutUint64(p.a.mr.Bytes()[4096+i*8:], uint64(1000+i))
		require.NoError(t, p.a.qp.PostSend(sendWR(uint64(200+i), verbs.OpSend, verbs.SGEOf(p.a.mr, 4096+i*8, 8))))
	}
	rw := collect(ctx, t, p.b.rcq, m)
	for i, wc := range rw {
		requireWC(t, wc, uint64(200+i), verbs.WCRecv, p.b.qp.Num(), "receives complete in posting order")
		require.EqualValues(t, 1000+i, binary.LittleEndian.Uint64(p.b.mr.Bytes()[1024+i*8:]), "receive %d got another message", i)
	}
	sw := collect(ctx, t, p.a.scq, m)
	for i, wc := range sw {
		requireWC(t, wc, uint64(200+i), verbs.WCSend, p.a.qp.Num(), "SEND completions in posting order")
	}
}

// testCompletionOrder: completions of a mix of opcodes come in posting
// order, including a READ that takes longer than the small ops after it.
func testCompletionOrder(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{mrSize: 1 << 20})
	ctx := s.ctx(t)
	for i := range 8 {
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, i*64, 64)}}))
	}
	wrs := []verbs.SendWR{
		rdmaWR(1, verbs.OpRDMARead, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 1<<19)),
		sendWR(2, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8)),
		rdmaWR(3, verbs.OpRDMAWrite, p.b.mr, 1<<19, verbs.SGEOf(p.a.mr, 1<<19, 1<<18)),
		rdmaWR(4, verbs.OpRDMAWriteWithImm, p.b.mr, 4096, verbs.SGEOf(p.a.mr, 0, 8)),
		rdmaWR(5, verbs.OpRDMARead, p.b.mr, 0, verbs.SGEOf(p.a.mr, 1<<19, 8)),
		sendWR(6, verbs.OpSendWithImm, verbs.SGEOf(p.a.mr, 0, 8)),
	}
	want := []verbs.WCOpcode{verbs.WCRDMARead, verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMAWrite, verbs.WCRDMARead, verbs.WCSend}
	require.NoError(t, p.a.qp.PostSend(wrs...))
	for i, wc := range collect(ctx, t, p.a.scq, len(wrs)) {
		requireWC(t, wc, uint64(i+1), want[i], p.a.qp.Num(), "mixed opcodes complete in posting order")
	}
	rw := collect(ctx, t, p.b.rcq, 3)
	requireWC(t, rw[0], 100, verbs.WCRecv, p.b.qp.Num(), "first receive")
	requireWC(t, rw[1], 101, verbs.WCRecvRDMAWithImm, p.b.qp.Num(), "second receive (WRITE_WITH_IMM)")
	requireWC(t, rw[2], 102, verbs.WCRecv, p.b.qp.Num(), "third receive")
}

// testWriteVisibleAtSend: a SEND or WRITE_WITH_IMM completing at the target
// implies every earlier WRITE on the QP is visible there.
func testWriteVisibleAtSend(t *testing.T, s *suite) {
	const n = 1 << 20
	p := s.newPair(t, pairConfig{mrSize: 2 * n})
	ctx := s.ctx(t)
	for round := range 6 {
		seed := uint64(300 + round)
		pattern(p.a.mr.Bytes()[:n], seed)
		// Unsignaled WRITEs in two halves, then the doorbell.
		require.NoError(t, p.a.qp.PostSend(
			verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, n/2)}, RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()},
			verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, n/2, n/2)}, RemoteAddr: p.b.mr.Addr() + n/2, RKey: p.b.mr.RKey()}))
		doorOp := verbs.OpSend
		if round%2 == 0 {
			require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, n, 8)}}))
			require.NoError(t, p.a.qp.PostSend(sendWR(3, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 8))))
			requireWC(t, collect1(ctx, t, p.b.rcq), 3, verbs.WCRecv, p.b.qp.Num(), "SEND after WRITEs")
		} else {
			doorOp = verbs.OpRDMAWriteWithImm
			require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 3}))
			wr := rdmaWR(3, verbs.OpRDMAWriteWithImm, p.b.mr, n, verbs.SGEOf(p.a.mr, 0, 8))
			wr.Imm = uint32(round)
			require.NoError(t, p.a.qp.PostSend(wr))
			requireWC(t, collect1(ctx, t, p.b.rcq), 3, verbs.WCRecvRDMAWithImm, p.b.qp.Num(), "WRITE_WITH_IMM after WRITEs")
		}
		// Checked at the receive completion, before the sender's completion.
		requireBytes(t, p.a.mr.Bytes()[:n], p.b.mr.Bytes()[:n], "WRITEs visible when the later SEND/WRITE_WITH_IMM completes at the target")
		requireWC(t, collect1(ctx, t, p.a.scq), 3, verbs.WCOpcodeFor(doorOp), p.a.qp.Num(), "doorbell")
	}
}

// testReadAfterWrite: a READ posted after WRITEs returns what they wrote.
func testReadAfterWrite(t *testing.T, s *suite) {
	const n = 256 << 10
	p := s.newPair(t, pairConfig{mrSize: 2 * n})
	ctx := s.ctx(t)
	for round, size := range []int{8, 4096, n} {
		pattern(p.a.mr.Bytes()[:size], uint64(400+round))
		require.NoError(t, p.a.qp.PostSend(
			verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, size)}, RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()},
			rdmaWR(2, verbs.OpRDMARead, p.b.mr, 0, verbs.SGEOf(p.a.mr, n, size))))
		requireWC(t, collect1(ctx, t, p.a.scq), 2, verbs.WCRDMARead, p.a.qp.Num(), "READ after WRITE")
		requireBytes(t, p.a.mr.Bytes()[:size], p.a.mr.Bytes()[n:n+size], "READ posted after a WRITE returns the written data")
	}
}

// testFence: a fenced WRITE waits for an earlier READ of the same memory,
// so the READ returns the old contents.
func testFence(t *testing.T, s *suite) {
	const n = 64 << 10
	p := s.newPair(t, pairConfig{mrSize: 4 * n})
	ctx := s.ctx(t)
	for round := range 4 {
		old := patterned(n, uint64(500+round))
		copy(p.b.mr.Bytes(), old)
		pattern(p.a.mr.Bytes()[n:2*n], uint64(600+round))
		fenced := rdmaWR(2, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, n, n))
		fenced.Flags |= verbs.SendFence
		require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMARead, p.b.mr, 0, verbs.SGEOf(p.a.mr, 2*n, n)), fenced))
		wcs := collect(ctx, t, p.a.scq, 2)
		requireWC(t, wcs[0], 1, verbs.WCRDMARead, p.a.qp.Num(), "READ before a fenced WRITE")
		requireWC(t, wcs[1], 2, verbs.WCRDMAWrite, p.a.qp.Num(), "fenced WRITE")
		requireBytes(t, old, p.a.mr.Bytes()[2*n:3*n], "READ followed by a fenced WRITE of the same memory saw the WRITE")
		doorbell(t, s, p, 3)
		requireBytes(t, p.a.mr.Bytes()[n:2*n], p.b.mr.Bytes()[:n], "fenced WRITE")
	}
}

// testFenceAfterAtomic: a fenced READ waits for an earlier atomic on the
// same word, so it reads the atomic's result.
func testFenceAfterAtomic(t *testing.T, s *suite) {
	skipNoAtomics(t, s)
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	a := &atomics{t: t, ctx: ctx, qp: p.a.qp, scq: p.a.scq, local: p.a.mr, remote: p.b.mr, roff: 512}
	a.calibrate() // the word holds 1
	for round := range 4 {
		want := uint64(1 + 41*(round+1))
		read := rdmaWR(11, verbs.OpRDMARead, p.b.mr, 512, verbs.SGEOf(p.a.mr, 64, 8))
		read.Flags |= verbs.SendFence
		require.NoError(t, p.a.qp.PostSend(atomicWR(10, verbs.OpAtomicFetchAdd, p.a.mr, 0, p.b.mr, 512, 41, 0), read))
		wcs := collect(ctx, t, p.a.scq, 2)
		requireWC(t, wcs[0], 10, verbs.WCFetchAdd, p.a.qp.Num(), "FETCH_ADD before a fenced READ")
		requireWC(t, wcs[1], 11, verbs.WCRDMARead, p.a.qp.Num(), "fenced READ")
		require.Equal(t, want, a.order.Uint64(p.a.mr.Bytes()[64:72]), "a READ fenced behind FETCH_ADD did not see its result")
	}
}

// requireFlushed posts a signaled and an unsignaled request on qp (in ERR)
// and a receive, and expects each to complete with WR_FLUSH_ERR.
func requireFlushed(t *testing.T, s *suite, e *endpoint, what string) {
	t.Helper()
	ctx := s.ctx(t)
	require.NoError(t, e.qp.PostSend(sendWR(901, verbs.OpSend, verbs.SGEOf(e.mr, 0, 8)),
		verbs.SendWR{ID: 902, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8)}}), "%s: PostSend in ERR", what)
	wcs := collect(ctx, t, e.scq, 2)
	requireStatus(t, wcs[0], 901, what+": signaled request posted in ERR", verbs.StatusWRFlushErr)
	requireStatus(t, wcs[1], 902, what+": unsignaled request posted in ERR", verbs.StatusWRFlushErr)
	require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 903, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8)}}), "%s: PostRecv in ERR", what)
	requireStatus(t, collect1(ctx, t, e.rcq), 903, what+": receive posted in ERR", verbs.StatusWRFlushErr)
}

func testRNRRetryExceeded(t *testing.T, s *suite) {
	for _, tc := range []struct {
		name  string
		retry uint8
		op    verbs.Opcode
	}{
		{"Send/rnr_retry=0", 0, verbs.OpSend},
		{"Send/rnr_retry=2", 2, verbs.OpSend},
		{"WriteWithImm/rnr_retry=0", 0, verbs.OpRDMAWriteWithImm},
	} {
		s.run(t, tc.name, func(t *testing.T) {
			ca, cb := s.opts.Connect, s.opts.Connect
			ca.RNRRetry = tc.retry
			cb.MinRNRTimer = 1
			p := s.newPair(t, pairConfig{connA: &ca, connB: &cb})
			ctx := s.ctx(t)
			// Two requests: the first meets no receive, the second is flushed.
			require.NoError(t, p.a.qp.PostSend(rdmaWR(1, tc.op, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8)),
				rdmaWR(2, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8))))
			wcs := collect(ctx, t, p.a.scq, 2)
			requireStatus(t, wcs[0], 1, tc.op.String()+" without a receive", verbs.StatusRNRRetryExcErr)
			requireStatus(t, wcs[1], 2, "request after the RNR failure", verbs.StatusWRFlushErr)
			require.Equal(t, verbs.QPErr, p.a.qp.State(), "requester QP after RNR_RETRY_EXC_ERR")
			requireFlushed(t, s, p.a, "requester after RNR_RETRY_EXC_ERR")
			requireEmpty(t, p.b.rcq, "responder without receives")
		})
	}
}

func testRNRLateRecv(t *testing.T, s *suite) {
	ca, cb := s.opts.Connect, s.opts.Connect
	ca.RNRRetry = 7 // infinite
	cb.MinRNRTimer = 1
	p := s.newPair(t, pairConfig{connA: &ca, connB: &cb})
	ctx := s.ctx(t)
	src := patterned(512, 77)
	copy(p.a.mr.Bytes(), src)
	require.NoError(t, p.a.qp.PostSend(sendWR(1, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, 512)),
		rdmaWR(2, verbs.OpRDMAWriteWithImm, p.b.mr, 1024, verbs.SGEOf(p.a.mr, 0, 512))))
	// Give the requester time to meet RNR NAKs; the receive then arrives late.
	time.Sleep(30 * time.Millisecond)
	requireEmpty(t, p.a.scq, "SEND with infinite RNR retry and no receive")
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 10, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 512)}}))
	time.Sleep(10 * time.Millisecond)
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 11}))
	rw := collect(ctx, t, p.b.rcq, 2)
	requireWC(t, rw[0], 10, verbs.WCRecv, p.b.qp.Num(), "late receive")
	requireWC(t, rw[1], 11, verbs.WCRecvRDMAWithImm, p.b.qp.Num(), "late receive for WRITE_WITH_IMM")
	requireBytes(t, src, p.b.mr.Bytes()[:512], "SEND data after RNR retries")
	requireBytes(t, src, p.b.mr.Bytes()[1024:1536], "WRITE_WITH_IMM data after RNR retries")
	sw := collect(ctx, t, p.a.scq, 2)
	requireWC(t, sw[0], 1, verbs.WCSend, p.a.qp.Num(), "SEND after RNR retries")
	requireWC(t, sw[1], 2, verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE_WITH_IMM after RNR retries")
}
