//go:build race

package tcp

import (
	"runtime"
	"unsafe"
)

// raceWrote tells the race detector that the kernel wrote p[:n] for the
// calling goroutine, as unix.Read does for the reads it makes: a raw read
// (sysRead) would otherwise hide that write from it.
func raceWrote(p []byte, n int) {
	if n > 0 {
		runtime.RaceWriteRange(unsafe.Pointer(&p[0]), n)
	}
}
