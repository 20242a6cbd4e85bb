package collectives

import "github.com/rdmago/rdmago/internal/ntcopy"

// In this file buf is the full result vector of p blocks of m elements
// (allgather, gather, scatter), and c.h.count is m, the per-rank count.

func (c *call) rblock(buf []byte, i int) []byte {
	m := int(c.h.count) * c.esize
	return buf[i*m : (i+1)*m]
}

func (c *call) rblocks(buf []byte, i, j int) []byte {
	m := int(c.h.count) * c.esize
	return buf[i*m : j*m]
}

// allgatherRing: p−1 steps, each forwarding the block received last.
func (c *call) allgatherRing(buf []byte) error {
	p := c.n
	right, left := mod(c.me+1, p), mod(c.me-1, p)
	for s := 0; s < p-1; s++ {
		if err := c.exchange(right, c.rblock(buf, mod(c.me-s, p)), left, c.rblock(buf, mod(c.me-s-1, p))); err != nil {
			return err
		}
	}
	return nil
}

// allgatherRD: recursive doubling on the folded rank set; in round k new
// ranks swap the contiguous ranges of 2^k new ranks' blocks they hold
// (contiguous old ranks too, see fold). log2 p rounds (+2 when p is not a
// power of two).
func (c *call) allgatherRD(buf []byte) error {
	f := newFold(c.n)
	me := c.me
	if me < 2*f.rem {
		if me%2 == 0 {
			s, err := c.send(me+1, c.rblock(buf, me), c.h.count)
			if err != nil {
				return err
			}
			if err := s.wait(); err != nil {
				return err
			}
		} else if err := c.recvWait(me-1, c.rblock(buf, me-1)); err != nil {
			return err
		}
	}
	if nr := f.newRank(me); nr >= 0 {
		for mask := 1; mask < f.pof2; mask <<= 1 {
			partner := nr ^ mask
			myLo, pLo := nr&^(mask-1), partner&^(mask-1)
			sb := c.rblocks(buf, f.first(myLo), f.last(myLo+mask-1)+1)
			rb := c.rblocks(buf, f.first(pLo), f.last(pLo+mask-1)+1)
			dst := f.old(partner)
			if err := c.exchange(dst, sb, dst, rb); err != nil {
				return err
			}
		}
	}
	return c.unfold(f, buf)
}

// allgatherBruck: works in a rotated buffer where slot i holds the block of
// rank me+i. In round k (k = 1, 2, 4, …) rank me sends its first
// min(k, p−k) slots to me−k and appends as many from me+k; ⌈log2 p⌉ rounds
// for any p, then one rotation into place.
func (c *call) allgatherBruck(buf []byte) error {
	p := c.n
	tmp := c.get(len(buf))
	ntcopy.Bulk(c.rblock(tmp, 0), c.rblock(buf, c.me))
	for k := 1; k < p; k <<= 1 {
		cnt := min(k, p-k)
		if err := c.exchange(mod(c.me-k, p), c.rblocks(tmp, 0, cnt), mod(c.me+k, p), c.rblocks(tmp, k, k+cnt)); err != nil {
			return err
		}
	}
	for i := 0; i < p; i++ {
		ntcopy.Bulk(c.rblock(buf, mod(c.me+i, p)), c.rblock(tmp, i))
	}
	return nil
}

// allgatherLinear: every rank sends its block straight to every other rank,
// all receives and sends posted at once (in the pairwise order, so that
// no rank is everyone's first destination): one round of overlapping
// messages instead of p−1 dependent steps. Small blocks, few ranks.
func (c *call) allgatherLinear(buf []byte) error {
	p := c.n
	return c.postAll(func() error {
		for s := 1; s < p; s++ {
			src := mod(c.me-s, p)
			if _, err := c.recv(src, c.rblock(buf, src), c.h.count); err != nil {
				return err
			}
		}
		for s := 1; s < p; s++ {
			if _, err := c.send(mod(c.me+s, p), c.rblock(buf, c.me), c.h.count); err != nil {
				return err
			}
		}
		return nil
	})
}

// allgathervRing: the ring with blocks of per-rank counts (displacements
// are the prefix sums); each message announces its block's count.
func (c *call) allgathervRing(buf []byte, counts []int) error {
	p := c.n
	off := prefix(counts)
	b := func(i int) []byte { return buf[off[i]*c.esize : off[i+1]*c.esize] }
	right, left := mod(c.me+1, p), mod(c.me-1, p)
	for s := 0; s < p-1; s++ {
		si, ri := mod(c.me-s, p), mod(c.me-s-1, p)
		if err := c.sendrecv(right, b(si), int64(counts[si]), left, b(ri), int64(counts[ri])); err != nil {
			return err
		}
	}
	return nil
}

func prefix(counts []int) []int {
	off := make([]int, len(counts)+1)
	for i, n := range counts {
		off[i+1] = off[i] + n
	}
	return off
}

// gatherLinear: the root posts p−1 receives straight into place.
func (c *call) gatherLinear(send, recv []byte, root int) error {
	if c.me != root {
		s, err := c.send(root, send, c.h.count)
		if err != nil {
			return err
		}
		return s.wait()
	}
	ntcopy.Bulk(c.rblock(recv, root), send)
	var rs []*inMsg
	for r := 0; r < c.n; r++ {
		if r != root {
			m, err := c.recv(r, c.rblock(recv, r), c.h.count)
			if err != nil {
				return err
			}
			rs = append(rs, m)
		}
	}
	for _, m := range rs {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return nil
}

// gatherBinomial: relative rank v collects the blocks of its subtree
// [v, v+2^k) from its children, then sends them to its parent in one
// message: log2 p rounds instead of p−1 messages at the root.
func (c *call) gatherBinomial(send, recv []byte, root int) error {
	p := c.n
	vr := mod(c.me-root, p)
	tmp := c.get(int(c.h.count) * c.esize * p)
	ntcopy.Bulk(c.rblock(tmp, 0), send)
	have := 1
	for mask := 1; mask < p; mask <<= 1 {
		if vr&mask != 0 {
			s, err := c.send(mod(vr-mask+root, p), c.rblocks(tmp, 0, have), c.h.count)
			if err != nil {
				return err
			}
			return s.wait()
		}
		if ch := vr + mask; ch < p {
			cnt := min(mask, p-ch)
			if err := c.recvWait(mod(ch+root, p), c.rblocks(tmp, mask, mask+cnt)); err != nil {
				return err
			}
			have = mask + cnt
		}
	}
	for v := 0; v < p; v++ {
		ntcopy.Bulk(c.rblock(recv, mod(v+root, p)), c.rblock(tmp, v))
	}
	return nil
}

// scatterLinear: the root sends each block straight to its rank.
func (c *call) scatterLinear(send, recv []byte, root int) error {
	if c.me != root {
		return c.recvWait(root, recv)
	}
	var ss []*outMsg
	for r := 0; r < c.n; r++ {
		if r != root {
			m, err := c.send(r, c.rblock(send, r), c.h.count)
			if err != nil {
				return err
			}
			ss = append(ss, m)
		}
	}
	ntcopy.Bulk(recv, c.rblock(send, root))
	for _, m := range ss {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return nil
}

// scatterBinomial mirrors gatherBinomial: each subtree's blocks travel
// down as one message.
func (c *call) scatterBinomial(send, recv []byte, root int) error {
	p := c.n
	vr := mod(c.me-root, p)
	tmp := c.get(int(c.h.count) * c.esize * p)
	mask := 1
	if vr == 0 {
		for v := 0; v < p; v++ {
			ntcopy.Bulk(c.rblock(tmp, v), c.rblock(send, mod(v+root, p)))
		}
		for mask < p {
			mask <<= 1
		}
	} else {
		for vr&mask == 0 {
			mask <<= 1
		}
		if err := c.recvWait(mod(vr-mask+root, p), c.rblocks(tmp, 0, min(mask, p-vr))); err != nil {
			return err
		}
	}
	var ss []*outMsg
	for m := mask >> 1; m > 0; m >>= 1 {
		if ch := vr + m; ch < p {
			s, err := c.send(mod(ch+root, p), c.rblocks(tmp, m, m+min(m, p-ch)), c.h.count)
			if err != nil {
				return err
			}
			ss = append(ss, s)
		}
	}
	ntcopy.Bulk(recv, c.rblock(tmp, 0))
	for _, s := range ss {
		if err := s.wait(); err != nil {
			return err
		}
	}
	return nil
}

// gathervLinear / scattervLinear: per-rank counts known at the root; each
// message announces the sender's count, which must equal the root's
// counts entry.
func (c *call) gathervLinear(send, recv []byte, counts []int, root int) error {
	if c.me != root {
		s, err := c.send(root, send, int64(len(send)/c.esize))
		if err != nil {
			return err
		}
		return s.wait()
	}
	off := prefix(counts)
	b := func(i int) []byte { return recv[off[i]*c.esize : off[i+1]*c.esize] }
	ntcopy.Bulk(b(root), send)
	var rs []*inMsg
	for r := 0; r < c.n; r++ {
		if r != root {
			m, err := c.recv(r, b(r), int64(counts[r]))
			if err != nil {
				return err
			}
			rs = append(rs, m)
		}
	}
	for _, m := range rs {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return nil
}

func (c *call) scattervLinear(send, recv []byte, counts []int, root int) error {
	if c.me != root {
		r, err := c.recv(root, recv, int64(len(recv)/c.esize))
		if err != nil {
			return err
		}
		return r.wait()
	}
	off := prefix(counts)
	b := func(i int) []byte { return send[off[i]*c.esize : off[i+1]*c.esize] }
	var ss []*outMsg
	for r := 0; r < c.n; r++ {
		if r != root {
			m, err := c.send(r, b(r), int64(counts[r]))
			if err != nil {
				return err
			}
			ss = append(ss, m)
		}
	}
	ntcopy.Bulk(recv, b(root))
	for _, m := range ss {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return nil
}

// alltoallPairwise: in step s rank r sends its block for r+s and receives
// the block from r−s: p−1 steps, every link busy, no scratch.
func (c *call) alltoallPairwise(send, recv []byte) error {
	p := c.n
	ntcopy.Bulk(c.rblock(recv, c.me), c.rblock(send, c.me))
	for s := 1; s < p; s++ {
		dst, src := mod(c.me+s, p), mod(c.me-s, p)
		if err := c.exchange(dst, c.rblock(send, dst), src, c.rblock(recv, src)); err != nil {
			return err
		}
	}
	return nil
}

// alltoallLinear: every block goes straight to its rank, all receives
// and sends posted at once (in the pairwise order): one round of
// overlapping messages instead of p−1 dependent steps. Small blocks, few
// ranks.
func (c *call) alltoallLinear(send, recv []byte) error {
	p := c.n
	ntcopy.Bulk(c.rblock(recv, c.me), c.rblock(send, c.me))
	return c.postAll(func() error {
		for s := 1; s < p; s++ {
			src := mod(c.me-s, p)
			if _, err := c.recv(src, c.rblock(recv, src), c.h.count); err != nil {
				return err
			}
		}
		for s := 1; s < p; s++ {
			dst := mod(c.me+s, p)
			if _, err := c.send(dst, c.rblock(send, dst), c.h.count); err != nil {
				return err
			}
		}
		return nil
	})
}

// alltoallBruck: rotate so slot i holds the block for rank me+i; in round
// k every slot whose index has bit k set moves k ranks forward (packed into
// one message); after ⌈log2 p⌉ rounds slot i holds the block from rank
// me−i, which a final rotation puts in place. Fewer, larger messages:
// small blocks, many ranks.
func (c *call) alltoallBruck(send, recv []byte) error {
	p := c.n
	tmp := c.get(len(send))
	bl := int(c.h.count) * c.esize
	for i := 0; i < p; i++ {
		ntcopy.Bulk(c.rblock(tmp, i), c.rblock(send, mod(c.me+i, p)))
	}
	pack := c.get(bl * ((p + 1) / 2))
	unpack := c.get(bl * ((p + 1) / 2))
	for k := 1; k < p; k <<= 1 {
		n := 0
		for i := 0; i < p; i++ {
			if i&k != 0 {
				ntcopy.Bulk(pack[n*bl:], c.rblock(tmp, i))
				n++
			}
		}
		if err := c.exchange(mod(c.me+k, p), pack[:n*bl], mod(c.me-k, p), unpack[:n*bl]); err != nil {
			return err
		}
		n = 0
		for i := 0; i < p; i++ {
			if i&k != 0 {
				ntcopy.Bulk(c.rblock(tmp, i), unpack[n*bl:(n+1)*bl])
				n++
			}
		}
	}
	for i := 0; i < p; i++ {
		ntcopy.Bulk(c.rblock(recv, mod(c.me-i, p)), c.rblock(tmp, i))
	}
	return nil
}

// alltoallvPairwise: pairwise with per-peer counts (prefix-sum layout);
// each message announces its count, which must equal the receiver's
// recvcounts entry.
func (c *call) alltoallvPairwise(send []byte, scounts []int, recv []byte, rcounts []int) error {
	p := c.n
	so, ro := prefix(scounts), prefix(rcounts)
	sb := func(i int) []byte { return send[so[i]*c.esize : so[i+1]*c.esize] }
	rb := func(i int) []byte { return recv[ro[i]*c.esize : ro[i+1]*c.esize] }
	ntcopy.Bulk(rb(c.me), sb(c.me))
	for s := 1; s < p; s++ {
		dst, src := mod(c.me+s, p), mod(c.me-s, p)
		if err := c.sendrecv(dst, sb(dst), int64(scounts[dst]), src, rb(src), int64(rcounts[src])); err != nil {
			return err
		}
	}
	return nil
}
