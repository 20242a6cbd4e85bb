//go:build race

package shm

import (
	"runtime"
	"unsafe"
)

// The race detector cannot see the happens-before edges that shared-memory
// atomics on the mmap'ed segments create (they are outside the Go heap).
// For goroutine ranks in one process, whose registered Go memory a peer
// goroutine copies directly, the provider tells it: every publication is a
// release and every observation an acquire on one sync object.
var raceSync uint64

func raceAcquire() { runtime.RaceAcquire(unsafe.Pointer(&raceSync)) }
func raceRelease() { runtime.RaceReleaseMerge(unsafe.Pointer(&raceSync)) }
