package comm

import (
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// osYield gives the CPU to another thread or process (runtime.Gosched only
// switches goroutines). It is a raw system call: through syscall.Syscall
// the runtime would count it as blocking, and when the yield lasts (other
// processes run meanwhile) hand this thread's P to another thread, so that
// getting back costs thread wake-ups; with more ranks than cores that made
// an 8-rank barrier take 570 µs instead of 86 µs.
func osYield() { unix.RawSyscall(unix.SYS_SCHED_YIELD, 0, 0, 0) }

// The futex operations are not the private kind: the words live in memory
// that several processes map.
const (
	futexWait = 0 // FUTEX_WAIT
	futexWake = 1 // FUTEX_WAKE
)

// sleepOn blocks while *addr == val, until a wake-up or d (it may return
// early, spuriously; callers re-check).
func sleepOn(addr *uint32, val uint32, d time.Duration) {
	ts := unix.NsecToTimespec(int64(d))
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWait, uintptr(val), uintptr(unsafe.Pointer(&ts)), 0, 0)
}

// wakeAll wakes every sleeper on addr.
func wakeAll(addr *uint32) {
	unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(addr)), futexWake, uintptr(1<<31-1), 0, 0, 0)
}
