package collectives

import "github.com/rdmago/rdmago/internal/ntcopy"

// allreduceRD is recursive doubling: in round k ranks r and r⊕2^k swap
// their whole partial results and both combine them, lower-rank block
// first, so both hold the same bits and rank order is kept (which makes it
// usable for non-commutative ops). For p not a power of two the first 2·rem
// ranks fold pairwise first and get the result back at the end. log2 p
// rounds of n bytes: the small-message algorithm.
//
// With send not nil the input is send and buf only the output: the first
// step sends send itself, and a rank whose partner there is the lower one
// receives the partner's vector straight into buf and combines send into
// it (the same operands, in the same order, as combineLower), so it copies
// nothing; one whose partner is higher copies send into buf, as the caller
// would have.
func (c *call) allreduceRD(send, buf []byte) error {
	f := newFold(c.n)
	me := c.me
	tmp := c.get(len(buf))
	if me < 2*f.rem {
		switch {
		case me%2 == 0:
			from := buf
			if send != nil {
				from = send
			}
			r, err := c.send(me+1, from, c.h.count)
			if err != nil {
				return err
			}
			if err := r.wait(); err != nil {
				return err
			}
		case send != nil:
			if err := c.recvWait(me-1, buf); err != nil {
				return err
			}
			c.kern.Combine(buf, send)
		default:
			if err := c.recvWait(me-1, tmp); err != nil {
				return err
			}
			c.combineLower(buf, tmp)
		}
		send = nil
	}
	if nr := f.newRank(me); nr >= 0 {
		for mask := 1; mask < f.pof2; mask <<= 1 {
			dst := f.old(nr ^ mask)
			switch {
			case send != nil && dst < me:
				if err := c.exchange(dst, send, dst, buf); err != nil {
					return err
				}
				c.kern.Combine(buf, send)
			case send != nil:
				if err := c.exchange(dst, send, dst, tmp); err != nil {
					return err
				}
				ntcopy.Bulk(buf, send)
				c.kern.Combine(buf, tmp)
			default:
				if err := c.exchange(dst, buf, dst, tmp); err != nil {
					return err
				}
				if dst < me {
					c.combineLower(buf, tmp)
				} else {
					c.kern.Combine(buf, tmp)
				}
			}
			send = nil
		}
	}
	if send != nil { // one rank: no step read it
		ntcopy.Bulk(buf, send)
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

// recvFoldWait receives from peer and folds the message into acc
// (recvFold).
func (c *call) recvFoldWait(peer int, acc []byte) error {
	r, err := c.recvFold(peer, acc, c.h.count)
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
	for s := 0; s < p-1; s++ {
		sb := block(buf, es, cnt, p, mod(c.me-s-1, p))
		rb := block(buf, es, cnt, p, mod(c.me-s-2, p))
		if err := c.exchangeFold(right, sb, left, rb); err != nil {
			return err
		}
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
// allgather, 2(p−1) steps of n/p bytes, pipelined in pieces (ringPipe).
func (c *call) allreduceRing(buf []byte) error {
	return c.ringPipe(nil, buf, c.e.model.ringPiece(c.esize))
}

// ringPipe is the ring allreduce of send into buf (send nil: buf in
// place) with every block moved in pieces of at most piece bytes, all of a
// step's pieces posted at once: a rank reduces each piece as it arrives,
// while the next ones are still on the wire, and forwards it at once, so
// the next step's transfer starts before this step's has ended. One
// message per block would leave the reduction waiting for the whole block
// and the link idle while it runs.
//
// The 2(p−1) steps are those of ringReduceScatter and ringAllgather: in
// reduce-scatter step s rank r sends block r−s−1 and reduces block r−s−2
// with what arrives; in allgather step s it forwards block r−s and receives
// block r−s−1 in place. What a step sends is what the step before
// received, piece for piece, so piece j of step t+1 leaves as soon as
// piece j of step t is in. Each block is reduced along one path, as in the
// unpiped ring, so every rank gets the same bits. Receives are posted one
// step ahead. In place, the reduce-scatter receives into the other half of
// a two-block scratch; with a separate send it receives straight into
// buf's block and reduces send's into it, and buf is never copied. The
// allgather receives straight into buf: a block received there was sent
// in the reduce-scatter, and its new contents depend on that send having
// arrived.
func (c *call) ringPipe(send, buf []byte, piece int) error {
	p, es, cnt := c.n, c.esize, c.vec
	if p == 1 {
		if send != nil {
			ntcopy.Bulk(buf, send)
		}
		return nil
	}
	me := c.me
	right, left := mod(me+1, p), mod(me-1, p)
	steps := 2 * (p - 1)
	// sendBlk and recvBlk are the blocks step t sends and receives;
	// sendBlk(t+1) == recvBlk(t).
	sendBlk := func(t int) int {
		if t < p-1 {
			return mod(me-t-1, p)
		}
		return mod(me-(t-p+1), p)
	}
	recvBlk := func(t int) int { return sendBlk(t + 1) }
	pieces := func(b []byte) int { return max(1, (len(b)+piece-1)/piece) }
	cut := func(b []byte, j int) []byte { return b[min(j*piece, len(b)):min((j+1)*piece, len(b))] }
	var tmp []byte
	bl := len(block(buf, es, cnt, p, 0)) // block 0 is the largest
	if send == nil {
		tmp = c.get(2 * bl)
	}
	// dst is where step t's receives land: scratch while reducing in
	// place, else buf's block.
	dst := func(t int) []byte {
		b := block(buf, es, cnt, p, recvBlk(t))
		if t < p-1 && send == nil {
			return tmp[(t%2)*bl:][:len(b)]
		}
		return b
	}
	ins := make([][]*inMsg, 2) // step t's receives, by t%2
	postRecvs := func(t int) error {
		d := dst(t)
		ins[t%2] = ins[t%2][:0]
		for j, k := 0, pieces(d); j < k; j++ {
			m, err := c.recv(left, cut(d, j), c.h.count)
			if err != nil {
				return err
			}
			ins[t%2] = append(ins[t%2], m)
		}
		return nil
	}
	var outs []*outMsg
	sendPiece := func(t, j int) error {
		from := buf
		if t == 0 && send != nil {
			from = send
		}
		m, err := c.send(right, cut(block(from, es, cnt, p, sendBlk(t)), j), c.h.count)
		if err == nil {
			outs = append(outs, m)
		}
		return err
	}
	c.beginBatch()
	err := postRecvs(0)
	for j, k := 0, pieces(block(buf, es, cnt, p, sendBlk(0))); err == nil && j < k; j++ {
		err = sendPiece(0, j)
	}
	c.endBatch()
	if err != nil {
		return err
	}
	for t := 0; t < steps; t++ {
		if t+1 < steps {
			c.beginBatch()
			err := postRecvs(t + 1)
			c.endBatch()
			if err != nil {
				return err
			}
		}
		d := dst(t)
		for j, m := range ins[t%2] {
			if err := m.wait(); err != nil {
				return err
			}
			if t < p-1 {
				if send == nil {
					c.kern.Combine(cut(block(buf, es, cnt, p, recvBlk(t)), j), cut(d, j))
				} else {
					c.kern.Combine(cut(d, j), cut(block(send, es, cnt, p, recvBlk(t)), j))
				}
			}
			if t+1 < steps {
				if err := sendPiece(t+1, j); err != nil {
					return err
				}
			}
		}
	}
	for _, m := range outs {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return nil
}

// halvingReduceScatter is the recursive-halving half of Rabenseifner's
// algorithm, on the folded rank set: in round k (distance pof2/2^k) each
// new rank keeps the half of its current block range on its side of the
// partner, sends the other half, and combines what it receives, until new
// rank j holds the reduced blocks of old ranks first(j)..last(j). Blocks
// are the p blocks of buf, so the ranges line up with the old ranks.
// Returns the fold (even ranks that folded away hold nothing).
//
// With send not nil the input is send and buf only the output (the ranges
// this rank does not end up holding are left as they were): the first
// round sends send's half and receives the partner's straight into buf's
// kept half, which it then reduces with send's, so neither send nor a
// scratch copy of it is needed. (A rank that folds copies send into buf
// first and runs in place.)
func (c *call) halvingReduceScatter(send, buf []byte) (fold, error) {
	p, es, cnt := c.n, c.esize, c.vec
	f := newFold(p)
	me := c.me
	if send != nil && (me < 2*f.rem || f.pof2 == 1) {
		ntcopy.Bulk(buf, send)
		send = nil
	}
	if me < 2*f.rem {
		if me%2 == 0 {
			s, err := c.send(me+1, buf, c.h.count)
			if err != nil {
				return f, err
			}
			return f, s.wait()
		}
		if err := c.recvFoldWait(me-1, buf); err != nil {
			return f, err
		}
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
		from := buf
		if send != nil {
			from = send
		}
		sb := blocks(from, es, cnt, p, f.first(sendLo), f.last(sendHi-1)+1)
		kb := blocks(buf, es, cnt, p, f.first(keepLo), f.last(keepHi-1)+1)
		dst := f.old(partner)
		if send != nil {
			if err := c.exchange(dst, sb, dst, kb); err != nil {
				return f, err
			}
			c.kern.Combine(kb, blocks(send, es, cnt, p, f.first(keepLo), f.last(keepHi-1)+1))
			send = nil
		} else if err := c.exchangeFold(dst, sb, dst, kb); err != nil {
			return f, err
		}
		lo, hi = keepLo, keepHi
	}
	return f, nil
}

// allreduceRabenseifner: recursive-halving reduce-scatter, then
// recursive-doubling allgather of the same ranges, then unfold. 2·log2 p
// rounds moving 2·n·(p−1)/p bytes: large messages, few ranks' latency.
// With send not nil it reduces send into buf (see halvingReduceScatter).
func (c *call) allreduceRabenseifner(send, buf []byte) error {
	f, err := c.halvingReduceScatter(send, buf)
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
	ntcopy.Bulk(slot(c.me), mine)
	acc := slot(0)
	for r := 1; r < p; r++ {
		c.kern.Combine(acc, slot(r))
	}
	ntcopy.Bulk(mine, acc)
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
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			s, err := c.send(mod(vr-mask+root, p), work, c.h.count)
			if err != nil {
				return err
			}
			return s.wait()
		}
		if ch := vr | mask; ch < p {
			if err := c.recvFoldWait(mod(ch+root, p), work); err != nil {
				return err
			}
		}
	}
	return nil
}

// reduceToRoot reduces work to root by Rabenseifner's form (the ring
// reduce-scatter, then every block gathered at root) or else the binomial
// tree.
func (c *call) reduceToRoot(work []byte, root int, rabenseifner bool) error {
	if !rabenseifner {
		return c.reduceBinomial(work, root)
	}
	if err := c.ringReduceScatter(work); err != nil {
		return err
	}
	return c.gatherBlocks(work, root)
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
