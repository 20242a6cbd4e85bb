package p2p

import (
	"context"
	"fmt"
)

// Window signals are notifications addressed to one window: a write
// carries, in its immediate value, the target's signal slot for the window
// (which the target published with its key, as it publishes an rkey) and a
// signal index, and the target counts arrivals per window, source and
// index. Endpoint notifications (WriteNotify/WaitNotify, which the
// collectives' one-sided rings use) keep bit 30 clear, so neither kind can
// be taken for the other.
const (
	signalBit  = 1 << 30
	slotShift  = 16
	maxSlot    = 1<<14 - 1
	signalMask = 1<<16 - 1
	// MaxSignal is the largest signal index of WriteSignal.
	MaxSignal = signalMask
)

type sigKey struct {
	src int
	sig uint16
}

// takeSlotLocked gives w the lowest free signal slot.
func (ep *Endpoint) takeSlotLocked(w *Window) error {
	if ep.winSlots == nil {
		ep.winSlots = map[uint32]*Window{}
	}
	if len(ep.winSlots) >= maxSlot {
		return fmt.Errorf("%w: rank %d already has %d windows open", ErrInvalidArgument, ep.rank, len(ep.winSlots))
	}
	for s := uint32(1); ; s++ {
		if ep.winSlots[s] == nil {
			w.slot = s
			ep.winSlots[s] = w
			return nil
		}
	}
}

func (ep *Endpoint) dropSlotLocked(w *Window) {
	if w.slot != 0 && ep.winSlots[w.slot] == w {
		delete(ep.winSlots, w.slot)
	}
}

// noteLocked delivers the notification value from src: to its window's
// signal counts when it is a window signal, else to the endpoint's queue.
func (ep *Endpoint) noteLocked(src int, value uint32) {
	if value&signalBit != 0 {
		w := ep.winSlots[(value>>slotShift)&maxSlot]
		if w == nil {
			// Window Close waits until every member's transfers completed,
			// so only a peer that broke the protocol gets here.
			ep.log.Warn("p2p: signal for a window that is not open", "rank", ep.rank, "source", src, "value", value)
			return
		}
		if w.sigs == nil {
			w.sigs = map[sigKey]int{}
		}
		w.sigs[sigKey{src, uint16(value & signalMask)}]++
	} else {
		ep.notes = append(ep.notes, Notification{Source: src, Value: value})
	}
	ep.wakeArrivalsLocked()
}

// checkPeer says why peer may not be accessed through w, if it may not.
func (w *Window) checkPeer(peer int) error {
	if peer < 0 || peer >= w.ep.size {
		return fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, peer, w.ep.size)
	}
	if !w.member[peer] {
		return fmt.Errorf("%w: rank %d is not in the window's group %v", ErrInvalidRank, peer, w.group)
	}
	return nil
}

// NewGroupWindow is NewWindow over the ranks of group only (endpoint ranks,
// this one included; the same list on each): only they call it, in the same
// order, and only they may access the window. Keys travel on ch with tag,
// which the caller keeps for this group's windows alone, and so does
// Close. With alloc the window is n=len(buf) bytes of provider memory, as
// AllocWindow's.
func (ep *Endpoint) NewGroupWindow(ctx context.Context, buf []byte, alloc bool, group []int, ch *Channel, tag int) (*Window, error) {
	bad := func(err error) (*Window, error) {
		return nil, &Error{Op: "NewWindow", Rank: ep.rank, Peer: NoPeer, Tag: tag, Err: err}
	}
	if ch == nil || ch.ep != ep {
		return bad(fmt.Errorf("%w: the channel is not this endpoint's", ErrInvalidArgument))
	}
	me := false
	for _, r := range group {
		if r < 0 || r >= ep.size {
			return bad(fmt.Errorf("%w: group member %d is not in [0, %d)", ErrInvalidRank, r, ep.size))
		}
		me = me || r == ep.rank
	}
	if !me {
		return bad(fmt.Errorf("%w: rank %d is not in the group %v", ErrInvalidArgument, ep.rank, group))
	}
	return ep.newWindowOn(ctx, buf, alloc && len(ep.devs) == 1, nil, group, ch, tag)
}

// IwriteSignal is Iwrite whose arrival the peer counts as signal sig of
// this window from this rank (WaitSignal), once the data is in place. The
// signal travels in the write's immediate value (RDMA WRITE_WITH_IMM), so
// it is never seen before the data.
func (w *Window) IwriteSignal(peer, off int, src []byte, sig int) (*Request, error) {
	if sig < 0 || sig > MaxSignal {
		return nil, &Error{Op: "Write", Rank: w.ep.rank, Peer: peer, Tag: NoTag,
			Err: fmt.Errorf("%w: signal %d is not in [0, %d]", ErrInvalidArgument, sig, MaxSignal)}
	}
	if err := w.checkPeer(peer); err != nil {
		return nil, &Error{Op: "Write", Rank: w.ep.rank, Peer: peer, Tag: NoTag, Err: err}
	}
	slot := w.remote[peer].slot
	return w.iwrite(peer, off, src, true, signalBit|slot<<slotShift|uint32(sig), false, 0)
}

// TestSignal takes count arrivals of signal sig from src on w if that many
// have come, and reports whether it did.
func (w *Window) TestSignal(src, sig, count int) (bool, error) {
	ep := w.ep
	if err := w.checkSignal(src, sig, count); err != nil {
		return false, err
	}
	ep.progress()
	ep.mu.Lock()
	defer ep.mu.Unlock()
	k := sigKey{src, uint16(sig)}
	if w.sigs[k] >= count {
		w.sigs[k] -= count
		return true, nil
	}
	if err := ep.checkLocked(); err != nil {
		return false, &Error{Op: "WaitSignal", Rank: ep.rank, Peer: src, Tag: NoTag, Err: err}
	}
	return false, nil
}

// WaitSignal waits until count writes with signal sig have arrived on w
// from src since the signals taken before, and takes them: their data is
// in this rank's window. When ctx ends first, the error names src and how
// many arrived.
func (w *Window) WaitSignal(ctx context.Context, src, sig, count int) error {
	ep := w.ep
	bad := func(err error) error {
		return &Error{Op: "WaitSignal", Rank: ep.rank, Peer: src, Tag: NoTag, Err: err}
	}
	if err := w.checkSignal(src, sig, count); err != nil {
		return err
	}
	var ok bool
	var gerr error
	take := func() bool {
		ok, gerr = w.TestSignal(src, sig, count)
		return ok || gerr != nil
	}
	ch := make(chan struct{}, 1)
	for {
		if ep.poll(ctx, take) {
			return gerr
		}
		ep.mu.Lock()
		ep.arrivals = append(ep.arrivals, ch)
		ep.mu.Unlock()
		if take() {
			return gerr
		}
		ep.handOff()
		select {
		case <-ch:
		case <-ctx.Done():
			ep.mu.Lock()
			have := w.sigs[sigKey{src, uint16(sig)}]
			ep.mu.Unlock()
			return bad(&DeadlineError{Ranks: []int{src}, What: fmt.Sprintf("%d of %d signals %d", have, count, sig), Cause: ctx.Err()})
		}
	}
}

func (w *Window) checkSignal(src, sig, count int) error {
	if err := w.checkPeer(src); err != nil {
		return &Error{Op: "WaitSignal", Rank: w.ep.rank, Peer: src, Tag: NoTag, Err: err}
	}
	if sig < 0 || sig > MaxSignal || count < 1 {
		return &Error{Op: "WaitSignal", Rank: w.ep.rank, Peer: src, Tag: NoTag,
			Err: fmt.Errorf("%w: signal %d (in [0, %d]), count %d (at least 1)", ErrInvalidArgument, sig, MaxSignal, count)}
	}
	return nil
}
