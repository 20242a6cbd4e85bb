package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// AtomicsTo says whether 64-bit atomics on peer's window are possible: nil
// when they are, else an error wrapping verbs.ErrUnsupported that says
// why. It is a capability check: the link's device must have atomics
// (Caps.Atomics) and the peer's window memory must take them (the peer
// published that with its key: MR.SupportsAtomics, e.g. provider memory
// only on shm). Atomics on this rank's own window are CPU atomics, which
// are atomic against the device's only when it says so (AtomicGlob), or
// when the endpoint has no peers.
func (w *Window) AtomicsTo(peer int) error {
	ep := w.ep
	if err := w.checkPeer(peer); err != nil {
		return err
	}
	if peer == ep.rank {
		for _, d := range ep.devs {
			if d.caps.Atomics != verbs.AtomicGlob && len(ep.peers) > 1 {
				return fmt.Errorf("%w: the %s device's atomics are not atomic against this CPU's (Caps.Atomics %v), so rank %d cannot run them on its own window",
					verbs.ErrUnsupported, d.provider, d.caps.Atomics, peer)
			}
		}
		return nil
	}
	p := ep.peers[peer]
	if p.dev.caps.Atomics == verbs.AtomicNone {
		return fmt.Errorf("%w: the %s device has no atomics", verbs.ErrUnsupported, p.dev.provider)
	}
	if !w.remote[peer].atomics {
		return fmt.Errorf("%w: rank %d's window memory takes no remote atomics on the %s link (registered memory where the provider needs its own: allocate the window)",
			verbs.ErrUnsupported, peer, p.dev.provider)
	}
	return nil
}

// FetchAdd adds add to the 64-bit word at byte offset off of peer's window
// (8-byte aligned) and returns its value before, atomically against every
// other atomic on the word (RDMA ATOMIC_FETCH_AND_ADD). Words are in the
// host's byte order, as the verbs define them.
func (w *Window) FetchAdd(ctx context.Context, peer, off int, add uint64) (uint64, error) {
	return w.atomic(ctx, "FetchAdd", verbs.OpAtomicFetchAdd, peer, off, add, 0)
}

// CompareSwap replaces the 64-bit word at byte offset off of peer's window
// with swap if it equals compare, and returns the value it had
// (ATOMIC_CMP_AND_SWP): the swap happened when that equals compare.
func (w *Window) CompareSwap(ctx context.Context, peer, off int, compare, swap uint64) (uint64, error) {
	return w.atomic(ctx, "CompareSwap", verbs.OpAtomicCmpAndSwp, peer, off, compare, swap)
}

func (w *Window) atomic(ctx context.Context, op string, opcode verbs.Opcode, peer, off int, cmpAdd, swap uint64) (uint64, error) {
	ep := w.ep
	bad := func(err error) (uint64, error) {
		return 0, &Error{Op: op, Rank: ep.rank, Peer: peer, Tag: NoTag, Err: err}
	}
	rk, err := w.target(peer, off, 8, "")
	if err != nil {
		return bad(err)
	}
	if (rk.addr+uint64(off))%8 != 0 || (peer == ep.rank && uintptr(unsafe.Pointer(&w.buf[off]))%8 != 0) {
		return bad(fmt.Errorf("%w: the word at offset %d of rank %d's window is not 8-byte aligned", ErrInvalidArgument, off, peer))
	}
	if err := w.AtomicsTo(peer); err != nil {
		return bad(err)
	}
	if peer == ep.rank {
		if err := ep.Err(); err != nil {
			return bad(err)
		}
		word := (*uint64)(unsafe.Pointer(&w.buf[off]))
		if opcode == verbs.OpAtomicFetchAdd {
			return atomic.AddUint64(word, cmpAdd) - cmpAdd, nil
		}
		for {
			old := atomic.LoadUint64(word)
			if old != cmpAdd || atomic.CompareAndSwapUint64(word, old, swap) {
				return old, nil
			}
		}
	}
	p := ep.peers[peer]
	res := make([]byte, 8)
	reg, err := p.dev.cache.get(res)
	if err != nil {
		return bad(fmt.Errorf("registering the result word: %w", err))
	}
	r := ep.newWinReq()
	r.ep, r.op, r.peer, r.pattern, r.buf = ep, opWinAtomic, peer, envelope{tag: NoTag}, res
	r.atomic, r.cmpAdd, r.swap, r.reg, r.dev = opcode, cmpAdd, swap, reg, p.dev
	r.status = Status{Source: peer, Count: 8}
	r.rts = inbound{addr: rk.addr + uint64(off), rkey: rk.rkey, size: 8}
	if err := ep.startWindowOp(p, r, false); err != nil {
		return bad(err)
	}
	if _, err := r.Wait(ctx); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint64(res), nil
}
