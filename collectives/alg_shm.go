package collectives

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"
)

// The shared-memory algorithms (SharedMemory).
//
// When every rank of the group can load from and store to every other
// rank's memory (the SharedMemoryGroup capability: ranks on one host over
// shm),
// a call needs no messages at all. Each rank owns a region:
//
//	0    done   uint64   the last round this rank has finished reading
//	64   slot 0: round uint64 · 64-byte call header · data (SharedSlotBytes)
//	…    slot 1: the same
//
// A call moves its vector in rounds of at most SharedSlotBytes. A round has
// an id that every rank computes alike and that only grows: the Engine's
// call counter in the high bits, the chunk index in the low ones. In a
// round, each rank that contributes data
//  1. picks the slot it did not use last time, and waits until every rank
//     that reads it has finished the round it last held (done ≥ that
//     round), so nobody still reads what it overwrites;
//  2. copies its chunk into the slot, encodes the call's header next to
//     it, and then stores the round id into the slot's round word (an
//     atomic store: whoever sees the id sees the data);
//
// and each rank that needs data waits for the round id to appear in one of
// the peer's two slots, checks the peer's header against its own (a
// different count, op, type, root or collective is a MismatchError naming
// both ranks and values), and reads the data: allreduce and reduce fold the
// chunks in rank order, x0 ⊕ x1 ⊕ … ⊕ x(p−1), so every rank gets the same
// bits, which are also the Ordered algorithm's. It then stores the round id
// into its done word. Every call of the Engine ends by storing done = "all
// of this call", so a rank that left a call early (an error) never holds
// up the writers of later calls.
//
// Waits spin, then let the region's Pause policy yield or sleep; they give
// up when the call is aborted (a peer's mismatch report, a stall probe),
// when the caller's ctx ends, when the group fails (a lost peer leaves its
// memory mapped but frozen: the p2p layer notices the loss), or when the
// Engine closes.

// SharedSlotBytes is the data capacity of a slot: the largest chunk one
// round of a shared-memory algorithm moves.
const SharedSlotBytes = 64 << 10

const (
	shmSlotHdr  = 128 // round word (8), padding, call header at 64
	shmSlotSize = shmSlotHdr + SharedSlotBytes
	shmSlot0    = 64
	// SharedRegionBytes is the size of each rank's part of a SharedRegion.
	SharedRegionBytes = shmSlot0 + 2*shmSlotSize

	shmChunkBits = 24 // chunks per call in a round id
	shmAllDone   = 1<<shmChunkBits - 1
)

// shmState is the Engine's side of a SharedRegion.
type shmState struct {
	r    SharedRegion
	mem  [][]byte  // per rank, SharedRegionBytes each
	next int       // the slot this rank writes next
	used [2]uint64 // per slot, the round this rank last wrote into it
}

func newShmState(r SharedRegion, size int) *shmState {
	s := &shmState{r: r, mem: make([][]byte, size)}
	for p := range s.mem {
		m := r.Mem(p)
		if len(m) < SharedRegionBytes || uintptr(unsafe.Pointer(unsafe.SliceData(m)))%8 != 0 {
			return nil
		}
		s.mem[p] = m[:SharedRegionBytes:SharedRegionBytes]
	}
	return s
}

func word(m []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m[off])) }

func slotOff(k int) int { return shmSlot0 + k*shmSlotSize }

// roundID is the id of chunk i of the call with counter calls.
func roundID(calls uint64, i int) uint64 { return calls<<shmChunkBits | uint64(i) }

// finish marks the call with counter calls over on rank me (see the
// narrative).
func (s *shmState) finish(me int, calls uint64) {
	atomic.StoreUint64(word(s.mem[me], 0), roundID(calls, shmAllDone))
}

// shmWait polls cond until it holds. It fails when the call is stopped,
// ctx ends, the group fails or the Engine closes; peer (a group rank, or
// -1) is whom the call waits for, for the error.
func (c *call) shmWait(peer int, cond func() bool) error {
	if cond() {
		return nil
	}
	e := c.e
	var start time.Time
	for i := 1; ; i++ {
		for range 32 {
			if cond() {
				return nil
			}
		}
		if i&7 != 0 {
			continue
		}
		if c.halted.Load() {
			return c.failAbort()
		}
		select {
		case <-e.shm.r.Failed():
			return c.fail(peer, e.shm.r.Err())
		default:
		}
		if err := c.parent.Err(); err != nil {
			return c.fail(peer, err)
		}
		if e.closing.Load() {
			return c.fail(peer, ErrClosed)
		}
		if start.IsZero() {
			start = time.Now()
		}
		e.shm.r.Pause(time.Since(start))
	}
}

// shmPut publishes data as this rank's chunk i: it waits until the slot is
// free, copies, writes the header and stores the round id.
func (c *call) shmPut(i int, data []byte) error {
	s, me := c.e.shm, c.e.rank
	k := s.next
	s.next ^= 1
	if prev := s.used[k]; prev != 0 {
		for p := range s.mem {
			if p == me {
				continue
			}
			done := word(s.mem[p], 0)
			if err := c.shmWait(p, func() bool { return atomic.LoadUint64(done) >= prev }); err != nil {
				return err
			}
		}
	}
	slot := s.mem[me][slotOff(k):]
	copy(slot[shmSlotHdr:], data)
	h := c.h
	h.payload = int64(len(data))
	h.encode(slot[64:128])
	id := roundID(c.calls, i)
	s.used[k] = id
	atomic.StoreUint64(word(slot, 0), id)
	return nil
}

// shmGet waits for peer's chunk i and returns it (valid until this rank
// marks the round done), after checking peer's header against this call's.
func (c *call) shmGet(peer, i int, n int) ([]byte, error) {
	s := c.e.shm
	id := roundID(c.calls, i)
	m := s.mem[peer]
	w0, w1 := word(m, slotOff(0)), word(m, slotOff(1))
	k := -1
	if err := c.shmWait(peer, func() bool {
		switch id {
		case atomic.LoadUint64(w0):
			k = 0
		case atomic.LoadUint64(w1):
			k = 1
		default:
			return false
		}
		return true
	}); err != nil {
		return nil, err
	}
	slot := m[slotOff(k):]
	var h header
	if !h.decode(slot[64:128]) {
		return nil, c.fail(peer, fmt.Errorf("%w: rank %d's shared-memory header is corrupt", ErrProtocol, peer))
	}
	if mm := compareCall(c.e.rank, &c.h, peer, &h); mm != nil {
		return nil, c.mismatch(mm)
	}
	if h.payload != int64(n) {
		return nil, c.fail(peer, fmt.Errorf("%w: rank %d's chunk %d has %d bytes, want %d", ErrProtocol, peer, i, h.payload, n))
	}
	return slot[shmSlotHdr : shmSlotHdr+n], nil
}

// shmDone marks chunk i read.
func (c *call) shmDone(i int) {
	s := c.e.shm
	atomic.StoreUint64(word(s.mem[c.e.rank], 0), roundID(c.calls, i))
}

// shmChunks calls f for every chunk of a vector of nbytes (whole elements
// per chunk); a vector of 0 bytes still has one, empty, chunk, so that a
// barrier and empty calls synchronise like the others.
func (c *call) shmChunks(nbytes int, f func(i, off, n int) error) error {
	per := SharedSlotBytes / c.esize * c.esize
	if nbytes > per<<shmChunkBits-1 {
		return fmt.Errorf("%w: %d bytes exceed the shared-memory algorithms' %d-chunk limit", ErrInvalidArgument, nbytes, shmAllDone)
	}
	for i, off := 0, 0; i == 0 || off < nbytes; i++ {
		n := min(per, nbytes-off)
		if err := f(i, off, n); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// allreduceShm: every rank publishes its chunk, folds all chunks in rank
// order into buf, and marks the chunk done.
func (c *call) allreduceShm(buf []byte) error {
	return c.shmChunks(len(buf), func(i, off, n int) error {
		if err := c.shmPut(i, buf[off:off+n]); err != nil {
			return err
		}
		return c.shmFold(i, buf[off:off+n])
	})
}

// reduceShm: every rank publishes its chunk; root folds them.
func (c *call) reduceShm(buf []byte, root int) error {
	return c.shmChunks(len(buf), func(i, off, n int) error {
		if err := c.shmPut(i, buf[off:off+n]); err != nil {
			return err
		}
		if c.e.rank != root {
			c.shmDone(i)
			return nil
		}
		return c.shmFold(i, buf[off:off+n])
	})
}

// shmFold sets dst to the rank-order fold of every rank's chunk i. This
// rank's own chunk is read from its slot (where shmPut published it), so
// dst may be its input.
func (c *call) shmFold(i int, dst []byte) error {
	me, n := c.e.rank, len(dst)
	mine, err := c.shmOwn(i, n)
	if err != nil {
		return err
	}
	for p := 0; p < c.e.size; p++ {
		x := mine
		if p != me {
			if x, err = c.shmGet(p, i, n); err != nil {
				return err
			}
		}
		switch {
		case p == 0:
			copy(dst, x)
		case n > 0:
			c.kern.Combine(dst, x)
		}
	}
	c.shmDone(i)
	return nil
}

// shmOwn is this rank's published chunk i (in the slot it last wrote).
func (c *call) shmOwn(i, n int) ([]byte, error) {
	s := c.e.shm
	k := s.next ^ 1
	if s.used[k] != roundID(c.calls, i) {
		return nil, fmt.Errorf("%w: this rank's chunk %d is not in its slot", ErrProtocol, i)
	}
	off := slotOff(k) + shmSlotHdr
	return s.mem[c.e.rank][off : off+n], nil
}

// bcastShm: root publishes each chunk; the others copy it out.
func (c *call) bcastShm(buf []byte, root int) error {
	return c.shmChunks(len(buf), func(i, off, n int) error {
		if c.e.rank == root {
			if err := c.shmPut(i, buf[off:off+n]); err != nil {
				return err
			}
		} else {
			x, err := c.shmGet(root, i, n)
			if err != nil {
				return err
			}
			copy(buf[off:off+n], x)
		}
		c.shmDone(i)
		return nil
	})
}

// barrierShm: every rank publishes an empty chunk and waits for all others'.
func (c *call) barrierShm() error {
	if err := c.shmPut(0, nil); err != nil {
		return err
	}
	for p := 0; p < c.e.size; p++ {
		if p == c.e.rank {
			continue
		}
		if _, err := c.shmGet(p, 0, 0); err != nil {
			return err
		}
	}
	c.shmDone(0)
	return nil
}
