//go:build race

package racesync

import (
	"runtime"
	"unsafe"
)

var edge uint64

// Acquire marks that the caller has observed a publication.
func Acquire() { runtime.RaceAcquire(unsafe.Pointer(&edge)) }

// Release marks that the caller is about to publish what it wrote.
func Release() { runtime.RaceReleaseMerge(unsafe.Pointer(&edge)) }
