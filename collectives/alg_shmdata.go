package collectives

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdmago/internal/ntcopy"
)

// The shared-memory forms of the collectives that move a block per rank
// (reduce of large vectors, allgather, reduce-scatter, alltoall). They are
// built from the same pieces as allreduce and bcast (see alg_shm.go): a
// round of at most a slot per rank, published with its round id, read by
// whoever needs it, and marked done; only what each rank copies in and out
// differs.

// foldBlocksShm is the block-folding round of allreduceShmRS and
// reduceShmRS. A round cuts the chunk into p blocks, block r being rank
// r's to reduce:
//  1. every rank publishes its chunk except its own block (nobody else
//     reads that);
//  2. rank r folds block r of every chunk, in rank order, copies the
//     result into the hole its own block left in its slot and publishes
//     it with the slot's second round word;
//  3. the ranks that want the result (every rank when root < 0, else the
//     root alone) copy every other reduced block out.
//
// Per rank that is a copy in, a fold and (with the result) two copies of
// 1/p of the chunk each; a reduce's root publishes no reduced block,
// since nobody else gathers. A rank that wants the result and may fold in
// place (foldsInPlace) folds into buf; the others fold into their slot,
// and copy the block out only if they want the result: a reduce leaves
// the other ranks' buf as it was. Each element is folded once, in rank
// order, so the bits are allreduceShm's.
func (c *call) foldBlocksShm(buf []byte, root int) error {
	p, me := c.e.size, c.e.rank
	per := c.e.shm.slot / (c.esize * p) * (c.esize * p)
	wants := root < 0 || me == root    // this rank's buf gets the result
	gathered := root < 0 || me != root // another rank copies this rank's reduced block
	inPlace := wants && c.foldsInPlace()
	return c.shmChunksOf(len(buf), per, func(i, off, n int) error {
		chunk := buf[off : off+n]
		cnt := n / c.esize
		bs, be := blockStart(cnt, p, me)*c.esize, blockStart(cnt, p, me+1)*c.esize
		mine, err := c.shmPutRaw(i, chunk, bs, be)
		if err != nil {
			return err
		}
		id := roundID(c.calls, i)
		own, red := chunk[bs:be], mine[shmSlotHdr+bs:shmSlotHdr+be]
		block := func(q int) ([]byte, error) {
			slot, err := c.shmSlot(q, i, n)
			if err != nil {
				return nil, err
			}
			return slot[shmSlotHdr+bs : shmSlotHdr+be], nil
		}
		if inPlace {
			for q := 0; q < p; q++ {
				if q == me {
					continue
				}
				x, err := block(q)
				if err != nil {
					return err
				}
				if len(own) > 0 {
					c.kern.Combine(own, x)
				}
			}
			if gathered {
				c.e.shm.cp.Copy(red, own)
			}
		} else {
			for q := 0; q < p; q++ {
				x := own
				if q != me {
					if x, err = block(q); err != nil {
						return err
					}
				}
				switch {
				case q == 0:
					ntcopy.Plain(red, x)
				case len(red) > 0:
					c.kern.Combine(red, x)
				}
			}
			if wants {
				ntcopy.Plain(own, red)
			}
		}
		if gathered {
			c.e.shm.publish(word(mine, 64), id)
		}
		if wants {
			// Gather every other rank's reduced block.
			for q := 0; q < p; q++ {
				if q == me {
					continue
				}
				slot, err := c.shmSlot(q, i, n)
				if err != nil {
					return err
				}
				w := word(slot, 64)
				if err := c.shmWait(q, func() bool { return atomic.LoadUint64(w) == id }); err != nil {
					return err
				}
				qs, qe := blockStart(cnt, p, q)*c.esize, blockStart(cnt, p, q+1)*c.esize
				ntcopy.Plain(chunk[qs:qe], slot[shmSlotHdr+qs:shmSlotHdr+qe])
			}
		}
		c.shmDone(i)
		return nil
	})
}

// reduceShmRS is the shared-memory reduce for large vectors, where the
// root folding every rank's whole chunk (reduceShm) would put p−1 folds
// of the vector on one core: the ranks fold a block each (foldBlocksShm)
// and the root alone copies the reduced blocks out. Every rank reads
// every other rank's slot, so every rank checks every peer's header.
func (c *call) reduceShmRS(buf []byte, root int) error { return c.foldBlocksShm(buf, root) }

// reduceScatterShm is the shared-memory reduce-scatter: send is p blocks
// of len(recv) bytes, block r being rank r's to reduce. As in alltoallShm
// a round moves a piece of every block: each rank publishes piece k of
// every other rank's block (n bytes each, shmPublishPieces; its own block
// stays in send), then folds piece k of block me of every
// rank, in rank order, into recv. Nobody gathers the reduced blocks, so a
// round takes one synchronisation, not foldBlocksShm's two. Rank 0, and
// rank 1 of two when the op commutes and Deterministic is off, start
// from their own piece (foldsInPlace); the others from rank 0's. Each
// element is folded once, x0 ⊕ x1 ⊕ … ⊕ x(p−1), so the bits are those
// of Pairwise (orderedReduceScatter).
//
// recv may be send's first block (ReduceScatterInPlace): a round writes
// recv's piece k, which is piece k of block 0, only after publishing it,
// and a later round never reads it from send. Any other overlap goes
// through a copy of send.
func (c *call) reduceScatterShm(send, recv []byte) error {
	m := len(recv)
	if overlaps(send, recv) && unsafe.SliceData(send) != unsafe.SliceData(recv) {
		work := c.get(len(send))
		ntcopy.Plain(work, send)
		send = work
	}
	if per := max(c.whole(c.e.shm.slotShare), c.esize); m > per {
		return c.shmChunksOf(m, per, func(i, off, n int) error {
			return c.reduceScatterChunk(i, send, recv, off, n)
		})
	}
	c.shmLast = true // one round, its body called straight (see shmChunksOf)
	return c.roundOver(c.reduceScatterChunk(0, send, recv, 0, m))
}

// reduceScatterChunk is reduceScatterShm's round i: bytes off..off+n of
// every block, folded into recv[off:off+n].
func (c *call) reduceScatterChunk(i int, send, recv []byte, off, n int) error {
	p, me, m := c.e.size, c.e.rank, len(recv)
	if err := c.shmPublishPieces(i, send, m, off, n); err != nil {
		return err
	}
	inPlace := c.foldsInPlace()
	dst, own := recv[off:off+n], send[me*m+off:me*m+off+n]
	if inPlace {
		ntcopy.Plain(dst, own) // nothing to do when recv is send's first block on rank 0
	}
	for q := 0; q < p; q++ {
		if inPlace && q == me {
			continue
		}
		x := own
		if q != me {
			var err error
			if x, err = c.shmPiece(q, i, n); err != nil {
				return err
			}
		}
		switch {
		case q == 0 && !inPlace:
			ntcopy.Plain(dst, x)
		case n > 0:
			c.kern.Combine(dst, x)
		}
	}
	c.shmDone(i)
	return nil
}

// overlaps says whether a and b share a byte.
func overlaps(a, b []byte) bool {
	if len(a) == 0 || len(b) == 0 {
		return false
	}
	as, bs := uintptr(unsafe.Pointer(unsafe.SliceData(a))), uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	return as < bs+uintptr(len(b)) && bs < as+uintptr(len(a))
}

// allgatherShm: every rank publishes its block (send), at most a slot of
// it per round, and copies every other rank's chunk into its place in
// recv. Each rank starts with the rank after it, so that the ranks do
// not all read the same slot at once.
func (c *call) allgatherShm(send, recv []byte) error {
	if per := c.whole(c.e.shm.slot); len(send) > per {
		return c.shmChunksOf(len(send), per, func(i, off, n int) error {
			return c.allgatherChunk(i, send, recv, off, n)
		})
	}
	c.shmLast = true // one round, its body called straight (see shmChunksOf)
	return c.roundOver(c.allgatherChunk(0, send, recv, 0, len(send)))
}

// allgatherChunk is allgatherShm's round i: bytes off..off+n of every
// block.
func (c *call) allgatherChunk(i int, send, recv []byte, off, n int) error {
	p, me, blk := c.e.size, c.e.rank, len(send)
	if err := c.shmPut(i, send[off:off+n]); err != nil {
		return err
	}
	for k := 1; k < p; k++ {
		q := (me + k) % p
		x, err := c.shmGet(q, i, n)
		if err != nil {
			return err
		}
		ntcopy.Plain(recv[q*blk+off:q*blk+off+n], x)
	}
	c.shmDone(i)
	return nil
}

// shmPublishPieces publishes round i of a form that moves a piece of
// every block (reduceScatterShm, alltoallShm): bytes off..off+n of each
// other rank's block of send (blocks of m bytes), packed in rank order
// without this rank's own (pieceAt), (p−1)·n bytes in all: nobody reads
// that one, and leaving out its hole halves what two ranks move through
// the caches (a 16-byte block fits the slot's first line with its round
// word and header, as it did not with the hole).
func (c *call) shmPublishPieces(i int, send []byte, m, off, n int) error {
	p, me := c.e.size, c.e.rank
	slot, err := c.shmClaim()
	if err != nil {
		return err
	}
	out := dataOf(slot, (p-1)*n)
	for j := 0; j < p; j++ {
		if j != me {
			k := pieceAt(j, me)
			c.e.shm.cp.Copy(out[k*n:(k+1)*n], send[j*m+off:j*m+off+n])
		}
	}
	c.shmPublish(slot, i, (p-1)*n)
	return nil
}

// pieceAt is where rank q's piece sits among those rank from publishes
// (shmPublishPieces): in rank order, from's own left out.
func pieceAt(q, from int) int {
	if q > from {
		return q - 1
	}
	return q
}

// shmPiece waits for rank from's round i of a piece-moving form and
// returns the piece of n bytes it published for this rank.
func (c *call) shmPiece(from, i, n int) ([]byte, error) {
	size := (c.e.size - 1) * n
	k := pieceAt(c.e.rank, from)
	s, err := c.shmSlotFor(from, i, size, k*n, n)
	if err != nil {
		return nil, err
	}
	return dataOf(s, size)[k*n : (k+1)*n], nil
}

// alltoallShm: a round moves a piece of every block: each rank publishes
// piece k of every other rank's block (n bytes each, at most a slot in
// all; shmPublishPieces; its own block goes straight from send to recv),
// and copies piece
// k of block me out of every other rank's slot into that rank's block of
// recv.
func (c *call) alltoallShm(send, recv []byte) error {
	p, me := c.e.size, c.e.rank
	m := len(send) / p
	ntcopy.Plain(recv[me*m:(me+1)*m], send[me*m:(me+1)*m])
	if per := max(c.whole(c.e.shm.slotShare), c.esize); m > per {
		return c.shmChunksOf(m, per, func(i, off, n int) error {
			return c.alltoallChunk(i, send, recv, m, off, n)
		})
	}
	c.shmLast = true // one round, its body called straight (see shmChunksOf)
	return c.roundOver(c.alltoallChunk(0, send, recv, m, 0, m))
}

// alltoallChunk is alltoallShm's round i: bytes off..off+n of every
// block (of m bytes).
func (c *call) alltoallChunk(i int, send, recv []byte, m, off, n int) error {
	p, me := c.e.size, c.e.rank
	if err := c.shmPublishPieces(i, send, m, off, n); err != nil {
		return err
	}
	for k := 1; k < p; k++ {
		q := (me + k) % p
		x, err := c.shmPiece(q, i, n)
		if err != nil {
			return err
		}
		ntcopy.Plain(recv[q*m+off:q*m+off+n], x)
	}
	c.shmDone(i)
	return nil
}

// allgatherShmRead is the single-copy allgather (a PeerReader region, for
// large blocks): every rank publishes its send buffer's address, reads
// every other rank's block straight into recv (one kernel copy, no
// staging through the slots), marks the round done, and returns once
// every other rank has read its block, keeping send pinned till then.
func (c *call) allgatherShmRead(send, recv []byte) error {
	blk := len(send)
	return c.readBlocks(send, func(q int, addr uint64) error {
		return c.e.shm.pr.ReadPeer(q, addr, recv[q*blk:(q+1)*blk])
	})
}

// alltoallShmRead is the single-copy alltoall: as allgatherShmRead, each
// rank reading block me of every other rank's send buffer into that
// rank's block of recv.
func (c *call) alltoallShmRead(send, recv []byte) error {
	me := c.e.rank
	m := len(send) / c.e.size
	ntcopy.Plain(recv[me*m:(me+1)*m], send[me*m:(me+1)*m])
	return c.readBlocks(send, func(q int, addr uint64) error {
		return c.e.shm.pr.ReadPeer(q, addr+uint64(me*m), recv[q*m:(q+1)*m])
	})
}

// readBlocks publishes buf's address, calls read for every other rank
// with that rank's published address (from the rank after this one on),
// and waits until every other rank has read buf. It waits for them even
// when it fails itself: they may be reading buf, which the caller may
// change once this returns.
func (c *call) readBlocks(buf []byte, read func(q int, addr uint64) error) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	p, me := c.e.size, c.e.rank
	if err := c.publishBuf(0, buf, &pin); err != nil {
		return err
	}
	var failed error
	for k := 1; k < p && failed == nil; k++ {
		q := (me + k) % p
		addr, err := c.peerBuf(q, 0)
		if err != nil {
			failed = err
		} else if err := read(q, addr); err != nil {
			failed = c.fail(q, err)
		}
	}
	c.shmDone(0)
	if err := c.waitReaders(0); failed == nil {
		failed = err
	}
	return failed
}
