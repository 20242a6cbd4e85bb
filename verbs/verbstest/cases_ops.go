package verbstest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var opsCases = []tcase{
	{"Send", testSend},
	{"SendWithImm", testSendWithImm},
	{"RDMAWrite", testRDMAWrite},
	{"RDMAWriteWithImm", testRDMAWriteWithImm},
	{"RDMARead", testRDMARead},
	{"ScatterGather", testScatterGather},
	{"ZeroLength", testZeroLength},
	{"Large", testLarge},
	{"Inline", testInline},
	{"Unsignaled", testUnsignaled},
	{"SigAll", testSigAll},
}

// eachTopology runs fn on a pair across two devices and on a pair within
// one device: loopback inside a device must work the same.
func (s *suite) eachTopology(t *testing.T, cfg pairConfig, fn func(t *testing.T, p *pair)) {
	for _, same := range []bool{false, true} {
		name := "TwoDevices"
		if same {
			name = "SameDevice"
		}
		s.run(t, name, func(t *testing.T) {
			c := cfg
			c.sameDevice = same
			fn(t, s.newPair(t, c))
		})
	}
}

func sendWR(id uint64, op verbs.Opcode, sgl ...verbs.SGE) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: sgl}
}

func rdmaWR(id uint64, op verbs.Opcode, remote region, roff int, sgl ...verbs.SGE) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: sgl,
		RemoteAddr: remote.Addr() + uint64(roff), RKey: remote.RKey()}
}

func testSend(t *testing.T, s *suite) {
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		for i, n := range []int{1, 100, 4096, 40000} {
			id := uint64(i + 1)
			src := patterned(n, id)
			copy(p.a.mr.Bytes(), src)
			clear(p.b.mr.Bytes())
			require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 100 + id, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, n+16)}}))
			require.NoError(t, p.a.qp.PostSend(sendWR(id, verbs.OpSend, verbs.SGEOf(p.a.mr, 0, n))))
			rwc := collect1(ctx, t, p.b.rcq)
			requireWC(t, rwc, 100+id, verbs.WCRecv, p.b.qp.Num(), "receiver")
			require.EqualValues(t, n, rwc.ByteLen, "receiver WC.ByteLen")
			require.Zero(t, rwc.Flags&verbs.WCWithImm, "SEND without immediate has WITH_IMM set")
			requireBytes(t, src, p.b.mr.Bytes()[:n], "received data")
			require.Equal(t, make([]byte, 16), p.b.mr.Bytes()[n:n+16], "bytes past the message in the receive buffer changed")
			requireWC(t, collect1(ctx, t, p.a.scq), id, verbs.WCSend, p.a.qp.Num(), "sender")
		}
		requireEmpty(t, p.a.scq, "sender CQ after all sends")
		requireEmpty(t, p.b.rcq, "receiver CQ after all receives")
	})
}

func testSendWithImm(t *testing.T, s *suite) {
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		// The values catch byte swapping (0x01020304), sign extension
		// (0x80000000) and truncation (0xffffffff).
		for i, imm := range []uint32{0, 1, 0x01020304, 0x80000000, 0xffffffff, 0xdeadbeef} {
			id := uint64(i + 1)
			src := patterned(64, id)
			copy(p.a.mr.Bytes(), src)
			require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 100 + id, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 64)}}))
			wr := sendWR(id, verbs.OpSendWithImm, verbs.SGEOf(p.a.mr, 0, 64))
			wr.Imm = imm
			require.NoError(t, p.a.qp.PostSend(wr))
			rwc := collect1(ctx, t, p.b.rcq)
			requireWC(t, rwc, 100+id, verbs.WCRecv, p.b.qp.Num(), "receiver of SEND_WITH_IMM")
			require.NotZero(t, rwc.Flags&verbs.WCWithImm, "receiver WC lacks WITH_IMM")
			require.Equal(t, imm, rwc.Imm, "immediate data %#x came back as %#x", imm, rwc.Imm)
			require.EqualValues(t, 64, rwc.ByteLen)
			requireBytes(t, src, p.b.mr.Bytes()[:64], "received data")
			requireWC(t, collect1(ctx, t, p.a.scq), id, verbs.WCSend, p.a.qp.Num(), "sender of SEND_WITH_IMM")
		}
	})
}

// doorbell sends a zero-length SEND from a to b and waits for both
// completions. Its receive completing at b implies every earlier WRITE
// from a is visible in b's memory.
func doorbell(t *testing.T, s *suite, p *pair, id uint64) {
	t.Helper()
	ctx := s.ctx(t)
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: id}))
	require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}))
	rwc := collect1(ctx, t, p.b.rcq)
	requireWC(t, rwc, id, verbs.WCRecv, p.b.qp.Num(), "doorbell receive")
	require.Zero(t, rwc.ByteLen)
	requireWC(t, collect1(ctx, t, p.a.scq), id, verbs.WCSend, p.a.qp.Num(), "doorbell send")
}

func testRDMAWrite(t *testing.T, s *suite) {
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		const off, n = 1000, 20000
		src := patterned(n, 7)
		copy(p.a.mr.Bytes()[50:], src)
		// A WRITE consumes no receive: this one must be left for the doorbell.
		require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, off, verbs.SGEOf(p.a.mr, 50, n))))
		requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE requester")
		requireEmpty(t, p.b.rcq, "a WRITE completes nothing at the target")
		doorbell(t, s, p, 2)
		got := p.b.mr.Bytes()
		requireBytes(t, src, got[off:off+n], "written data")
		require.Equal(t, make([]byte, off), got[:off], "bytes before the written range changed")
		require.Equal(t, make([]byte, 64), got[off+n:off+n+64], "bytes after the written range changed")
	})
}

func testRDMAWriteWithImm(t *testing.T, s *suite) {
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		const off, n = 300, 5000
		src := patterned(n, 9)
		copy(p.a.mr.Bytes(), src)
		// A receive without SGEs is enough for WRITE_WITH_IMM.
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 11}))
		// One with an SGE: the data must still go to the remote address, not here.
		for i := range 16 {
			p.b.mr.Bytes()[40000+i] = 0xee
		}
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 12, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 40000, 16)}}))
		for i, imm := range []uint32{0xa1b2c3d4, 0x00000001} {
			id := uint64(i + 1)
			wr := rdmaWR(id, verbs.OpRDMAWriteWithImm, p.b.mr, off+i*n, verbs.SGEOf(p.a.mr, 0, n))
			wr.Imm = imm
			require.NoError(t, p.a.qp.PostSend(wr))
			rwc := collect1(ctx, t, p.b.rcq)
			requireWC(t, rwc, 11+id-1, verbs.WCRecvRDMAWithImm, p.b.qp.Num(), "WRITE_WITH_IMM target")
			require.EqualValues(t, n, rwc.ByteLen, "WRITE_WITH_IMM target WC.ByteLen is the write length")
			require.NotZero(t, rwc.Flags&verbs.WCWithImm, "WRITE_WITH_IMM target WC lacks WITH_IMM")
			require.Equal(t, imm, rwc.Imm)
			requireBytes(t, src, p.b.mr.Bytes()[off+i*n:off+(i+1)*n], "data written with immediate")
			// The sender's completion opcode is RDMA_WRITE.
			requireWC(t, collect1(ctx, t, p.a.scq), id, verbs.WCRDMAWrite, p.a.qp.Num(), "WRITE_WITH_IMM requester")
		}
		require.Equal(t, []byte{0xee, 0xee, 0xee, 0xee}, p.b.mr.Bytes()[40000:40004], "WRITE_WITH_IMM wrote into the receive buffer")
	})
}

func testRDMARead(t *testing.T, s *suite) {
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		const off, n = 2000, 30000
		src := patterned(n, 11)
		copy(p.b.mr.Bytes()[off:], src)
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 5}))
		require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMARead, p.b.mr, off, verbs.SGEOf(p.a.mr, 100, n))))
		requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCRDMARead, p.a.qp.Num(), "READ requester")
		requireBytes(t, src, p.a.mr.Bytes()[100:100+n], "read data")
		require.Equal(t, make([]byte, 100), p.a.mr.Bytes()[:100], "bytes before the READ's local buffer changed")
		requireEmpty(t, p.b.rcq, "a READ completes nothing at the target")
		// The READ consumed no receive: the doorbell finds ID 5 first.
		require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}))
		requireWC(t, collect1(ctx, t, p.b.rcq), 5, verbs.WCRecv, p.b.qp.Num(), "receive after READ")
		requireWC(t, collect1(ctx, t, p.a.scq), 2, verbs.WCSend, p.a.qp.Num(), "SEND after READ")
	})
}

func testScatterGather(t *testing.T, s *suite) {
	skipUnless(t, s.devA.Caps().MaxSGE >= 3, "device allows %d SGEs per request; scatter/gather needs 3", s.devA.Caps().MaxSGE)
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		a2 := s.allocMR(t, p.a.pd, 4096, allAccess)
		b2 := s.allocMR(t, p.b.pd, 4096, allAccess)
		pattern(p.a.mr.Bytes(), 21)
		pattern(a2.Bytes(), 22)
		// Gather from three pieces of two regions.
		gather := []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 100), verbs.SGEOf(a2, 50, 1000), verbs.SGEOf(p.a.mr, 5000, 3)}
		var want []byte
		want = append(want, p.a.mr.Bytes()[0:100]...)
		want = append(want, a2.Bytes()[50:1050]...)
		want = append(want, p.a.mr.Bytes()[5000:5003]...)

		t.Run("Send", func(t *testing.T) {
			scatter := []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 10), verbs.SGEOf(b2, 0, 1000), verbs.SGEOf(p.b.mr, 20000, 500)}
			require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: scatter}))
			require.NoError(t, p.a.qp.PostSend(sendWR(1, verbs.OpSend, gather...)))
			rwc := collect1(ctx, t, p.b.rcq)
			requireWC(t, rwc, 1, verbs.WCRecv, p.b.qp.Num(), "scattered receive")
			require.EqualValues(t, len(want), rwc.ByteLen)
			var got []byte
			got = append(got, p.b.mr.Bytes()[0:10]...)
			got = append(got, b2.Bytes()[0:1000]...)
			got = append(got, p.b.mr.Bytes()[20000:20000+len(want)-1010]...)
			requireBytes(t, want, got, "gathered SEND into scattered receive")
			require.Equal(t, make([]byte, 8), p.b.mr.Bytes()[20000+len(want)-1010:][:8], "receive wrote past the message")
			requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCSend, p.a.qp.Num(), "gathered SEND")
		})
		t.Run("Write", func(t *testing.T) {
			require.NoError(t, p.a.qp.PostSend(rdmaWR(2, verbs.OpRDMAWrite, p.b.mr, 30000, gather...)))
			requireWC(t, collect1(ctx, t, p.a.scq), 2, verbs.WCRDMAWrite, p.a.qp.Num(), "gathered WRITE")
			doorbell(t, s, p, 3)
			requireBytes(t, want, p.b.mr.Bytes()[30000:30000+len(want)], "gathered WRITE")
		})
		t.Run("Read", func(t *testing.T) {
			src := patterned(3000, 23)
			copy(p.b.mr.Bytes()[40000:], src)
			clear(a2.Bytes())
			scatter := []verbs.SGE{verbs.SGEOf(a2, 0, 1), verbs.SGEOf(p.a.mr, 60000, 1999), verbs.SGEOf(a2, 100, 1000)}
			require.NoError(t, p.a.qp.PostSend(rdmaWR(4, verbs.OpRDMARead, p.b.mr, 40000, scatter...)))
			requireWC(t, collect1(ctx, t, p.a.scq), 4, verbs.WCRDMARead, p.a.qp.Num(), "scattered READ")
			var got []byte
			got = append(got, a2.Bytes()[0:1]...)
			got = append(got, p.a.mr.Bytes()[60000:61999]...)
			got = append(got, a2.Bytes()[100:1100]...)
			requireBytes(t, src, got, "scattered READ")
		})
	})
}

func testZeroLength(t *testing.T, s *suite) {
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		// SEND with no SGE into a receive with one and into one with none.
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, 64)}}, verbs.RecvWR{ID: 2}))
		require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled},
			verbs.SendWR{ID: 2, Opcode: verbs.OpSendWithImm, Flags: verbs.SendSignaled, Imm: 0x55aa}))
		wcs := collect(ctx, t, p.b.rcq, 2)
		requireWC(t, wcs[0], 1, verbs.WCRecv, p.b.qp.Num(), "zero-length SEND")
		require.Zero(t, wcs[0].ByteLen)
		requireWC(t, wcs[1], 2, verbs.WCRecv, p.b.qp.Num(), "zero-length SEND_WITH_IMM")
		require.Zero(t, wcs[1].ByteLen)
		require.NotZero(t, wcs[1].Flags&verbs.WCWithImm)
		require.EqualValues(t, 0x55aa, wcs[1].Imm)
		sw := collect(ctx, t, p.a.scq, 2)
		requireWC(t, sw[0], 1, verbs.WCSend, p.a.qp.Num(), "zero-length SEND")
		requireWC(t, sw[1], 2, verbs.WCSend, p.a.qp.Num(), "zero-length SEND_WITH_IMM")

		// Zero-length WRITE, with and without immediate.
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 3}))
		require.NoError(t, p.a.qp.PostSend(rdmaWR(3, verbs.OpRDMAWrite, p.b.mr, 0), func() verbs.SendWR {
			wr := rdmaWR(4, verbs.OpRDMAWriteWithImm, p.b.mr, 0)
			wr.Imm = 77
			return wr
		}()))
		rwc := collect1(ctx, t, p.b.rcq)
		requireWC(t, rwc, 3, verbs.WCRecvRDMAWithImm, p.b.qp.Num(), "zero-length WRITE_WITH_IMM")
		require.Zero(t, rwc.ByteLen)
		require.EqualValues(t, 77, rwc.Imm)
		sw = collect(ctx, t, p.a.scq, 2)
		requireWC(t, sw[0], 3, verbs.WCRDMAWrite, p.a.qp.Num(), "zero-length WRITE")
		requireWC(t, sw[1], 4, verbs.WCRDMAWrite, p.a.qp.Num(), "zero-length WRITE_WITH_IMM")
	})
}

func testLarge(t *testing.T, s *suite) {
	n := s.opts.LargeSize
	c := s.devA.Caps()
	skipUnless(t, c.MaxMsgSize >= uint64(n) && c.MaxMRSize >= uint64(n),
		"device limits (MaxMsgSize %d, MaxMRSize %d) are below the %d-byte large case", c.MaxMsgSize, c.MaxMRSize, n)
	p := s.newPair(t, pairConfig{mrSize: n})
	ctx := s.ctx(t)
	pattern(p.a.mr.Bytes(), 31)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, n))))
	requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCRDMAWrite, p.a.qp.Num(), "large WRITE")
	doorbell(t, s, p, 2)
	requireBytes(t, p.a.mr.Bytes(), p.b.mr.Bytes(), "large WRITE")

	pattern(p.b.mr.Bytes(), 32)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(3, verbs.OpRDMARead, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, n))))
	requireWC(t, collect1(ctx, t, p.a.scq), 3, verbs.WCRDMARead, p.a.qp.Num(), "large READ")
	requireBytes(t, p.b.mr.Bytes(), p.a.mr.Bytes(), "large READ")
}

func testInline(t *testing.T, s *suite) {
	skipUnless(t, s.devA.Caps().MaxInline >= 16, "device allows %d bytes inline", s.devA.Caps().MaxInline)
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		ctx := s.ctx(t)
		n := min(p.a.qp.Cap().MaxInline, 64)
		src := patterned(n, 41)
		buf := append([]byte(nil), src...)
		require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(p.b.mr, 0, n)}}, verbs.RecvWR{ID: 2}))
		// Inline data is copied at post time: the caller may scribble on it at once.
		require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: buf}))
		for i := range buf {
			buf[i] = 0xff
		}
		rwc := collect1(ctx, t, p.b.rcq)
		requireWC(t, rwc, 1, verbs.WCRecv, p.b.qp.Num(), "inline SEND")
		require.EqualValues(t, n, rwc.ByteLen)
		requireBytes(t, src, p.b.mr.Bytes()[:n], "inline SEND data (mutated after PostSend)")
		requireWC(t, collect1(ctx, t, p.a.scq), 1, verbs.WCSend, p.a.qp.Num(), "inline SEND")

		copy(buf, src)
		wr := verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled | verbs.SendInline, Inline: buf,
			RemoteAddr: p.b.mr.Addr() + 1000, RKey: p.b.mr.RKey(), Imm: 3}
		require.NoError(t, p.a.qp.PostSend(wr))
		for i := range buf {
			buf[i] = 0xfe
		}
		rwc = collect1(ctx, t, p.b.rcq)
		requireWC(t, rwc, 2, verbs.WCRecvRDMAWithImm, p.b.qp.Num(), "inline WRITE_WITH_IMM")
		requireBytes(t, src, p.b.mr.Bytes()[1000:1000+n], "inline WRITE_WITH_IMM data (mutated after PostSend)")
		requireWC(t, collect1(ctx, t, p.a.scq), 2, verbs.WCRDMAWrite, p.a.qp.Num(), "inline WRITE_WITH_IMM")

		copy(buf, src)
		require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline, Inline: buf,
			RemoteAddr: p.b.mr.Addr() + 2000, RKey: p.b.mr.RKey()}))
		clear(buf)
		requireWC(t, collect1(ctx, t, p.a.scq), 3, verbs.WCRDMAWrite, p.a.qp.Num(), "inline WRITE")
		doorbell(t, s, p, 4)
		requireBytes(t, src, p.b.mr.Bytes()[2000:2000+n], "inline WRITE data (mutated after PostSend)")
	})
}

func testUnsignaled(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	ctx := s.ctx(t)
	t.Run("NoCompletionOnSuccess", func(t *testing.T) {
		for i := range 5 {
			require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: uint64(i + 1), Opcode: verbs.OpRDMAWrite,
				SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, i*8, 8)}, RemoteAddr: p.b.mr.Addr() + uint64(i*8), RKey: p.b.mr.RKey()}))
		}
		require.NoError(t, p.a.qp.PostSend(rdmaWR(6, verbs.OpRDMAWrite, p.b.mr, 64, verbs.SGEOf(p.a.mr, 64, 8))))
		// Completions come in posting order, so an unsignaled one would show up first.
		requireWC(t, collect1(ctx, t, p.a.scq), 6, verbs.WCRDMAWrite, p.a.qp.Num(), "signaled WRITE after five unsignaled ones")
		requireEmpty(t, p.a.scq, "after the signaled completion")
	})
	t.Run("SlotsFreedBySignaledCompletion", func(t *testing.T) {
		// Unsignaled requests hold send-queue slots until a later signaled
		// one completes; signalling once per queue depth must keep the
		// queue from ever filling.
		depth := p.a.qp.Cap().MaxSendWR
		id := uint64(100)
		for round := range 4 {
			for i := range depth {
				id++
				wr := verbs.SendWR{ID: id, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 8)},
					RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()}
				if i == depth-1 {
					wr.Flags = verbs.SendSignaled
				}
				require.NoError(t, p.a.qp.PostSend(wr), "round %d, request %d of a queue of %d", round, i, depth)
			}
			requireWC(t, collect1(ctx, t, p.a.scq), id, verbs.WCRDMAWrite, p.a.qp.Num(), "the signaled request of a round")
		}
		requireEmpty(t, p.a.scq, "after four rounds")
	})
}

func testSigAll(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{sigAll: true})
	ctx := s.ctx(t)
	for i := range 3 {
		require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: uint64(i + 1), Opcode: verbs.OpRDMAWrite,
			SGL: []verbs.SGE{verbs.SGEOf(p.a.mr, 0, 8)}, RemoteAddr: p.b.mr.Addr(), RKey: p.b.mr.RKey()}))
	}
	wcs := collect(ctx, t, p.a.scq, 3)
	for i, wc := range wcs {
		requireWC(t, wc, uint64(i+1), verbs.WCRDMAWrite, p.a.qp.Num(), "SigAll QP, request without SendSignaled")
	}
}

// region is the remote side of an RDMA request: a local MR, or one that
// lives in the peer process.
type region interface {
	Addr() uint64
	RKey() uint32
}

// remoteMR is a region known by its address and rkey only.
type remoteMR struct {
	addr uint64
	rkey uint32
}

func (r remoteMR) Addr() uint64 { return r.addr }
func (r remoteMR) RKey() uint32 { return r.rkey }
