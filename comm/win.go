package comm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/p2p"
)

// Win is memory every rank of a communicator exposes to one-sided access
// by the others (an MPI window): Put writes into a peer's window, Get
// reads from it, with RDMA WRITE and READ underneath, so the target's CPU
// takes no part (with shm and ibv the transfer is done by the initiator or
// the NIC; with tcp by the target's progress goroutine, as a NIC would).
//
// Completion and visibility: Put and Get only start a transfer. Flush
// waits until every transfer this rank started on the window has
// completed: a Put's data is then in the target's memory, a Get's in the
// destination, and the buffers may be reused. The target learns that
// data arrived only through synchronisation: Fence (Flush on every rank,
// then a barrier) makes every rank's Puts before it visible to every rank
// after it; a message or a barrier sent after the origin's Flush does the
// same for that pair.
//
// Signals: PutSignal is a Put whose arrival the target counts (RDMA
// WRITE_WITH_IMM): WaitSignal on the target returns once that many have
// come from the origin, and their data is then in the target's window,
// with no Flush or Fence on either side.
//
// Atomics: FetchAdd and CompareSwap on 64-bit words, where the provider has
// them for the window's memory (AllocWin's memory takes them on every
// provider with atomics; a window over a caller's slice only where the
// provider allows atomics on registered memory). Where not, they fail with
// ErrUnsupported saying why.
//
// Bounds: a transfer outside the target's window fails at once with
// ErrInvalidArgument naming the target, the offset, the length and the
// window's size; below that, the provider checks the key and the bounds
// of every access, as a NIC checks an rkey, so no access leaves the
// window.
//
// Windows exist on any communicator; ranks are the communicator's. Put,
// Get, PutSignal, the atomics and Flush may be called from several
// goroutines at once; NewWin, AllocWin, Fence and Close are collectives.
type Win[T Element] struct {
	c     *Comm
	w     *p2p.Window
	local []T
	esize int
	// lens is every rank's window size in elements, fixed at creation:
	// a Put's bounds check then neither divides nor asks p2p (a few
	// ns of a small Put's twenty over shm).
	lens []int

	mu      sync.Mutex
	pending []transfer
	// npend is len(pending), kept under mu and read without it by Flush:
	// Puts copied straight into a mapped window leave nothing pending, and
	// a Flush after them then takes no lock.
	npend atomic.Int32
}

type transfer struct {
	r      *p2p.Request
	op     string
	target int
}

// NewWin exposes local on every rank of c (sizes may differ between
// ranks). local stays exposed, and must be kept, until Close. It is a
// collective over c, in c's collective order.
func NewWin[T Element](ctx context.Context, c *Comm, local []T) (*Win[T], error) {
	return newWin(ctx, c, "NewWin", local, false)
}

// AllocWin is NewWin over n zeroed elements of the provider's memory
// (Local returns them): peers on this host then write into it directly,
// and atomics work wherever the provider has them.
func AllocWin[T Element](ctx context.Context, c *Comm, n int) (*Win[T], error) {
	if n < 0 {
		return nil, c.opErr("AllocWin", NoPeer, NoTag, fmt.Errorf("%w: negative window size %d", ErrInvalidArgument, n))
	}
	return newWin(ctx, c, "AllocWin", make([]T, n), true)
}

// winTagMax bounds the communicator ids that windows can tell apart on
// the control context (see winTag).
const winTagMax = 1 << 24

// winTag is the control-context tag of a window's messages on c: sub 0 is
// a fence's barrier, 63 the window's key exchange and close. It
// sits above the communicator ids CreateGroup uses as tags and holds c's
// id, so that windows of communicators sharing ranks never match each
// other's messages.
func winTag(c *Comm, sub int) int { return 1<<30 | int(c.id)<<6 | sub }

const winKeysTag = 63

func newWin[T Element](ctx context.Context, c *Comm, op string, local []T, alloc bool) (*Win[T], error) {
	var out *Win[T]
	err := c.collective(ctx, op, func(ctx context.Context) error {
		if c.id >= winTagMax {
			// Every rank of c has the same id, so every rank fails alike.
			return fmt.Errorf("%w: windows need a communicator id below %d, this one has %d", ErrUnsupported, winTagMax, c.id)
		}
		ch, err := c.w.ep.Channel(ctlContext)
		if err != nil {
			return err
		}
		pw, err := c.w.ep.NewGroupWindow(ctx, bytesOf(local), alloc, c.members, ch, winTag(c, winKeysTag))
		if err != nil {
			return err
		}
		if alloc {
			local = reduce.View[T](pw.Bytes())
		}
		esize := sizeOf[T]()
		lens := make([]int, c.size)
		for r := range lens {
			lens[r] = pw.Len(c.members[r]) / esize
		}
		out = &Win[T]{c: c, w: pw, local: local, esize: esize, lens: lens}
		return nil
	})
	return out, err
}

// Local is this rank's window memory.
func (w *Win[T]) Local() []T { return w.local }

// Len is rank's window size in elements (0 for a rank out of range).
func (w *Win[T]) Len(rank int) int {
	if rank < 0 || rank >= len(w.lens) {
		return 0
	}
	return w.lens[rank]
}

// check validates a transfer of n elements at element offset off of
// target's window.
func (w *Win[T]) check(op string, target, off, n int) error {
	if err := w.c.check(op); err != nil {
		return err
	}
	if target < 0 || target >= w.c.size {
		return w.c.opErr(op, target, NoTag, fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, target, w.c.size))
	}
	if size := w.Len(target); off < 0 || off > size || n > size-off {
		return w.c.opErr(op, target, NoTag, fmt.Errorf("%w: %d elements at offset %d overrun rank %d's window of %d elements", ErrInvalidArgument, n, off, target, size))
	}
	return nil
}

// Put starts writing src into target's window at element offset off. src
// must not change until Flush returns.
func (w *Win[T]) Put(target, off int, src []T) error {
	if err := w.check("Put", target, off, len(src)); err != nil {
		return err
	}
	// A copy into a window this process maps is complete at once (no
	// request): nothing for Flush to wait for or release.
	r, err := w.w.IwriteNow(w.c.members[target], off*w.esize, bytesOf(src))
	if err != nil || r == nil {
		if err != nil {
			return w.c.wrap("Put", target, NoTag, err)
		}
		return nil
	}
	w.addPending(transfer{r, "Put", target})
	return nil
}

// Get starts reading len(dst) elements at element offset off of target's
// window into dst, which holds them once Flush returns.
func (w *Win[T]) Get(target, off int, dst []T) error {
	if err := w.check("Get", target, off, len(dst)); err != nil {
		return err
	}
	r, err := w.w.Iread(w.c.members[target], off*w.esize, bytesOf(dst))
	if err != nil {
		return w.c.wrap("Get", target, NoTag, err)
	}
	w.addPending(transfer{r, "Get", target})
	return nil
}

// Flush waits until every Put and Get this rank started on the window has
// completed (MPI_Win_flush_all), and returns the first error among them.
// A transfer cannot be canceled once started: when ctx ends first, Flush
// fails and the transfers stay pending for the next Flush.
func (w *Win[T]) Flush(ctx context.Context) error {
	if err := w.c.check("Flush"); err != nil {
		return err
	}
	if ctx == nil {
		return w.c.opErr("Flush", NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if w.npend.Load() == 0 && !w.w.Unfenced() {
		// Every transfer this rank started before this call is complete
		// (it was a copy) or taken by another Flush, which waits for it.
		return nil
	}
	w.mu.Lock()
	reqs := w.pending
	w.pending = nil
	w.npend.Store(0)
	w.mu.Unlock()
	// Puts that p2p posted inline have no request of their own: one
	// fence per target completes after them (and after every transfer
	// before it on that link), so it goes last.
	var fenceErr error
	if w.w.Unfenced() {
		var buf [4]*p2p.Request // most Flushes fence a few targets: no allocation
		var fences []*p2p.Request
		fences, fenceErr = w.w.Ifence(buf[:0])
		for _, r := range fences {
			reqs = append(reqs, transfer{r, "Flush", w.c.inv[r.Peer()]}) // a window target: a member of c
		}
		if fenceErr != nil {
			fenceErr = w.c.opErr("Flush", NoPeer, NoTag, fenceErr)
		}
	}
	// Newest first: the transfers on one link complete in order, so once
	// the last one has, the others have too, and one blocking wait covers
	// them all. p2p.WaitAny does not cancel when ctx ends (WaitAll would
	// try). A request that is done (a Put copied into a window that this
	// process maps) needs no poll of the completion queues.
	for i := len(reqs) - 1; i >= 0; i-- {
		if r := reqs[i].r; !r.Done() {
			if _, _, err := p2p.WaitAny(ctx, r); err != nil && ctx.Err() != nil {
				left := 0
				for _, t := range reqs {
					if !t.r.Done() {
						left++
					}
				}
				w.mu.Lock()
				w.pending = append(reqs, w.pending...)
				w.npend.Store(int32(len(w.pending)))
				w.mu.Unlock()
				return w.c.opErr("Flush", NoPeer, NoTag, fmt.Errorf("waiting for %d transfers: %w", left, ctx.Err()))
			}
		}
	}
	// Then their results, and the requests go back 64 at a time (one hold
	// of the endpoint's lock each): nothing else holds them, the next
	// Puts reuse them.
	first := fenceErr
	rs := make([]*p2p.Request, 0, 64)
	for i, t := range reqs {
		if _, _, err := t.r.Test(); err != nil && first == nil {
			first = w.c.wrap(t.op, t.target, NoTag, err)
		}
		if rs = append(rs, t.r); len(rs) == cap(rs) || i == len(reqs)-1 {
			p2p.ReleaseAll(rs)
			rs = rs[:0]
		}
	}
	// Keep the slice for the next round of Puts, unless some came meanwhile.
	clear(reqs)
	w.mu.Lock()
	if w.pending == nil {
		w.pending = reqs[:0]
	}
	w.mu.Unlock()
	return first
}

// addPending records t for the next Flush.
func (w *Win[T]) addPending(t transfer) {
	w.mu.Lock()
	w.pending = append(w.pending, t)
	w.npend.Store(int32(len(w.pending)))
	w.mu.Unlock()
}

// Fence flushes this rank's transfers and waits until every rank has
// flushed its own (MPI_Win_fence): every Put started before it, by any
// rank, is visible everywhere after it. It is a collective over the
// window's communicator.
func (w *Win[T]) Fence(ctx context.Context) error {
	ferr := w.Flush(ctx)
	// Take part in the barrier even when the flush failed, so that no rank
	// waits for this one.
	berr := w.c.collective(ctx, "Fence", w.c.messageBarrier)
	if ferr != nil {
		return ferr
	}
	return berr
}

// messageBarrier is a barrier of point-to-point messages on comm's
// control context in which every rank hears from every other directly
// (p−1 messages each way per rank). Unlike the shared-memory barrier a
// collective may pick, every message goes through the transport over the
// very link each peer's one-sided transfers used, behind them, so the
// completions order those transfers before the fence's end for the race
// detector as for the CPU; a dissemination barrier orders them only
// through third ranks, which the race detector cannot follow through
// sockets.
func (c *Comm) messageBarrier(ctx context.Context) error {
	ch, err := c.w.ep.Channel(ctlContext)
	if err != nil {
		return err
	}
	reqs := make([]*p2p.Request, 0, 2*c.size)
	for r, wr := range c.members {
		if r == c.rank {
			continue
		}
		rr, err := ch.Irecv(wr, winTag(c, 0), nil)
		if err != nil {
			return err
		}
		sr, err := ch.Isend(wr, winTag(c, 0), nil)
		if err != nil {
			rr.Cancel()
			return err
		}
		reqs = append(reqs, rr, sr)
	}
	return p2p.WaitAll(ctx, reqs...)
}

// Close flushes, then withdraws the window once every rank has stopped
// accessing it. It is a collective over the window's communicator.
func (w *Win[T]) Close(ctx context.Context) error {
	ferr := w.Flush(ctx)
	err := w.c.collective(ctx, "CloseWin", func(ctx context.Context) error {
		return w.w.Close(ctx)
	})
	if ferr != nil {
		return ferr
	}
	return err
}

// PutSignal starts writing src into target's window at element offset off
// with signal sig (0..MaxSignal) attached: once the data is in place, the
// target counts one arrival of sig from this rank, which its WaitSignal
// takes (NCCL's PutSignal). The signal is the write's immediate value
// (RDMA WRITE_WITH_IMM), so it never arrives before the data. Signals are
// the window's own: neither another window's signals nor the collectives'
// notifications count. src must not change until Flush returns.
func (w *Win[T]) PutSignal(target, off int, src []T, sig int) error {
	if err := w.check("PutSignal", target, off, len(src)); err != nil {
		return err
	}
	if sig < 0 || sig > MaxSignal {
		return w.c.opErr("PutSignal", target, NoTag, fmt.Errorf("%w: signal %d is not in [0, %d]", ErrInvalidArgument, sig, MaxSignal))
	}
	r, err := w.w.IwriteSignal(w.c.members[target], off*w.esize, bytesOf(src), sig)
	if err != nil {
		return w.c.wrap("PutSignal", target, NoTag, err)
	}
	w.addPending(transfer{r, "PutSignal", target})
	return nil
}

// MaxSignal is the largest signal index of PutSignal.
const MaxSignal = p2p.MaxSignal

// WaitSignal waits until count PutSignals with signal sig from rank from
// have arrived in this rank's window, beyond those already taken, and
// takes them (NCCL's WaitSignal): their data is then in Local(). When ctx
// ends first, the error names from and how many had arrived.
func (w *Win[T]) WaitSignal(ctx context.Context, from, sig, count int) error {
	if err := w.checkSignal("WaitSignal", from, sig, count); err != nil {
		return err
	}
	if ctx == nil {
		return w.c.opErr("WaitSignal", from, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if err := w.w.WaitSignal(ctx, w.c.members[from], sig, count); err != nil {
		return w.c.wrap("WaitSignal", from, NoTag, err)
	}
	return nil
}

// TestSignal is WaitSignal that does not wait: it takes count arrivals of
// sig from from if that many have come, and reports whether it did.
func (w *Win[T]) TestSignal(from, sig, count int) (bool, error) {
	if err := w.checkSignal("TestSignal", from, sig, count); err != nil {
		return false, err
	}
	ok, err := w.w.TestSignal(w.c.members[from], sig, count)
	if err != nil {
		return false, w.c.wrap("TestSignal", from, NoTag, err)
	}
	return ok, nil
}

func (w *Win[T]) checkSignal(op string, from, sig, count int) error {
	if err := w.c.check(op); err != nil {
		return err
	}
	if from < 0 || from >= w.c.size {
		return w.c.opErr(op, from, NoTag, fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, from, w.c.size))
	}
	if sig < 0 || sig > MaxSignal || count < 1 {
		return w.c.opErr(op, from, NoTag, fmt.Errorf("%w: signal %d (in [0, %d]), count %d (at least 1)", ErrInvalidArgument, sig, MaxSignal, count))
	}
	return nil
}

// FetchAdd adds v to element off of target's window and returns the value
// it had, atomically against every other atomic on that element (RDMA
// ATOMIC_FETCH_AND_ADD). T must be a 64-bit integer type. It waits for the
// result. Ordinary Puts to the same element are not atomic against it.
func (w *Win[T]) FetchAdd(ctx context.Context, target, off int, v T) (T, error) {
	var zero T
	if err := w.checkAtomic("FetchAdd", ctx, target, off, true); err != nil {
		return zero, err
	}
	old, err := w.w.FetchAdd(ctx, w.c.members[target], off*w.esize, wordOf(v))
	if err != nil {
		return zero, w.c.wrap("FetchAdd", target, NoTag, err)
	}
	return elemOf[T](old), nil
}

// CompareSwap sets element off of target's window to swap if it equals
// compare (bit for bit), atomically (RDMA ATOMIC_CMP_AND_SWP), and returns
// the value it had: the swap happened when that equals compare. T must be
// a 64-bit type.
func (w *Win[T]) CompareSwap(ctx context.Context, target, off int, compare, swap T) (T, error) {
	var zero T
	if err := w.checkAtomic("CompareSwap", ctx, target, off, false); err != nil {
		return zero, err
	}
	old, err := w.w.CompareSwap(ctx, w.c.members[target], off*w.esize, wordOf(compare), wordOf(swap))
	if err != nil {
		return zero, w.c.wrap("CompareSwap", target, NoTag, err)
	}
	return elemOf[T](old), nil
}

// Atomics says whether FetchAdd and CompareSwap can run on target's
// window: nil, or an error matching ErrUnsupported that says why.
func (w *Win[T]) Atomics(target int) error {
	if target < 0 || target >= w.c.size {
		return w.c.opErr("Atomics", target, NoTag, fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, target, w.c.size))
	}
	if err := w.w.AtomicsTo(w.c.members[target]); err != nil {
		return w.c.opErr("Atomics", target, NoTag, fmt.Errorf("%w: atomics on rank %d's window (world rank %d): %w", ErrUnsupported, target, w.c.members[target], err))
	}
	return nil
}

func (w *Win[T]) checkAtomic(op string, ctx context.Context, target, off int, integer bool) error {
	if ctx == nil {
		return w.c.opErr(op, target, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if w.esize != 8 || integer && !isInteger[T]() {
		var z T
		what := "64-bit"
		if integer {
			what = "64-bit integer"
		}
		return w.c.opErr(op, target, NoTag, fmt.Errorf("%w: %s needs %s elements, not %T", ErrInvalidArgument, op, what, z))
	}
	if err := w.check(op, target, off, 1); err != nil {
		return err
	}
	if err := w.Atomics(target); err != nil {
		var oe *OpError
		if errors.As(err, &oe) {
			oe.Op = op
		}
		return err
	}
	return nil
}

// isInteger says whether T is an integer type (named types included).
func isInteger[T Element]() bool {
	var one T = 1
	return one/2 == 0
}

func wordOf[T Element](v T) uint64 { return binary.NativeEndian.Uint64(bytesOf([]T{v})) }

func elemOf[T Element](u uint64) T {
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], u)
	return reduce.View[T](b[:])[0]
}
