//go:build !amd64

package ntcopy

import "unsafe"

const (
	haveNT   = false
	haveMovs = false
)

func ntcopy(dst, src unsafe.Pointer, n uintptr) {
	copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
}

func prefetch(p unsafe.Pointer, lines uintptr) {}

func prefetchWrite(p unsafe.Pointer) {}

const havePrefetchW = false

func movs(dst, src unsafe.Pointer, n uintptr) {
	copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
}

// AVX512 is false here: no 512-bit kernels (see ntcopy_amd64.go).
const AVX512 = false

const haveWide = false

func wide(dst, src unsafe.Pointer, n uintptr) {
	copy(unsafe.Slice((*byte)(dst), n), unsafe.Slice((*byte)(src), n))
}

// ticks is never called here: Chooser times only non-temporal copies,
// which need amd64.
func ticks() uint64 { return 0 }
