package tcp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
	"github.com/stretchr/testify/require"
)

// streamSetup posts a READ of n bytes from a fake peer into a fresh MR and
// returns the side, its MR, the peer's connection, the READ response frame
// the peer is to write (a pattern) and the link. The ACK timeout is far
// beyond the test, whose peer pauses mid-frame on purpose.
func streamSetup(t *testing.T, n int) (*side, verbs.MR, net.Conn, []byte, *link) {
	t.Helper()
	return streamSetupWith(t, testOptions(), n)
}

func streamSetupWith(t *testing.T, o Options, n int) (*side, verbs.MR, net.Conn, []byte, *link) {
	t.Helper()
	o.MinAckTimeout = time.Minute
	a, mr, c := fakeTargetWith(t, o, n, 0)
	l := attachedLink(t, a.qp)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(mr, 0, n)}, RemoteAddr: 1 << 20, RKey: 7}))
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	hb := make([]byte, HeaderLen)
	_, err := io.ReadFull(c, hb)
	require.NoError(t, err)
	req, err := DecodeHeader(hb, 1<<30)
	require.NoError(t, err)
	require.Equal(t, softrc.FrameReadReq, req.Op)
	f := make([]byte, HeaderLen+n)
	EncodeHeader(f, &softrc.Header{Op: softrc.FrameReadResp, QPN: a.qp.Num(), Seq: req.Seq, Len: uint32(n)})
	for i := range n {
		f[HeaderLen+i] = byte(i*11 + i>>12)
	}
	return a, mr, c, f, l
}

// waitAndSend starts a Wait on a's CQ, waits until that waiter drives the
// link itself (it holds the read token until its completion), then has the
// fake peer write the first upto bytes of the frame f; the Wait's result
// comes on the channel returned.
func waitAndSend(t *testing.T, ctx context.Context, a *side, c net.Conn, f []byte, upto int) <-chan error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- a.cq.Wait(ctx) }()
	awaitPoller(t, a.qp)
	_, err := c.Write(f[:upto])
	require.NoError(t, err)
	return res
}

// waitAndStream is waitAndSend that then waits until the waiter has
// begun streaming the frame (what names it in the failure).
func waitAndStream(t *testing.T, ctx context.Context, a *side, c net.Conn, l *link, f []byte, upto int, what string) <-chan error {
	t.Helper()
	res := waitAndSend(t, ctx, a, c, f, upto)
	require.Eventually(t, func() bool { return l.streamBytes.Load() > 0 }, 10*time.Second, time.Millisecond,
		"the waiter did not stream the "+what)
	return res
}

// cancelMidFrame waits until the waiter (its Wait's result on res) has
// streamed the first streamed bytes of a frame's payload, the peer
// stalled after them, then ends its ctx (cancel): the Wait returns with
// the ctx's error, the frame suspended.
func cancelMidFrame(t *testing.T, l *link, res <-chan error, cancel func(), streamed int) {
	t.Helper()
	require.Eventually(t, func() bool { return l.streamBytes.Load() == int64(streamed) }, 10*time.Second, time.Millisecond,
		"the waiter did not stream what came of the frame")
	cancel()
	select {
	case err := <-res:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait overran its ctx while streaming a frame")
	}
	require.Equal(t, int32(1), l.suspends.Load(), "the frame was not suspended")
}

// checkRead waits for the READ's completion and checks the bytes placed.
func checkRead(t *testing.T, a *side, mr verbs.MR, f []byte) {
	t.Helper()
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint64(9), wc.ID)
	require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:len(f)-HeaderLen]), "READ data not placed intact")
}

// TestWaiterStreamsLargeReadResponse: a READ response larger than the read
// buffer is read into place by the waiter itself as it arrives, in pieces
// with pauses: neither waited for whole (awaitQueued) nor, when larger than
// a waiter waits for whole (pollFrameMax), left to the reader goroutine.
func TestWaiterStreamsLargeReadResponse(t *testing.T) {
	for _, n := range []int{readBufSize + 40<<10, pollFrameMax + 256<<10} {
		t.Run(fmt.Sprintf("bytes=%d", n), func(t *testing.T) { testWaiterStreams(t, n) })
	}
}

func testWaiterStreams(t *testing.T, n int) {
	a, mr, c, f, l := streamSetup(t, n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	third := HeaderLen + n/3
	res := waitAndStream(t, ctx, a, c, l, f, third, "response")
	_, err := c.Write(f[third:])
	require.NoError(t, err)
	require.NoError(t, <-res)
	checkRead(t, a, mr, f)
	require.Equal(t, int32(1), l.streamed.Load(), "the response was not streamed to its end by the waiter")
	require.Equal(t, int32(0), l.suspends.Load())
}

// TestStreamedReadSuspends: a waiter streaming a READ response returns when
// its ctx ends mid-payload, the peer stalled; the frame is suspended where
// it is and finished once the rest arrives, intact; and a connection lost
// mid-frame fails the READ rather than leaving it waiting.
// With a long PollSpin the ctx's end finds the waiter polling the socket
// (spinRead) rather than asleep in a read.
func TestStreamedReadSuspends(t *testing.T) {
	const n = 2 * pollFrameMax
	for _, spin := range []time.Duration{0, time.Minute} {
		for _, lose := range []bool{false, true} {
			name := "rest arrives"
			if lose {
				name = "connection lost"
			}
			t.Run(fmt.Sprintf("%s/spin=%v", name, spin), func(t *testing.T) { testStreamedReadSuspends(t, n, spin, lose) })
		}
	}
}

func testStreamedReadSuspends(t *testing.T, n int, spin time.Duration, lose bool) {
	o := testOptions()
	o.PollSpin = spin
	a, mr, c, f, l := streamSetupWith(t, o, n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	half := HeaderLen + n/2
	res := waitAndSend(t, ctx, a, c, f, half)
	// All that came is placed: the waiter waits on a stalled socket
	// (polls it, with a spin) when its ctx ends.
	cancelMidFrame(t, l, res, cancel, n/2)
	if spin > 0 && streamSpins {
		require.Positive(t, l.spinStream.Load(), "the waiter did not poll the socket for the payload")
		require.Zero(t, l.spinGaveUp.Load(), "a minute's spin gave up")
	}
	if lose {
		require.NoError(t, c.Close())
		wc := wait(t, a.cq)
		require.Equal(t, uint64(9), wc.ID)
		require.NotEqual(t, verbs.StatusSuccess, wc.Status)
		require.False(t, a.qp.(*softrc.QP).Suspended(), "the lost link left its READ suspended")
		return
	}
	_, err := c.Write(f[half:])
	require.NoError(t, err)
	checkRead(t, a, mr, f)
}

// TestStreamingReadPolls: with PollSpin, a waiter streaming a READ response
// takes its payload by polling the socket while bytes keep coming (no
// wake-up per segment for the sender to pay); it sleeps once nothing came
// for PollSpin, and does not poll at all while a writer goroutine of the
// transport writes (that may need the network poller this goroutine would
// keep from running); without PollSpin it never polls.
func TestStreamingReadPolls(t *testing.T) {
	const n = pollFrameMax + 256<<10
	for _, tc := range []struct {
		name    string
		spin    time.Duration
		writing bool
	}{
		{"spin", time.Minute, false},
		{"spin runs out", time.Millisecond, false},
		{"writer writing", time.Minute, true},
		{"no spin", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.spin > 0 && !streamSpins {
				t.Skip("a streaming waiter polls only where it can look into the socket (Linux)")
			}
			o := testOptions()
			o.PollSpin = tc.spin
			a, mr, c, f, l := streamSetupWith(t, o, n)
			if tc.writing {
				l.t.writers.Add(1)
				defer l.t.writers.Add(-1)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			third := HeaderLen + n/3
			res := waitAndStream(t, ctx, a, c, l, f, third, "response")
			if tc.spin == time.Millisecond {
				require.Eventually(t, func() bool { return l.spinGaveUp.Load() > 0 }, 10*time.Second, time.Millisecond,
					"the waiter polled a stalled socket past PollSpin")
			}
			_, err := c.Write(f[third:])
			require.NoError(t, err)
			require.NoError(t, <-res)
			checkRead(t, a, mr, f)
			require.Equal(t, int32(1), l.streamed.Load())
			switch {
			case tc.spin == time.Minute && !tc.writing:
				// All but what came with the header's read and the read
				// that started the frame was polled for.
				require.Greater(t, l.spinStream.Load(), int64(n/2), "the payload was not taken by polling the socket")
				require.Zero(t, l.spinGaveUp.Load())
			case tc.spin == time.Millisecond:
				require.Positive(t, l.spinGaveUp.Load())
			default:
				require.Zero(t, l.spinStream.Load(), "the waiter polled the socket")
			}
		})
	}
}
