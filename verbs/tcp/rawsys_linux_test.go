package tcp

import (
	"syscall"
	"testing"

	"github.com/rdmago/rdmago/internal/cputime"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// A poller's non-blocking system calls that take longer than the Go
// scheduler's 20 µs tick do not make it hand the caller's P to another
// thread (rawsys_linux.go): 4000 writes and reads of 256 KiB through a
// pipe woke the process's threads a few tens of times here, about as often
// as its sysmon wakes anyway; through syscall.Syscall about a thousand.
func TestSocketCallsWakeNoThreads(t *testing.T) {
	if cputime.Wakeups() < 0 {
		t.Skip("no /proc/self/task to count wake-ups in")
	}
	var p [2]int
	require.NoError(t, unix.Pipe2(p[:], unix.O_NONBLOCK|unix.O_CLOEXEC))
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	if _, err := unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, rawMax); err != nil {
		t.Skip("pipe cannot hold a rawMax write:", err)
	}
	buf := make([]byte, rawMax)
	iov := []unix.Iovec{{Base: &buf[0]}}
	iov[0].SetLen(len(buf))
	pass := func() {
		if n, e := sysWrite(uintptr(p[1]), nil, iov, len(buf)); e != 0 || n != len(buf) {
			t.Fatalf("writev: %d of %d bytes, %v", n, len(buf), e)
		}
		if n, err := sysRead(p[0], buf); err != nil || n != len(buf) {
			t.Fatalf("read: %d of %d bytes, %v", n, len(buf), err)
		}
	}
	pass() // first touch
	const calls = 4000
	before := cputime.Wakeups()
	for range calls {
		pass()
	}
	woke := cputime.Wakeups() - before
	t.Logf("%d writes and reads of %d KiB: %d thread wake-ups", calls, rawMax>>10, woke)
	require.Less(t, woke, calls/20, "the calls' threads were handed off and woken")

	// Nothing queued: a non-blocking read says so, as read(2) does.
	_, err := sysRead(p[0], buf)
	require.ErrorIs(t, err, syscall.EAGAIN)
}
