package ntcopy

import "unsafe"

// MinBytes is the smallest copy that uses non-temporal stores.
const MinBytes = 4 << 10

// piece bounds one assembly call, so that a long copy still reaches
// preemption points between pieces.
const piece = 256 << 10

// Copy copies min(len(dst), len(src)) bytes from src to dst, which must
// not overlap, and returns that count.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < MinBytes || !haveNT {
		return copy(dst, src)
	}
	// Non-temporal stores want 16-byte aligned destinations: the head up
	// to the boundary and the tail past the last whole line go by copy.
	head := int(-uintptr(unsafe.Pointer(unsafe.SliceData(dst))) & 15)
	copy(dst[:head], src[:head])
	off := head
	for off+64 <= n {
		m := min(n-off, piece) &^ 63
		ntcopy(unsafe.Pointer(&dst[off]), unsafe.Pointer(&src[off]), uintptr(m))
		off += m
	}
	copy(dst[off:n], src[off:n])
	return n
}

// Prefetch starts loading the cache lines that b spans into this core's
// caches and returns without waiting for them, so that a reader that knows
// what it will copy soon (lines another core wrote) can overlap their
// transfer with other work: a load would hold up the next locked
// instruction until the line arrived, a prefetch does not.
func Prefetch(b []byte) {
	if len(b) == 0 {
		return
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	first := p &^ 63
	prefetch(unsafe.Pointer(unsafe.SliceData(b)), (p+uintptr(len(b))-first+63)>>6)
}
