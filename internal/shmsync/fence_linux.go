//go:build linux

package shmsync

import (
	"sync"

	"golang.org/x/sys/unix"
)

// membarrier(2) commands (linux/membarrier.h).
const (
	membarrierQuery                   = 0
	membarrierGlobalExpedited         = 1 << 1
	membarrierRegisterGlobalExpedited = 1 << 2
)

var registerOnce = sync.OnceValue(func() bool {
	r, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierQuery, 0, 0)
	if e != 0 || r&membarrierGlobalExpedited == 0 || r&membarrierRegisterGlobalExpedited == 0 {
		return false
	}
	_, _, e = unix.Syscall(unix.SYS_MEMBARRIER, membarrierRegisterGlobalExpedited, 0, 0)
	return e == 0
})

// asymmetric registers this process for expedited global memory barriers,
// once, and reports whether that worked.
func asymmetric() bool { return registerOnce() }

// fenceHeavy is membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED): every running
// thread of every registered process passes a full memory barrier before
// it returns (an IPI to the CPUs they run on; threads off their CPU pass
// one when they are switched back in). It reports whether it did.
func fenceHeavy() bool {
	_, _, e := unix.Syscall(unix.SYS_MEMBARRIER, membarrierGlobalExpedited, 0, 0)
	return e == 0
}
