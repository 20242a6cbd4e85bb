//go:build linux

package shm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// TestInlineSend covers SENDs small enough to travel in their completion
// (layout.go) beside ones just too large: the data lands in the receive's
// buffers, across two SGEs, with nothing written past it, and a receive
// too small fails on both sides as an ordinary SEND does.
func TestInlineSend(t *testing.T) {
	for _, tc := range []struct {
		name   string
		n      int
		sges   []int // receive buffer pieces
		fitErr bool  // the receive is too small
	}{
		{"1", 1, []int{64}, false},
		{"max", rcInlineMax, []int{64}, false},
		{"max+1", rcInlineMax + 1, []int{64}, false},
		{"two-sges", 40, []int{13, 100}, false},
		{"two-sges-exact", 40, []int{13, 27}, false},
		{"too-small", 30, []int{29}, true},
		{"too-small-two", 30, []int{10, 19}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newEnd(t, Options{}), newEnd(t, Options{})
			connectPair(t, a, b)
			rbuf := b.mr.Bytes()
			for i := range rbuf[:4096] {
				rbuf[i] = 0xee
			}
			var sgl []verbs.SGE
			off := 0
			for _, n := range tc.sges {
				sgl = append(sgl, verbs.SGEOf(b.mr, off, n))
				off += n + 100 // a gap that must stay untouched
			}
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: sgl}))
			src := pattern(tc.n, 3)
			copy(a.mr.Bytes(), src)
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSendWithImm, Imm: 99, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, tc.n)}}))
			sw, rw := waitWC(t, a.scq), waitWC(t, b.rcq)
			if tc.fitErr {
				require.Equal(t, verbs.StatusRemInvReqErr, sw.Status)
				require.Equal(t, verbs.StatusLocLenErr, rw.Status)
				return
			}
			require.Equal(t, verbs.StatusSuccess, sw.Status)
			require.Equal(t, verbs.StatusSuccess, rw.Status)
			require.Equal(t, uint64(7), rw.ID)
			require.Equal(t, uint32(tc.n), rw.ByteLen)
			require.Equal(t, uint32(99), rw.Imm)
			require.NotZero(t, rw.Flags&verbs.WCWithImm)
			want := make([]byte, 4096)
			for i := range want {
				want[i] = 0xee
			}
			rest, off := src, 0
			for _, n := range tc.sges {
				k := copy(want[off:off+n], rest)
				rest = rest[k:]
				off += n + 100
			}
			require.Equal(t, want, rbuf[:4096])
		})
	}
	t.Run("smallest-posted", func(t *testing.T) {
		// The sender skips reading the receive's descriptor when the data
		// fits the smallest receive ever posted: a smaller receive posted
		// later must lower that, so a SEND too large for it still fails
		// on both sides; one that fits a later, larger receive succeeds.
		for _, tc := range []struct {
			name   string
			sizes  [2]int
			fitErr bool
		}{{"smaller-after-larger", [2]int{64, 16}, true}, {"larger-after-smaller", [2]int{16, 64}, false}} {
			t.Run(tc.name, func(t *testing.T) {
				a, b := newEnd(t, Options{}), newEnd(t, Options{})
				connectPair(t, a, b)
				for i, n := range tc.sizes {
					require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(7 + i), SGL: []verbs.SGE{verbs.SGEOf(b.mr, 128*i, n)}}))
				}
				copy(a.mr.Bytes(), pattern(30, 5))
				for i, n := range []int{8, 30} {
					require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(1 + i), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
						SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, n)}}))
					sw, rw := waitWC(t, a.scq), waitWC(t, b.rcq)
					if i == 1 && tc.fitErr {
						require.Equal(t, verbs.StatusRemInvReqErr, sw.Status)
						require.Equal(t, verbs.StatusLocLenErr, rw.Status)
						continue
					}
					require.Equal(t, verbs.StatusSuccess, sw.Status, "send %d", i)
					require.Equal(t, verbs.StatusSuccess, rw.Status, "send %d", i)
					require.Equal(t, pattern(30, 5)[:n], b.mr.Bytes()[128*i:128*i+n])
				}
			})
		}
	})
	t.Run("region-closed", func(t *testing.T) {
		// A receive whose region is deregistered before the SEND lands
		// completes with LOC_PROT_ERR, inline or not.
		for _, n := range []int{8, 200} {
			a, b := newEnd(t, Options{}), newEnd(t, Options{})
			connectPair(t, a, b)
			m, err := b.pd.RegMR(make([]byte, 4096), allAccess)
			require.NoError(t, err)
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(m, 0, 4096)}}))
			require.NoError(t, m.Close())
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, n)}}))
			rw := waitWC(t, b.rcq)
			require.Equal(t, verbs.StatusLocProtErr, rw.Status, "%d bytes", n)
		}
	})
}

// TestInlinePair covers verbs.InlinePairPoster: the payload is the
// request's Inline followed by the tail, in the completion's line or in
// the receive's buffer; a request that must wait for a receive keeps its
// own copy of both parts; MaxInline bounds both parts together.
func TestInlinePair(t *testing.T) {
	var _ verbs.InlinePairPoster = (*QP)(nil)
	for _, tc := range []struct {
		name       string
		head, tail int
		queued     bool // no receive is posted until after the post
	}{
		{"in-completion", 12, 20, false},
		{"in-buffer", 12, 52, false},
		{"no-head", 0, 64, false},
		{"queued", 16, 48, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newEnd(t, Options{}), newEnd(t, Options{})
			connectPair(t, a, b)
			recv := func() {
				require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 7, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 256)}}))
			}
			if !tc.queued {
				recv()
			}
			want := pattern(tc.head+tc.tail, 9)
			head, tail := append([]byte(nil), want[:tc.head]...), append([]byte(nil), want[tc.head:]...)
			require.NoError(t, a.qp.PostSendInlinePair(verbs.SendWR{ID: 1, Opcode: verbs.OpSend,
				Flags: verbs.SendInline | verbs.SendSignaled, Inline: head}, tail))
			if tc.queued {
				// Both parts are the caller's again once the post returns.
				clear(head)
				clear(tail)
				recv()
			}
			sw, rw := waitWC(t, a.scq), waitWC(t, b.rcq)
			require.Equal(t, verbs.StatusSuccess, sw.Status)
			require.Equal(t, uint32(len(want)), sw.ByteLen)
			require.Equal(t, verbs.StatusSuccess, rw.Status)
			require.Equal(t, uint32(len(want)), rw.ByteLen)
			require.Equal(t, want, b.mr.Bytes()[:len(want)])
		})
	}
	t.Run("errors", func(t *testing.T) {
		a, b := newEnd(t, Options{}), newEnd(t, Options{})
		connectPair(t, a, b)
		err := a.qp.PostSendInlinePair(verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendInline, Inline: make([]byte, 12)}, make([]byte, 53))
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "65 bytes over a max inline of 64")
		err = a.qp.PostSendInlinePair(verbs.SendWR{Opcode: verbs.OpSend}, make([]byte, 8))
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, "no SendInline flag")
	})
}
