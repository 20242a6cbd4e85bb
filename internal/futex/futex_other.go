//go:build !linux

package futex

import (
	"runtime"
	"sync/atomic"
	"time"
)

// Wait polls instead of sleeping in the kernel.
func Wait(addr *uint32, val uint32, d time.Duration) {
	if atomic.LoadUint32(addr) == val {
		time.Sleep(min(d, 50*time.Microsecond))
	}
}

// Wake does nothing: Wait does not sleep in the kernel here.
func Wake(*uint32) {}

// Yield lets other goroutines run.
func Yield() { runtime.Gosched() }
