package tcp

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// TestSpinningWaiterQuietsSocket: while a waiter polls its socket itself
// (PollSpin), the bytes that arrive for it do not make the socket readable
// to epoll (link.quiet), so Go's network poller, whose idle thread sleeps
// in epoll_wait, is not woken for bytes the waiter reads itself; the frame
// still completes, and afterwards, with nobody polling, the link's reader
// goroutine receives frames (it restores the low-water mark, link.loud).
func TestSpinningWaiterQuietsSocket(t *testing.T) {
	// Larger than spinFillMax: once the waiter has the header, it leaves
	// the payload queued in the socket until all of it is there.
	const n = 48 << 10
	a, mr, c, l := spinningTarget(t, time.Hour, n)
	readable := func() bool {
		var r int16
		require.NoError(t, l.ControlFD(func(fd int) {
			p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			if _, err := unix.Poll(p, 0); err == nil {
				r = p[0].Revents
			}
		}))
		return r&unix.POLLIN != 0
	}

	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		wc, err := waitCtx(ctx, a.cq)
		if err == nil && (wc.Status != verbs.StatusSuccess || wc.Imm != 5) {
			err = fmt.Errorf("completion %v imm %d", wc.Status, wc.Imm)
		}
		res <- err
	}()
	awaitPoller(t, a.qp)
	frame := writeImmFrame(a.qp, mr, 0, n, 5)
	// The header first: the waiter reads it as it polls and learns the
	// frame's size.
	reads := l.spinReads.Load()
	_, err := c.Write(frame[:HeaderLen])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return l.spinReads.Load() > reads }, 10*time.Second, time.Millisecond,
		"the polling waiter did not read the header")
	// Then a few KiB of the payload, which stay queued in the socket (far
	// below the receive window, which would make the kernel signal them
	// anyway): they must not make it readable.
	mid := HeaderLen + 4<<10
	_, err = c.Write(frame[HeaderLen:mid])
	require.NoError(t, err)
	require.Eventually(t, func() bool { return queuedIn(t, l) >= mid-HeaderLen }, 10*time.Second, time.Millisecond,
		"the payload's first part never arrived")
	require.False(t, readable(), "bytes a polling waiter waits for woke epoll")
	_, err = c.Write(frame[mid:])
	require.NoError(t, err)
	select {
	case err := <-res:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the frame did not complete")
	}
	require.True(t, bytes.Equal(frame[HeaderLen:], mr.Bytes()[:n]), "payload not placed intact")

	// Nobody polls now: the reader goroutine takes the socket (after
	// PollGrace) and must be woken by what arrives.
	require.Eventually(t, func() bool { return l.holder.Load() == holderReader }, 10*time.Second, time.Millisecond,
		"the reader goroutine did not take the socket back")
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 2}))
	small := writeImmFrame(a.qp, mr, 1, 100, 6)
	_, err = c.Write(small)
	require.NoError(t, err)
	var wc [1]verbs.WC
	require.Eventually(t, func() bool { return a.cq.Poll(wc[:]) == 1 }, 10*time.Second, time.Millisecond,
		"a frame that came while nobody polled was not received")
	require.Equal(t, verbs.StatusSuccess, wc[0].Status)
	require.Equal(t, uint32(6), wc[0].Imm)
}
