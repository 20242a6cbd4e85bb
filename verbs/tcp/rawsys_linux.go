package tcp

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The system calls a poller makes on its non-blocking socket (reads,
// writes, SIOCINQ looks, zero-timeout polls) never wait, so they go
// through RawSyscall rather than syscall.Syscall, which tells Go's
// scheduler the goroutine is in a system call. sysmon takes the P of one
// that stays there past its 20 µs tick and, under GOMAXPROCS=1 (a rank
// bound to one core), wakes another thread to poll the network in its
// place: a rank whose CPU is shared with a busy thread is often preempted
// in the middle of such a call, and each of those wake-ups then hands its
// CPU to the other thread for a turn. Calls that may copy more than
// rawMax (a large write, a read straight into a large payload) still go
// through syscall.Syscall, so that a stop of the world or the process's
// other goroutines wait no longer than a copy of rawMax for the P.
const rawMax = 256 << 10

// sysRead is read(2) on a non-blocking fd.
func sysRead(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	var n uintptr
	var e syscall.Errno
	if len(p) <= rawMax {
		n, _, e = unix.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	} else {
		n, _, e = unix.Syscall(unix.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	}
	if e != 0 {
		return 0, e
	}
	raceWrote(p, int(n))
	return int(n), nil
}

// sysWrite is write(2) (iovs nil) or writev(2) of total bytes on a
// non-blocking fd.
func sysWrite(fd uintptr, p []byte, iovs []unix.Iovec, total int) (int, syscall.Errno) {
	trap, a1, a2 := uintptr(unix.SYS_WRITEV), uintptr(0), uintptr(len(iovs))
	if iovs == nil {
		trap, a1, a2 = unix.SYS_WRITE, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p))
	} else {
		a1 = uintptr(unsafe.Pointer(&iovs[0]))
	}
	var n uintptr
	var e syscall.Errno
	if total <= rawMax {
		n, _, e = unix.RawSyscall(trap, fd, a1, a2)
	} else {
		n, _, e = unix.Syscall(trap, fd, a1, a2)
	}
	return int(n), e
}

// sysQueued is ioctl(SIOCINQ): the bytes queued in the socket.
func sysQueued(fd uintptr) (int, error) {
	var n int32
	if _, _, e := unix.RawSyscall(unix.SYS_IOCTL, fd, unix.SIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0, e
	}
	return int(n), nil
}

// sysPollNow is poll(2) of fds with no timeout.
func sysPollNow(fds []unix.PollFd) (int, error) {
	n, _, e := unix.RawSyscall(unix.SYS_POLL, uintptr(unsafe.Pointer(&fds[0])), uintptr(len(fds)), 0)
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
