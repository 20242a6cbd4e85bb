package tcp

import (
	"bytes"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// lentSide is a side with a receive region large enough for the lent
// pairs' messages.
func lentSide(t *testing.T, n int) (*side, verbs.MR) {
	t.Helper()
	s := newSide(t)
	mr, err := s.pd.AllocMR(n, verbs.AccessLocalWrite)
	require.NoError(t, err)
	return s, mr
}

// lentWR is an inline SEND of hdr (the pair's first part).
func lentWR(id uint64, hdr []byte) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.OpSend, Flags: verbs.SendInline | verbs.SendSignaled, Inline: hdr}
}

// A lent pair arrives whole, header then tail, whatever the caller does
// to the tail once the post returned: the tail is written in the call
// or copied (large ones, more than the socket takes at once, have the
// rest copied by the link: ownCarry), at sizes from one byte to 3 MiB.
func TestLentPairIntact(t *testing.T) {
	const most = 3 << 20 // under inlineMax: the posting goroutine writes it
	a, _ := lentSide(t, 64)
	b, rmr := lentSide(t, most+64)
	connectPair(t, a, b, verbs.DefaultConnectOptions())
	la := attachedLink(t, a.qp)
	// A small send buffer, so that the larger tails do not all go into
	// the socket at once.
	tc, ok := la.c.(*net.TCPConn)
	require.True(t, ok, "a TCP connection")
	require.NoError(t, tc.SetWriteBuffer(64<<10))
	lp, ok := a.qp.(verbs.LentPairPoster)
	require.True(t, ok, "the tcp QP is a LentPairPoster")
	hdr := []byte("header:")
	for i, n := range []int{1, 4 << 10, 64 << 10, 256 << 10, most} {
		tail := bytes.Repeat([]byte{byte(i + 1)}, n)
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{verbs.SGEOf(rmr, 0, len(hdr)+n)}}))
		posted, err := lp.PostSendLentPair(lentWR(uint64(i), hdr), tail)
		require.NoError(t, err)
		require.True(t, posted, "%d bytes: posted on an idle link", n)
		clear(tail) // the caller's buffer is its own again
		wc := wait(t, b.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status, "%d bytes", n)
		require.Equal(t, len(hdr)+n, int(wc.ByteLen), "%d bytes", n)
		got := rmr.Bytes()[:len(hdr)+n]
		require.Equal(t, hdr, got[:len(hdr)], "%d bytes: header", n)
		require.True(t, bytes.Equal(bytes.Repeat([]byte{byte(i + 1)}, n), got[len(hdr):]), "%d bytes: the tail as it was at the post", n)
		require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
	}
	// Some of the larger ones did not go into the socket at once.
	assert.Positive(t, la.ownedCarries.Load(), "partial writes whose rest the link copied")
}

// While another goroutine holds the link's write side (the writer
// goroutine with a large message, here the test), a lent pair is refused
// and nothing is posted: the next request posted is the one that arrives.
func TestLentPairBusyWriter(t *testing.T) {
	a, _ := lentSide(t, 64)
	b, rmr := lentSide(t, 64<<10)
	connectPair(t, a, b, verbs.DefaultConnectOptions())
	la := attachedLink(t, a.qp)
	lp := a.qp.(verbs.LentPairPoster)
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{verbs.SGEOf(rmr, 0, 64<<10)}}))
	la.wmu.Lock()
	posted, err := lp.PostSendLentPair(lentWR(2, []byte("h")), bytes.Repeat([]byte{7}, 32<<10))
	la.wmu.Unlock()
	require.NoError(t, err)
	require.False(t, posted, "refused while the write side is held")
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.OpSend, Flags: verbs.SendInline | verbs.SendSignaled, Inline: []byte("plain")}))
	wc := wait(t, b.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	assert.Equal(t, "plain", string(rmr.Bytes()[:wc.ByteLen]), "the refused pair was not posted")
	assert.Equal(t, uint64(4), wait(t, a.cq).ID)
}

// A lent pair refused for want of a receive (RNR) is never sent again
// from memory the caller has taken back: either the NAK came before the
// post returned, and the tail was copied (the SEND goes once the receive
// is posted, intact), or it came after, and the request completes with
// LOC_LEN_ERR (verbs.LentPairPoster). Which one depends on the timing; a
// few rounds see both on this machine, and neither ever delivers garbage.
func TestLentPairRNR(t *testing.T) {
	for round := range 4 {
		a, _ := lentSide(t, 64)
		b, rmr := lentSide(t, 16<<10)
		connectPair(t, a, b, shortConnect())
		attachedLink(t, a.qp) // a QP without its link yet refuses lent pairs
		lp := a.qp.(verbs.LentPairPoster)
		tail := bytes.Repeat([]byte{byte(round + 1)}, 8<<10)
		posted, err := lp.PostSendLentPair(lentWR(1, []byte("h")), tail)
		require.NoError(t, err)
		require.True(t, posted)
		clear(tail)
		// Until its retries have gone on for a while, or it failed.
		var wc [1]verbs.WC
		deadline := time.Now().Add(50 * time.Millisecond)
		for a.cq.Poll(wc[:]) == 0 && time.Now().Before(deadline) {
			runtime.Gosched()
		}
		if wc[0].ID == 1 {
			assert.Equal(t, verbs.StatusLocLenErr, wc[0].Status, "round %d", round)
			continue
		}
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 2, SGL: []verbs.SGE{verbs.SGEOf(rmr, 0, 16<<10)}}))
		got := wait(t, b.cq)
		require.Equal(t, verbs.StatusSuccess, got.Status, "round %d", round)
		require.Equal(t, 1+8<<10, int(got.ByteLen))
		assert.True(t, bytes.Equal(bytes.Repeat([]byte{byte(round + 1)}, 8<<10), rmr.Bytes()[1:1+8<<10]), "round %d: the tail as it was at the post", round)
		assert.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status, "round %d", round)
	}
}

// A lent pair must be an inline SEND, within the device's message size.
func TestLentPairInvalid(t *testing.T) {
	a, b := connected(t, verbs.DefaultConnectOptions())
	_ = b
	lp := a.qp.(verbs.LentPairPoster)
	_, err := lp.PostSendLentPair(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}}, []byte("x"))
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	_, err = lp.PostSendLentPair(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendInline, Inline: []byte("h")}, []byte("x"))
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
}
