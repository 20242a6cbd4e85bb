package collectives

// allreduceRD is recursive doubling: in round k ranks r and r⊕2^k swap
// their whole partial results and both combine them, lower-rank block
// first, so both hold the same bits and rank order is kept (which makes it
// usable for non-commutative ops). For p not a power of two the first 2·rem
// ranks fold pairwise first and get the result back at the end. log2 p
// rounds of n bytes: the small-message algorithm.
func (c *call) allreduceRD(buf []byte) error {
	f := newFold(c.n)
	me := c.me
	tmp := c.get(len(buf))
	if me < 2*f.rem {
		if me%2 == 0 {
			r, err := c.send(me+1, buf, c.h.count)
			if err != nil {
				return err
			}
			if err := r.wait(); err != nil {
				return err
			}
		} else {
			if err := c.recvWait(me-1, tmp); err != nil {
				return err
			}
			c.combineLower(buf, tmp)
		}
	}
	if nr := f.newRank(me); nr >= 0 {
		for mask := 1; mask < f.pof2; mask <<= 1 {
			dst := f.old(nr ^ mask)
			if err := c.exchange(dst, buf, dst, tmp); err != nil {
				return err
			}
			if dst < me {
				c.combineLower(buf, tmp)
			} else {
				c.kern.Combine(buf, tmp)
			}
		}
	}
	return c.unfold(f, buf)
}

// unfold hands the result from each odd rank of a folded pair back to the
// even one.
func (c *call) unfold(f fold, buf []byte) error {
	me := c.me
	if me >= 2*f.rem {
		return nil
	}
	if me%2 == 1 {
		s, err := c.send(me-1, buf, c.h.count)
		if err != nil {
			return err
		}
		return s.wait()
	}
	return c.recvWait(me+1, buf)
}

func (c *call) recvWait(peer int, dst []byte) error {
	r, err := c.recv(peer, dst, c.h.count)
	if err != nil {
		return err
	}
	return r.wait()
}

// ringReduceScatter leaves block c.me of buf (split into p blocks) reduced
// over all ranks: in step s rank r sends its partial of block r−s−1 to r+1
// and adds the partial of block r−s−2 arriving from r−1. Each block is
// combined along one path, so it has the same bits wherever it is copied
// later. Needs a commutative op.
func (c *call) ringReduceScatter(buf []byte) error {
	p, es, cnt := c.n, c.esize, c.vec
	if p == 1 {
		return nil
	}
	right, left := mod(c.me+1, p), mod(c.me-1, p)
	tmp := c.get(len(block(buf, es, cnt, p, 0)))
	for s := 0; s < p-1; s++ {
		sb := block(buf, es, cnt, p, mod(c.me-s-1, p))
		rb := block(buf, es, cnt, p, mod(c.me-s-2, p))
		t := tmp[:len(rb)]
		if err := c.exchange(right, sb, left, t); err != nil {
			return err
		}
		c.kern.Combine(rb, t)
	}
	return nil
}

// ringAllgather spreads block r of buf from rank r to everyone: in step s
// rank r forwards block r−s to r+1 and receives block r−s−1 from r−1.
func (c *call) ringAllgather(buf []byte) error {
	p, es, cnt := c.n, c.esize, c.vec
	right, left := mod(c.me+1, p), mod(c.me-1, p)
	for s := 0; s < p-1; s++ {
		sb := block(buf, es, cnt, p, mod(c.me-s, p))
		rb := block(buf, es, cnt, p, mod(c.me-s-1, p))
		if err := c.exchange(right, sb, left, rb); err != nil {
			return err
		}
	}
	return nil
}

// allreduceRing is the bandwidth-optimal ring: reduce-scatter then
// allgather, 2(p−1) steps of n/p bytes.
func (c *call) allreduceRing(buf []byte) error {
	if err := c.ringReduceScatter(buf); err != nil {
		return err
	}
	return c.ringAllgather(buf)
}

// halvingReduceScatter is the recursive-halving half of Rabenseifner's
// algorithm, on the folded rank set: in round k (distance pof2/2^k) each
// new rank keeps the half of its current block range on its side of the
// partner, sends the other half, and combines what it receives, until new
// rank j holds the reduced blocks of old ranks first(j)..last(j). Blocks
// are the p blocks of buf, so the ranges line up with the old ranks.
// Returns the fold (even ranks that folded away hold nothing).
func (c *call) halvingReduceScatter(buf []byte) (fold, error) {
	p, es, cnt := c.n, c.esize, c.vec
	f := newFold(p)
	me := c.me
	tmp := c.get(len(buf))
	if me < 2*f.rem {
		if me%2 == 0 {
			s, err := c.send(me+1, buf, c.h.count)
			if err != nil {
				return f, err
			}
			return f, s.wait()
		}
		if err := c.recvWait(me-1, tmp); err != nil {
			return f, err
		}
		c.kern.Combine(buf, tmp)
	}
	nr := f.newRank(me)
	lo, hi := 0, f.pof2
	for mask := f.pof2 / 2; mask >= 1; mask >>= 1 {
		partner := nr ^ mask
		mid := lo + (hi-lo)/2
		keepLo, keepHi, sendLo, sendHi := lo, mid, mid, hi
		if nr >= mid {
			keepLo, keepHi, sendLo, sendHi = mid, hi, lo, mid
		}
		sb := blocks(buf, es, cnt, p, f.first(sendLo), f.last(sendHi-1)+1)
		kb := blocks(buf, es, cnt, p, f.first(keepLo), f.last(keepHi-1)+1)
		t := tmp[:len(kb)]
		dst := f.old(partner)
		if err := c.exchange(dst, sb, dst, t); err != nil {
			return f, err
		}
		c.kern.Combine(kb, t)
		lo, hi = keepLo, keepHi
	}
	return f, nil
}

// allreduceRabenseifner: recursive-halving reduce-scatter, then
// recursive-doubling allgather of the same ranges, then unfold. 2·log2 p
// rounds moving 2·n·(p−1)/p bytes: large messages, few ranks' latency.
func (c *call) allreduceRabenseifner(buf []byte) error {
	f, err := c.halvingReduceScatter(buf)
	if err != nil {
		return err
	}
	p, es, cnt := c.n, c.esize, c.vec
	if nr := f.newRank(c.me); nr >= 0 {
		for mask := 1; mask < f.pof2; mask <<= 1 {
			partner := nr ^ mask
			myLo, pLo := nr&^(mask-1), partner&^(mask-1)
			sb := blocks(buf, es, cnt, p, f.first(myLo), f.last(myLo+mask-1)+1)
			rb := blocks(buf, es, cnt, p, f.first(pLo), f.last(pLo+mask-1)+1)
			dst := f.old(partner)
			if err := c.exchange(dst, sb, dst, rb); err != nil {
				return err
			}
		}
	}
	return c.unfold(f, buf)
}

// orderedReduceScatter is the deterministic reduce-scatter: every rank sends
// block j of its vector straight to rank j (p−1 messages each), and rank j
// folds the p contributions strictly in rank order, x0 ⊕ x1 ⊕ … ⊕ x(p−1).
// The result depends only on p: not on the message size, not on the
// algorithm around it, and non-commutative ops get rank order. Leaves block
// c.me of buf reduced.
func (c *call) orderedReduceScatter(buf []byte) error {
	p, es, cnt := c.n, c.esize, c.vec
	if p == 1 {
		return nil
	}
	mine := block(buf, es, cnt, p, c.me)
	bl := len(mine)
	tmp := c.get(bl * p)
	slot := func(r int) []byte { return tmp[r*bl : (r+1)*bl] }
	if err := c.postAll(func() error {
		for s := 1; s < p; s++ {
			src := mod(c.me-s, p)
			if _, err := c.recv(src, slot(src), c.h.count); err != nil {
				return err
			}
		}
		for s := 1; s < p; s++ {
			dst := mod(c.me+s, p)
			if _, err := c.send(dst, block(buf, es, cnt, p, dst), c.h.count); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	copy(slot(c.me), mine)
	acc := slot(0)
	for r := 1; r < p; r++ {
		c.kern.Combine(acc, slot(r))
	}
	copy(mine, acc)
	return nil
}

func (c *call) allreduceOrdered(buf []byte) error {
	if err := c.orderedReduceScatter(buf); err != nil {
		return err
	}
	return c.ringAllgather(buf)
}

// reduceBinomial: ranks renumbered relative to the root; v receives the
// partial of v+2^k for every 2^k below its lowest set bit, combines, and
// sends to v minus that bit. log2 p rounds of n bytes. Commutative ops.
func (c *call) reduceBinomial(work []byte, root int) error {
	p := c.n
	vr := mod(c.me-root, p)
	tmp := c.get(len(work))
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			s, err := c.send(mod(vr-mask+root, p), work, c.h.count)
			if err != nil {
				return err
			}
			return s.wait()
		}
		if ch := vr | mask; ch < p {
			if err := c.recvWait(mod(ch+root, p), tmp); err != nil {
				return err
			}
			c.kern.Combine(work, tmp)
		}
	}
	return nil
}

// gatherBlocks sends each rank's block (block r of work on rank r) to root,
// which receives them in place: the second half of reduce-scatter + gather.
func (c *call) gatherBlocks(work []byte, root int) error {
	p, es, cnt := c.n, c.esize, c.vec
	if c.me != root {
		s, err := c.send(root, block(work, es, cnt, p, c.me), c.h.count)
		if err != nil {
			return err
		}
		return s.wait()
	}
	recvs := make([]*inMsg, 0, p-1)
	for r := 0; r < p; r++ {
		if r == root {
			continue
		}
		m, err := c.recv(r, block(work, es, cnt, p, r), c.h.count)
		if err != nil {
			return err
		}
		recvs = append(recvs, m)
	}
	for _, m := range recvs {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return nil
}
