package collectives

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Scratch buffers come from size-classed pools (powers of two from 64 B), so
// a collective does not allocate its large scratch on every call: MPI
// implementations that do lose several times at 32 MiB. Buffers are backed
// by []uint64, so they are 8-byte aligned and every element type can be
// viewed in them.
type bufPool struct {
	classes [48]sync.Pool
}

var scratch bufPool

const minClass = 6 // 64 bytes

func classOf(n int) int {
	if n <= 1<<minClass {
		return minClass
	}
	return bits.Len(uint(n - 1))
}

// get returns a buffer of length n (contents undefined).
func (p *bufPool) get(n int) []byte {
	if n == 0 {
		return nil
	}
	c := classOf(n)
	if v := p.classes[c].Get(); v != nil {
		return unsafe.Slice((*byte)(v.(unsafe.Pointer)), 1<<c)[:n]
	}
	words := make([]uint64, (1<<c)/8)
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), len(words)*8)
	return b[:n]
}

// put returns b (from get) to its pool.
func (p *bufPool) put(b []byte) {
	if cap(b) == 0 {
		return
	}
	c := classOf(cap(b))
	if 1<<c != cap(b) {
		return // not ours
	}
	// The pool holds the array's address: a pointer fits in the interface
	// word, so Put does not allocate (a *[]byte would), and it keeps the
	// array alive.
	p.classes[c].Put(unsafe.Pointer(unsafe.SliceData(b)))
}
