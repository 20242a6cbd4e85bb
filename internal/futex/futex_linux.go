package futex

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	opWait = 0 // FUTEX_WAIT, not private: the word is shared between processes
	opWake = 1 // FUTEX_WAKE
)

// Wait sleeps while *addr == val, at most d (it may return early).
func Wait(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), opWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// Wake wakes every sleeper on addr. It never blocks, so it is a raw
// system call (see Yield): a waker preempted in the middle of it by a
// thread that shares its CPU would otherwise have its P handed to another
// thread, which costs this process thread wake-ups on that CPU.
func Wake(addr *uint32) {
	unix.RawSyscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), opWake, uintptr(1<<31-1), 0, 0, 0)
}

// Yield gives the CPU to another runnable thread, of any process (the
// runtime's Gosched only switches goroutines of this one). It is a raw
// system call, as the runtime's own osyield is: through syscall.Syscall
// the runtime would count it as blocking, and when the yield lasts (other
// processes run meanwhile) hand this thread's P to another thread, so that
// getting back costs thread wake-ups; with more ranks than cores that made
// an 8-rank barrier take 570 µs instead of 86 µs.
func Yield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }
