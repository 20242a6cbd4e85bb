package collectives

// barrierDissemination: in round k every rank signals rank+2^k and waits for
// rank−2^k; after ⌈log2 p⌉ rounds every rank has (transitively) heard from
// every other, for any p.
func (c *call) barrierDissemination() error {
	for k := 1; k < c.n; k <<= 1 {
		if err := c.exchange(mod(c.me+k, c.n), nil, mod(c.me-k, c.n), nil); err != nil {
			return err
		}
	}
	return nil
}

// bcastBinomial: with ranks renumbered relative to the root, rank v receives
// from v minus its lowest set bit and forwards to v+2^k for every 2^k below
// that bit: ⌈log2 p⌉ rounds of whole messages. Best for small messages.
func (c *call) bcastBinomial(buf []byte, root int) error {
	sends, err := c.bcastBinomialSends(buf, root)
	if err != nil {
		return err
	}
	return c.waitOuts(sends)
}

// bcastBinomialSends is bcastBinomial up to its sends: it receives buf
// from its parent and sends it on to its children, and returns the
// records of those sends (outs[sends.from:sends.to]) for the caller to
// wait for, which may do other work first (bcastHier).
func (c *call) bcastBinomialSends(buf []byte, root int) (sends outRange, err error) {
	p := c.n
	vr := mod(c.me-root, p)
	mask := 1
	for mask < p {
		if vr&mask != 0 {
			r, err := c.recv(mod(vr-mask+root, p), buf, c.h.count)
			if err != nil {
				return sends, err
			}
			if err := r.wait(); err != nil {
				return sends, err
			}
			break
		}
		mask <<= 1
	}
	sends.from = c.nout
	for mask >>= 1; mask > 0; mask >>= 1 {
		if vr+mask < p {
			if _, err := c.send(mod(vr+mask+root, p), buf, c.h.count); err != nil {
				return sends, err
			}
		}
	}
	sends.to = c.nout
	return sends, nil
}

// bcastScatterAllgather (van de Geijn): the root scatters p blocks down a
// binomial tree (each subtree receives its blocks once), then a ring
// allgather completes every rank: about 2·n bytes per rank instead of
// n·log2 p. For large messages.
func (c *call) bcastScatterAllgather(buf []byte, root int) error {
	p, es, cnt := c.n, c.esize, c.vec
	vr := mod(c.me-root, p)
	real := func(v int) int { return mod(v+root, p) }
	// Scatter: vr receives blocks [vr, vr+size) from its parent.
	mask := 1
	for mask < p {
		if vr&mask != 0 {
			r, err := c.recv(real(vr-mask), blocks(buf, es, cnt, p, vr, min(vr+mask, p)), c.h.count)
			if err != nil {
				return err
			}
			if err := r.wait(); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	var sends []*outMsg
	for mask >>= 1; mask > 0; mask >>= 1 {
		if ch := vr + mask; ch < p {
			s, err := c.send(real(ch), blocks(buf, es, cnt, p, ch, min(ch+mask, p)), c.h.count)
			if err != nil {
				return err
			}
			sends = append(sends, s)
		}
	}
	for _, s := range sends {
		if err := s.wait(); err != nil {
			return err
		}
	}
	// Ring allgather in relative numbering: vr holds block vr.
	right, left := real(vr+1), real(vr-1)
	for s := 0; s < p-1; s++ {
		sb := block(buf, es, cnt, p, mod(vr-s, p))
		rb := block(buf, es, cnt, p, mod(vr-s-1, p))
		if err := c.exchange(right, sb, left, rb); err != nil {
			return err
		}
	}
	return nil
}

// bcastChain pipelines segments down the chain root → root+1 → …: after the
// pipeline fills, every link carries a segment at once, so the time tends
// to n·β plus (p−1) segment latencies. Up to chainWindow receives are
// posted ahead.
func (c *call) bcastChain(buf []byte, root int) error {
	p := c.n
	vr := mod(c.me-root, p)
	seg := max(c.e.opts.segment()/c.esize, 1) * c.esize
	nseg := max((len(buf)+seg-1)/seg, 1)
	segment := func(i int) []byte { return buf[min(i*seg, len(buf)):min((i+1)*seg, len(buf))] }
	next := -1
	if vr+1 < p {
		next = mod(vr+1+root, p)
	}
	prev := mod(vr-1+root, p)
	const chainWindow = 8
	var recvs []*inMsg
	post := func(i int) error {
		r, err := c.recv(prev, segment(i), c.h.count)
		recvs = append(recvs, r)
		return err
	}
	if vr > 0 {
		for i := 0; i < min(chainWindow, nseg); i++ {
			if err := post(i); err != nil {
				return err
			}
		}
	}
	var sends []*outMsg
	for i := 0; i < nseg; i++ {
		if vr > 0 {
			if err := recvs[i].wait(); err != nil {
				return err
			}
			if i+chainWindow < nseg {
				if err := post(i + chainWindow); err != nil {
					return err
				}
			}
		}
		if next >= 0 {
			s, err := c.send(next, segment(i), c.h.count)
			if err != nil {
				return err
			}
			sends = append(sends, s)
		}
	}
	for _, s := range sends {
		if err := s.wait(); err != nil {
			return err
		}
	}
	return nil
}
