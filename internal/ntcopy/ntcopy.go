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

// PrefetchWrite starts taking the line of b's first byte for writing
// (PREFETCHW), so that a store there later finds it owned; like Prefetch
// it holds nothing up.
func PrefetchWrite(b []byte) {
	if havePrefetchW && len(b) > 0 {
		prefetchWrite(unsafe.Pointer(unsafe.SliceData(b)))
	}
}

// Plain makes copies of PlainMin to PlainMax bytes with REP MOVSB: below,
// Go's copy was as fast or faster (4-16 KiB: 0.92), and from 1 MiB, where
// the runtime switches to non-temporal stores, too (1 MiB: 0.87; 2 MiB
// even).
const (
	PlainMin = 32 << 10
	PlainMax = 512 << 10
)

// movsCopy is movs, which a test may wrap to see that Plain calls it.
var movsCopy = movs

// Plain copies min(len(dst), len(src)) bytes from src to dst, as copy
// does (overlapping slices included), and returns that count. From
// PlainMin to PlainMax bytes, where the CPU has fast REP MOVSB (ERMS), it
// uses that instruction, as C's memcpy does: Go's copy took 1.3-1.6 times
// as long there on the machine measured (32 KiB 0.39-0.40 us against
// 0.25-0.28, 512 KiB 7.9-8.3 against 6.4-6.6; BenchmarkPlain), which made
// a Put of 32 KiB-128 KiB into a mapped window 1.4-1.6 times MPI_Put's
// time.
func Plain(dst, src []byte) int {
	n := min(len(dst), len(src))
	if n < PlainMin || n > PlainMax || !haveMovs {
		return copy(dst, src)
	}
	d, sp := uintptr(unsafe.Pointer(&dst[0])), uintptr(unsafe.Pointer(&src[0]))
	if d != sp && d < sp+uintptr(n) && sp < d+uintptr(n) {
		return copy(dst, src) // overlapping: copy handles that, a forward MOVSB does not
	}
	for off := 0; off < n; off += piece {
		m := min(n-off, piece)
		movsCopy(unsafe.Pointer(&dst[off]), unsafe.Pointer(&src[off]), uintptr(m))
	}
	return n
}
