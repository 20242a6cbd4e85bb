package tcp

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// queuedIn is how many bytes wait in l's socket, read without the token
// (-1 if it cannot tell). It may run in require.Eventually's goroutine.
func queuedIn(t *testing.T, l *link) int {
	n := -1
	assert.NoError(t, l.rc.Control(func(fd uintptr) { n, _ = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }))
	return n
}

// TestAwaitedFrameThatCannotComeWholeGoesToReader: a waiter that polls
// the socket waits for a frame larger than its read buffer to be queued
// whole before it handles it (awaitQueued). When the rest can come only
// once something of it is read (the peer waits for a receive window
// smaller than the frame), the waiter must not wait on: within
// awaitQueuedMax the reader goroutine takes the frame and reads it as it
// comes. Under load the waiter waited, the peer's ACK timeout failed its
// QP, and the waiter's ctx ended 30 s later.
func TestAwaitedFrameThatCannotComeWholeGoesToReader(t *testing.T) {
	const most = 1 << 20 // pollFrameMax
	a, mr, c, l := spinningTarget(t, 200*time.Microsecond, most)
	// Frames the size of the largest a waiter awaits grow the window the
	// connection advertises (rcv_ssthresh), beyond which a waiter does not
	// wait for a frame whole.
	seq := uint32(0)
	for range 8 {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
		_, err := c.Write(writeImmFrame(a.qp, mr, seq, most, 1))
		require.NoError(t, err)
		seq++
		require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
	}
	var ti *unix.TCPInfo
	require.NoError(t, l.rc.Control(func(fd uintptr) { ti, _ = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO) }))
	require.NotNil(t, ti)
	big := min(int(ti.Rcv_ssthresh), 512<<10) - HeaderLen
	t.Logf("rcv_ssthresh %d: a frame of %d bytes", ti.Rcv_ssthresh, big)
	require.Greater(t, big, readBufSize, "the window did not grow beyond the read buffer")
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
	frame := writeImmFrame(a.qp, mr, seq, big, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	half := len(frame) / 2
	res := waitAndSend(t, ctx, a, c, frame, half)
	// The peer of a closed window: the rest comes once the half frame
	// has been read from the socket.
	require.Eventually(t, func() bool { return queuedIn(t, l) == 0 }, 10*time.Second, time.Millisecond,
		"the half frame stays in the socket: the waiter waits for the rest, which waits for it")
	_, err := c.Write(frame[half:])
	require.NoError(t, err)
	require.NoError(t, <-res)
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint32(7), wc.Imm)
	require.True(t, bytes.Equal(frame[HeaderLen:], mr.Bytes()[:big]), "the WRITE's payload was not placed whole")
}
