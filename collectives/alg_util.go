package collectives

import (
	"unsafe"

	"github.com/rdmago/rdmago/internal/ntcopy"
)

// blockStart is where block i of count elements split into p nearly equal
// blocks begins (the first count%p blocks get one element more).
func blockStart(count, p, i int) int {
	q, r := count/p, count%p
	return i*q + min(i, r)
}

// block returns block i of buf (count elements of esize bytes, p blocks).
func block(buf []byte, esize, count, p, i int) []byte {
	s, e := blockStart(count, p, i), blockStart(count, p, i+1)
	return buf[s*esize : e*esize]
}

// blocks returns blocks [i, j) of buf as one slice.
func blocks(buf []byte, esize, count, p, i, j int) []byte {
	s, e := blockStart(count, p, i), blockStart(count, p, j)
	return buf[s*esize : e*esize]
}

// overlap says whether a and b share any byte.
func overlap(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	pa, pb := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return pa < pb+uintptr(len(b)) && pb < pa+uintptr(len(a))
}

// mod is a mod p in [0, p), with one division.
func mod(a, p int) int {
	if a %= p; a < 0 {
		a += p
	}
	return a
}

// fold describes how a non-power-of-two rank count p joins a
// power-of-two algorithm: the first 2·rem ranks pair up (even into odd), so
// pof2 "new ranks" remain; new rank j stands for old ranks first(j)..last(j),
// a contiguous range, so a contiguous range of new ranks is a contiguous
// range of old ranks (and of their blocks).
type fold struct {
	p, pof2, rem int
}

func newFold(p int) fold {
	pof2 := 1
	for pof2*2 <= p {
		pof2 *= 2
	}
	return fold{p: p, pof2: pof2, rem: p - pof2}
}

// newRank is old rank r's new rank, or -1 for the even ranks that fold away.
func (f fold) newRank(r int) int {
	if r < 2*f.rem {
		if r%2 == 0 {
			return -1
		}
		return r / 2
	}
	return r - f.rem
}

// first and last are the old ranks new rank j stands for; old is the rank
// that does the work.
func (f fold) first(j int) int {
	if j < f.rem {
		return 2 * j
	}
	return j + f.rem
}

func (f fold) last(j int) int {
	if j < f.rem {
		return 2*j + 1
	}
	return j + f.rem
}

func (f fold) old(j int) int { return f.last(j) }

// combineLower sets acc = lower ⊕ acc, keeping the operand order (and so
// the bits) the same on the two ranks of a pair; tmp is clobbered.
func (c *call) combineLower(acc, lower []byte) {
	c.kern.Combine(lower, acc)
	ntcopy.Bulk(acc, lower)
}
