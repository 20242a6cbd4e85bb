package tcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
	"github.com/stretchr/testify/require"
)

// recordSteer is a verbs.SendSteer that takes every SEND's body into buf
// and records what it was asked and told.
type recordSteer struct {
	buf     []byte
	mu      sync.Mutex
	heads   [][]byte
	steered []bool
}

func (s *recordSteer) Steer(id uint64, head []byte, rest int) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.heads = append(s.heads, bytes.Clone(head))
	return [][]byte{s.buf[:rest]}
}

func (s *recordSteer) Steered(ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steered = append(s.steered, ok)
}

func (s *recordSteer) calls() ([][]byte, []bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.heads, s.steered
}

// sendFrame is a SEND frame (sequence number seq) of n bytes asking for
// an ACK, its payload a pattern.
func sendFrame(q verbs.QP, seq uint32, n int) []byte {
	f := make([]byte, HeaderLen+n)
	EncodeHeader(f, &softrc.Header{Op: softrc.FrameSend, QPN: q.Num(), Seq: seq, Len: uint32(n), Flags: softrc.FlagAckReq})
	for i := range n {
		f[HeaderLen+i] = byte(i*13 + i>>10)
	}
	return f
}

// TestWaiterStreamsLargeSend: a SEND larger than the read buffer is read
// into its receive (or, steered, the steer's buffer after the prefix) by
// the waiter itself as it arrives, as a READ response is. When the
// waiter's ctx ends mid-payload, the peer stalled, the SEND is suspended
// where it is: finished, its receive completed and its ACK sent, once the
// rest arrives; failed, the receive completed with an error and the steer
// told, when the connection is lost instead.
func TestWaiterStreamsLargeSend(t *testing.T) {
	for _, steer := range []bool{false, true} {
		for _, end := range []string{"whole", "suspended", "lost"} {
			t.Run(fmt.Sprintf("steer=%v/%s", steer, end), func(t *testing.T) { testWaiterStreamsSend(t, steer, end) })
		}
	}
}

func testWaiterStreamsSend(t *testing.T, steered bool, end string) {
	const n, pre = readBufSize + 40<<10, 64
	o := testOptions()
	o.MinAckTimeout = time.Minute
	a, mr, c := fakeTargetWith(t, o, n, 0)
	l := attachedLink(t, a.qp)
	var st *recordSteer
	if steered {
		st = &recordSteer{buf: make([]byte, n)}
		a.qp.(verbs.SendSteerer).SteerSends(pre, st)
	}
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 5, SGL: []verbs.SGE{verbs.SGEOf(mr, 0, n)}}))
	f := sendFrame(a.qp, 0, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	half := HeaderLen + n/2
	res := waitAndStream(t, ctx, a, c, l, f, half, "SEND")
	if end == "whole" {
		_, err := c.Write(f[half:])
		require.NoError(t, err)
		require.NoError(t, <-res)
		require.Equal(t, int32(1), l.streamed.Load(), "the SEND was not streamed to its end by the waiter")
		require.Zero(t, l.suspends.Load())
	} else {
		cancelMidFrame(t, l, res, cancel, n/2)
		var none [1]verbs.WC
		require.Zero(t, a.cq.Poll(none[:]), "the receive completed before its SEND was all in")
	}
	if end == "lost" {
		require.NoError(t, c.Close())
		wc := wait(t, a.cq)
		require.Equal(t, uint64(5), wc.ID)
		require.NotEqual(t, verbs.StatusSuccess, wc.Status)
		require.False(t, a.qp.(*softrc.QP).Suspended(), "the lost link left its SEND suspended")
		if steered {
			_, oks := st.calls()
			require.Equal(t, []bool{false}, oks, "the steer was not told its buffer is not whole")
		}
		return
	}
	if end == "suspended" {
		_, err := c.Write(f[half:])
		require.NoError(t, err)
	}
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint64(5), wc.ID)
	require.Equal(t, verbs.WCRecv, wc.Opcode)
	require.Equal(t, uint32(n), wc.ByteLen)
	body := f[HeaderLen:]
	if steered {
		heads, oks := st.calls()
		require.Len(t, heads, 1)
		require.True(t, bytes.Equal(body[:pre], heads[0]), "the steer saw another prefix")
		require.Equal(t, []bool{true}, oks)
		require.True(t, bytes.Equal(body[:pre], mr.Bytes()[:pre]), "the prefix is not in the receive's buffer")
		require.True(t, bytes.Equal(body[pre:], st.buf[:n-pre]), "the body is not in the steer's buffer intact")
	} else {
		require.True(t, bytes.Equal(body, mr.Bytes()[:n]), "the SEND's payload is not in its receive intact")
	}
	// The SEND asked for an ACK: it comes once the SEND is finished.
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	hb := make([]byte, HeaderLen)
	_, err := io.ReadFull(c, hb)
	require.NoError(t, err, "no ACK for the streamed SEND")
	ack, err := DecodeHeader(hb, 1<<30)
	require.NoError(t, err)
	require.Equal(t, softrc.FrameAck, ack.Op)
	require.Equal(t, uint32(0), ack.Seq)
}
