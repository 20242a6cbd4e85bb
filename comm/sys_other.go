//go:build !linux

package comm

import (
	"runtime"
	"sync/atomic"
	"time"
)

func osYield() { runtime.Gosched() }

// sleepOn polls instead of sleeping in the kernel.
func sleepOn(addr *uint32, val uint32, d time.Duration) {
	if atomic.LoadUint32(addr) == val {
		time.Sleep(min(d, 50*time.Microsecond))
	}
}

func wakeAll(*uint32) {}
