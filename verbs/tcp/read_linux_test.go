package tcp

import (
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// loopbackLink is a bare link over a loopback connection, ready for
// readQueued, and the connection's other end; both close with the test.
func loopbackLink(t *testing.T) (*link, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(accepted)
			return
		}
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	peer, ok := <-accepted
	require.True(t, ok, "accept failed")
	t.Cleanup(func() { peer.Close() })
	l := &link{c: c}
	l.rc, err = c.(syscall.Conn).SyscallConn()
	require.NoError(t, err)
	l.qw.init()
	return l, peer
}

// readQueued is a poller's spin (one call per poll, tens of thousands a
// second): it must not allocate, neither when it finds nothing nor when it
// reads.
func TestReadQueuedAllocatesNothing(t *testing.T) {
	l, peer := loopbackLink(t)
	buf := make([]byte, 64)

	n, err := l.readQueued(buf)
	require.Equal(t, errWouldBlock, err)
	require.Zero(t, n)
	require.Zero(t, testing.AllocsPerRun(200, func() { _, _ = l.readQueued(buf) }), "a poll that finds nothing allocates")

	_, err = peer.Write([]byte("abc"))
	require.NoError(t, err)
	got := 0
	for got < 3 { // the bytes may take a moment to be queued here
		n, err := l.readQueued(buf[got:])
		if err == errWouldBlock {
			continue
		}
		require.NoError(t, err)
		got += n
	}
	require.Equal(t, "abc", string(buf[:3]))
	one := []byte{1}
	require.Zero(t, testing.AllocsPerRun(50, func() {
		_, _ = peer.Write(one)
		for {
			if _, err := l.readQueued(buf); err != errWouldBlock {
				return
			}
		}
	}), "a poll that reads allocates")
}

// TestReadQueuedAfterInterrupt: a read deadline in the past is how a poller
// interrupts the reader goroutine's blocked read, and the reader gives the
// token up without clearing it. A non-blocking read of the next holder
// (DriveQueued, a crowded waiter taking what has arrived) must read what is
// queued rather than fail the link with the deadline's i/o timeout, which
// broke 2-hosts x 2-ranks alltoalls with "raw-read ...: i/o timeout".
func TestReadQueuedAfterInterrupt(t *testing.T) {
	l, peer := loopbackLink(t)
	buf := make([]byte, 64)

	_, err := peer.Write([]byte("abc"))
	require.NoError(t, err)
	// The bytes are queued here once the socket says so.
	require.Eventually(t, func() bool { n, ok := l.socketQueued(); return ok && n == 3 }, 10*time.Second, time.Millisecond)
	require.NoError(t, l.c.SetReadDeadline(aLongTimeAgo))
	n, err := l.readQueued(buf)
	require.NoError(t, err, "a stale interrupt failed the read")
	require.Equal(t, "abc", string(buf[:n]))
	// The deadline is gone: a blocking read waits for more again.
	_, err = peer.Write([]byte("d"))
	require.NoError(t, err)
	n, err = l.c.Read(buf)
	require.NoError(t, err)
	require.Equal(t, "d", string(buf[:n]))
}

// readWait, the reader goroutine's blocking read, waits for bytes in the
// network poller, reads with a raw read(2) of at most rawMax however much
// is queued (a read through syscall.Syscall woke the runtime's sysmon
// thread every time), gives up on a deadline in the past as Conn.Read
// does (a poller's interrupt), reads without allocating and reports the
// peer's close as io.EOF.
func TestReadWaitIsRawAndBlocking(t *testing.T) {
	l, peer := loopbackLink(t)
	buf := make([]byte, 2*rawMax)

	// Blocks until bytes come.
	got := make(chan int, 1)
	go func() {
		n, err := l.readWait(buf[:64])
		if err != nil {
			n = -1
		}
		got <- n
	}()
	_, err := peer.Write([]byte("late"))
	require.NoError(t, err)
	select {
	case n := <-got:
		require.Equal(t, 4, n)
	case <-time.After(10 * time.Second):
		t.Fatal("readWait did not return the bytes written")
	}

	// At most rawMax a read, with more than that queued.
	require.NoError(t, l.c.(*net.TCPConn).SetReadBuffer(4*rawMax))
	big := make([]byte, rawMax+rawMax/2)
	go func() { _, _ = peer.Write(big) }()
	fd := 0
	require.NoError(t, l.rc.Control(func(f uintptr) { fd = int(f) }))
	deadline := time.Now().Add(10 * time.Second)
	for {
		q, _ := sysQueued(uintptr(fd))
		if q > rawMax || time.Now().After(deadline) {
			require.Greater(t, q, rawMax, "the written bytes never queued")
			break
		}
		time.Sleep(time.Millisecond)
	}
	n, err := l.readWait(buf)
	require.NoError(t, err)
	require.Equal(t, rawMax, n, "one readWait took more than rawMax")
	for left := len(big) - n; left > 0; left -= n {
		n, err = l.readWait(buf)
		require.NoError(t, err)
	}
	one := []byte{1}
	require.Zero(t, testing.AllocsPerRun(20, func() {
		_, _ = peer.Write(one)
		_, _ = l.readWait(buf)
	}), "readWait allocates")

	// An interrupt: a deadline in the past ends a wait with nothing queued.
	require.NoError(t, l.c.SetReadDeadline(time.Now().Add(-time.Second)))
	_, err = l.readWait(buf)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, l.c.SetReadDeadline(time.Time{}))

	require.NoError(t, peer.Close())
	_, err = l.readWait(buf)
	require.ErrorIs(t, err, io.EOF)
}
