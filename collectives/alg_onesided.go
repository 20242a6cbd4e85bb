package collectives

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/internal/ntcopy"
)

// Notification words of the one-sided ring: bit 31 says data (set) or
// credit (clear); the low bit names the window slot.
const (
	immData  = 1 << 31
	slotMask = 1
)

// window returns the Engine's one-sided window (two slots of SegmentBytes),
// exposing it on first use. Every rank reaches the first use in the same
// call, because all ranks run the same algorithm.
func (e *Engine) window(ctx context.Context) (Window, int, error) {
	seg := e.opts.segment()
	if e.win != nil {
		return e.win, seg, nil
	}
	os, ok := e.g.(OneSided)
	if !ok {
		return nil, 0, fmt.Errorf("%w: group has no one-sided windows", ErrUnsupported)
	}
	buf := scratch.get(2 * seg)
	w, err := os.Expose(ctx, buf)
	if err != nil {
		scratch.put(buf)
		return nil, 0, err
	}
	e.win, e.winBuf = w, buf
	return w, seg, nil
}

// osLink tracks the notifications from one peer, which mix data (from the
// left neighbour) and credits (from the right one; the same rank when p=2).
type osLink struct {
	credits int
	data    []uint32
}

// allreduceRingOneSided is the ring allreduce with its chunks moved by
// one-sided writes: rank r writes each segment straight into slot s of its
// right neighbour's window with a data notification, the neighbour reduces
// (or, in the allgather half, copies) it out of the slot and returns a
// credit. Two slots let the next write overlap the neighbour's reduction.
// A header-only exchange with both neighbours first checks the counts.
func (c *call) allreduceRingOneSided(buf []byte) error {
	p, es, cnt := c.n, c.esize, c.vec
	right, left := mod(c.me+1, p), mod(c.me-1, p)
	if err := c.exchange(right, nil, left, nil); err != nil {
		return err
	}
	if p == 1 {
		return nil
	}
	win, seg, err := c.e.window(c.cancelCtx())
	if err != nil {
		return c.fail(-1, err)
	}
	seg = max(seg/es, 1) * es
	mybuf := c.e.winBuf
	links := map[int]*osLink{left: {}, right: {}}
	links[right].credits = 2
	var sent, got int
	var puts []*pendingReq
	// next pops notifications from peer until one of the wanted kind.
	next := func(peer int, data bool) (uint32, error) {
		l := links[peer]
		for {
			if data && len(l.data) > 0 {
				v := l.data[0]
				l.data = l.data[1:]
				return v, nil
			}
			if !data && l.credits > 0 {
				l.credits--
				return 0, nil
			}
			v, err := win.WaitNotify(c.cancelCtx(), c.world(peer))
			if err != nil {
				return 0, c.fail(peer, err)
			}
			if v&immData != 0 {
				links[peer].data = append(links[peer].data, v)
			} else {
				links[peer].credits++
			}
		}
	}
	put := func(src []byte) error {
		if _, err := next(right, false); err != nil {
			return err
		}
		slot := sent & slotMask
		sent++
		r, err := win.Put(c.world(right), slot*seg, src, uint32(immData|slot))
		if err != nil {
			return c.fail(right, err)
		}
		// Not waited for here: the credits bound the writes in flight to
		// two, and the source block is not written again before the end of
		// the phase, where flush waits for them.
		puts = append(puts, c.track(r, nil))
		return nil
	}
	flush := func() error {
		for _, p := range puts {
			if _, err := p.wait(c); err != nil {
				return c.fail(right, err)
			}
		}
		puts = puts[:0]
		return nil
	}
	take := func(dst []byte, reduce bool) error {
		v, err := next(left, true)
		if err != nil {
			return err
		}
		slot := int(v & slotMask)
		if slot != got&slotMask {
			return c.fail(left, fmt.Errorf("%w: one-sided data in slot %d, expected %d", ErrProtocol, slot, got&slotMask))
		}
		got++
		src := mybuf[slot*seg : slot*seg+len(dst)]
		if reduce {
			c.kern.Combine(dst, src)
		} else {
			ntcopy.Bulk(dst, src)
		}
		r, err := win.Put(c.world(left), 0, nil, uint32(slot))
		if err != nil {
			return c.fail(left, err)
		}
		if _, err := c.track(r, nil).wait(c); err != nil {
			return c.fail(left, err)
		}
		return nil
	}
	segs := func(b []byte) int { return (len(b) + seg - 1) / seg }
	part := func(b []byte, i int) []byte { return b[i*seg : min((i+1)*seg, len(b))] }
	step := func(sb, rb []byte, reduce bool) error {
		ns, nr := segs(sb), segs(rb)
		for i := 0; i < max(ns, nr); i++ {
			if i < ns {
				if err := put(part(sb, i)); err != nil {
					return err
				}
			}
			if i < nr {
				if err := take(part(rb, i), reduce); err != nil {
					return err
				}
			}
		}
		return nil
	}
	for s := 0; s < p-1; s++ { // reduce-scatter: block me ends reduced
		if err := step(block(buf, es, cnt, p, mod(c.me-s-1, p)), block(buf, es, cnt, p, mod(c.me-s-2, p)), true); err != nil {
			return err
		}
	}
	if err := flush(); err != nil { // the allgather overwrites blocks sent above
		return err
	}
	for s := 0; s < p-1; s++ { // allgather
		if err := step(block(buf, es, cnt, p, mod(c.me-s, p)), block(buf, es, cnt, p, mod(c.me-s-1, p)), false); err != nil {
			return err
		}
	}
	if err := flush(); err != nil {
		return err
	}
	// Collect the outstanding credits, so the right neighbour has consumed
	// both slots before the next call writes into them again.
	for links[right].credits < 2 {
		v, err := win.WaitNotify(c.cancelCtx(), c.world(right))
		if err != nil {
			return c.fail(right, err)
		}
		if v&immData != 0 {
			links[right].data = append(links[right].data, v)
		} else {
			links[right].credits++
		}
	}
	return nil
}
