package ntcopy

import (
	"sync/atomic"
	"unsafe"
)

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

// PlainMin is the smallest copy Plain makes with REP MOVSB: below, Go's
// copy was as fast or faster (4-16 KiB: 0.92). There is no upper bound:
// from 1 MiB Go's copy switches to non-temporal stores, which won a copy
// repeated alone in a loop (1 MiB: 0.86; 2-8 MiB even) but lost where the
// copy is a collective's step, both ranks copying at once and the lines
// read or written again soon after (a 2-rank allgather of 1-4 MiB blocks
// took 1.17-1.20 times as long with them).
const PlainMin = 32 << 10

// WideMin is the smallest copy Plain makes with 64-byte AVX-512 moves
// (below PlainMin, where the CPU has them): Go's copy moves 32 bytes an
// instruction there, and took 1.5-1.7 times as long from 256 bytes to
// 16 KiB in cache (512 B: 7.3 ns against 4.6; 2 KiB: 18 against 10.5;
// BenchmarkPlain), which is most of what a Put of 512 B-2 KiB into a
// mapped window costs beyond a small one.
const WideMin = 256

// movsCopy and wideCopy are movs and wide, which a test may wrap to see
// that Plain calls them.
var (
	movsCopy = movs
	wideCopy = wide
)

// Plain copies min(len(dst), len(src)) bytes from src to dst, as copy
// does (overlapping slices included), and returns that count. From
// WideMin to PlainMin bytes, where the CPU has AVX-512 (see haveWide), it
// moves 64 bytes an instruction (see WideMin). From PlainMin bytes up,
// where the CPU has fast REP MOVSB (ERMS), it uses that instruction, as
// C's memcpy does, in pieces of at most piece bytes: up to 512 KiB Go's
// copy took 1.3-1.6 times as long on the machine measured (32 KiB
// 0.39-0.40 us against 0.25-0.28, 512 KiB 7.9-8.3 against 6.4-6.6;
// BenchmarkPlain), which made a Put of 32 KiB-128 KiB into a mapped
// window 1.4-1.6 times MPI_Put's time; above, see PlainMin.
func Plain(dst, src []byte) int {
	if min(len(dst), len(src)) < WideMin {
		return copy(dst, src) // as below, a front small enough to inline into the caller
	}
	return plain(dst, src)
}

// plain is Plain from WideMin bytes on.
func plain(dst, src []byte) int {
	n := min(len(dst), len(src))
	wideOK := haveWide && n < PlainMin
	if !wideOK && (n < PlainMin || !haveMovs) {
		return copy(dst, src)
	}
	d, sp := uintptr(unsafe.Pointer(&dst[0])), uintptr(unsafe.Pointer(&src[0]))
	if d != sp && d < sp+uintptr(n) && sp < d+uintptr(n) {
		return copy(dst, src) // overlapping: copy handles that, a forward copy does not
	}
	if wideOK {
		wideCopy(unsafe.Pointer(&dst[0]), unsafe.Pointer(&src[0]), uintptr(n))
		return n
	}
	for off := 0; off < n; off += piece {
		m := min(n-off, piece)
		movsCopy(unsafe.Pointer(&dst[off]), unsafe.Pointer(&src[off]), uintptr(m))
	}
	return n
}

// Bulk is Plain without its 64-byte moves: REP MOVSB from PlainMin bytes,
// Go's copy below. It is the copy for bulk data on two paths. A rank's own
// data in a collective (its input copied into its result, a block between
// its buffers), whose next step reads or publishes what the copy wrote:
// with the 64-byte moves a 2-rank allgather and allreduce of 2 KiB took
// 1.17-1.28 times as long (9 rounds; 1 and 4 KiB even), and from 1 MiB
// REP MOVSB keeps the lines in the caches (see PlainMin). And data another
// core wrote past the caches (a peer's eager message or pipelined fragment
// in a receive buffer), which below PlainMin Go's copy, whose loop
// prefetches further ahead than wide's, reads faster: with wide, a receiver
// copying 16-32 KiB fragments while its own went the other way (bibw over
// shm) ran at 0.86-0.97 of the rate.
func Bulk(dst, src []byte) int {
	if min(len(dst), len(src)) < PlainMin {
		return copy(dst, src)
	}
	return Plain(dst, src)
}

// Touch accesses one word of every page that b spans, so that this
// process's mapping of them is made now rather than at their first use: on
// the VM measured, the first access of each page of a shared mapping cost
// about 5 µs per process even after madvise(MADV_POPULATE_WRITE) had
// mapped it, which put 30-150 µs on each of the first messages through
// fresh shared-memory slots. With write the access is an atomic add of
// zero, which takes the page writable and leaves its contents as they
// were even when another thread or process writes them meanwhile;
// otherwise it is a load. b's pages must be mapped readable (and writable
// for write).
func Touch(b []byte, write bool) {
	if len(b) == 0 {
		return
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	var sum uint32
	for off := 0; off < len(b); {
		// This page's part of b: [off, end).
		end := min(int((base+uintptr(off))&^(pageSize-1)+pageSize-base), len(b))
		// Its first aligned word, if one fits.
		if i := int((base+uintptr(off)+3)&^3 - base); i+4 <= end {
			p := (*uint32)(unsafe.Pointer(&b[i]))
			if write {
				atomic.AddUint32(p, 0)
			} else {
				sum += atomic.LoadUint32(p)
			}
		} else {
			sum += uint32(b[off]) // a few bytes at a page's edge
		}
		off = end
	}
	if sum == 0x9e3779b9 {
		touchSink.Store(sum) // keeps the loads
	}
}

const pageSize = 4096

var touchSink atomic.Uint32

// Pages remembers which pages of a region have been touched (Touch), so
// that memory handed out again and again (receive buffers reposted after
// every message) is touched only the first time. Safe for concurrent use.
type Pages struct {
	base   uintptr
	n      int
	bits   []atomic.Uint64
	budget *Budget
}

// Budget bounds the memory that Pages sharing it touch ahead of its use:
// buffers posted for every peer of a large job would otherwise all be
// committed at start-up (2 MiB a peer over tcp). Past it, pages are left
// to their first access. Safe for concurrent use.
type Budget struct{ left atomic.Int64 }

// NewBudget allows n bytes.
func NewBudget(n int64) *Budget {
	b := &Budget{}
	b.left.Store(n)
	return b
}

// Take reports whether n more bytes fit the budget, and takes them if so.
// A nil Budget has no limit.
func (b *Budget) Take(n int) bool {
	if b == nil {
		return true
	}
	if b.left.Add(-int64(n)) < 0 {
		b.left.Add(int64(n))
		return false
	}
	return true
}

// NewPages tracks the pages of region, which should start on a page,
// touching them within budget (nil: no limit).
func NewPages(region []byte, budget *Budget) *Pages {
	n := (len(region) + pageSize - 1) / pageSize
	return &Pages{base: uintptr(unsafe.Pointer(unsafe.SliceData(region))), n: n, bits: make([]atomic.Uint64, (n+63)/64), budget: budget}
}

// TouchOnce touches b's pages (see Touch) that have not been touched
// through p before, as long as the budget lasts. b must lie within p's
// region.
func (p *Pages) TouchOnce(b []byte, write bool) {
	if p == nil || len(b) == 0 {
		return
	}
	start := int(uintptr(unsafe.Pointer(unsafe.SliceData(b))) - p.base)
	for pg := start / pageSize; pg <= (start+len(b)-1)/pageSize && pg < p.n; pg++ {
		w, bit := &p.bits[pg/64], uint64(1)<<(pg%64)
		if w.Load()&bit != 0 {
			continue
		}
		if !p.budget.Take(pageSize) {
			return
		}
		lo := max(pg*pageSize-start, 0)
		hi := min((pg+1)*pageSize-start, len(b))
		Touch(b[lo:hi], write)
		w.Or(bit)
	}
}
