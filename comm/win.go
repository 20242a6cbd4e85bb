package comm

import (
	"context"
	"fmt"
	"sync"

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
// Bounds: a transfer outside the target's window fails at once with
// ErrInvalidArgument naming the target, the offset, the length and the
// window's size; below that, the provider checks the key and the bounds
// of every access, as a NIC checks an rkey, so no access leaves the
// window.
//
// Windows exist on the world communicator only, for now (see
// docs/comm.md). Put, Get and Flush may be called from several goroutines
// at once; NewWin, Fence and Close are collectives.
type Win[T Element] struct {
	c     *Comm
	w     *p2p.Window
	local []T
	esize int

	mu      sync.Mutex
	pending []transfer
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
	var out *Win[T]
	err := c.collective(ctx, "NewWin", func(ctx context.Context) error {
		if !c.isWorld {
			// Every rank of c comes here, so every rank fails alike.
			return fmt.Errorf("%w: windows exist on the world communicator only", ErrUnsupported)
		}
		pw, err := c.w.ep.NewWindow(ctx, bytesOf(local))
		if err != nil {
			return err
		}
		out = &Win[T]{c: c, w: pw, local: local, esize: sizeOf[T]()}
		return nil
	})
	return out, err
}

// Local is this rank's window memory.
func (w *Win[T]) Local() []T { return w.local }

// Len is rank's window size in elements (0 for a rank out of range).
func (w *Win[T]) Len(rank int) int {
	if rank < 0 || rank >= w.c.size {
		return 0
	}
	return w.w.Len(w.c.members[rank]) / w.esize
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
	r, err := w.w.Iwrite(w.c.members[target], off*w.esize, bytesOf(src), false, 0)
	if err != nil {
		return w.c.wrap("Put", target, NoTag, err)
	}
	w.mu.Lock()
	w.pending = append(w.pending, transfer{r, "Put", target})
	w.mu.Unlock()
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
	w.mu.Lock()
	w.pending = append(w.pending, transfer{r, "Get", target})
	w.mu.Unlock()
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
	w.mu.Lock()
	reqs := w.pending
	w.pending = nil
	w.mu.Unlock()
	var first error
	for i, t := range reqs {
		// p2p.WaitAny does not cancel when ctx ends (WaitAll would try).
		if _, _, err := p2p.WaitAny(ctx, t.r); err != nil && ctx.Err() != nil {
			w.mu.Lock()
			w.pending = append(reqs[i:], w.pending...)
			w.mu.Unlock()
			return w.c.opErr("Flush", NoPeer, NoTag, fmt.Errorf("waiting for %d transfers: %w", len(reqs)-i, ctx.Err()))
		}
		if _, _, err := t.r.Test(); err != nil && first == nil {
			first = w.c.wrap(t.op, t.target, NoTag, err)
		}
	}
	return first
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

// fenceTag is the control-context tag of a fence's barrier round k:
// fenceTag|k, above the communicator ids CreateGroup uses as tags.
const fenceTag = 1 << 30

// messageBarrier is a dissemination barrier of point-to-point messages on
// comm's control context: in round k each rank signals rank+2^k and
// waits for rank−2^k. Unlike the shared-memory barrier a collective may
// pick, every step goes through the transport, whose completions order
// the memory accesses around them (the one-sided transfers the fence
// separates) for the race detector as for the CPU.
func (c *Comm) messageBarrier(ctx context.Context) error {
	ch, err := c.w.ep.Channel(ctlContext)
	if err != nil {
		return err
	}
	for k, d := 0, 1; d < c.size; k, d = k+1, 2*d {
		to, from := c.members[(c.rank+d)%c.size], c.members[(c.rank-d+c.size)%c.size]
		rr, err := ch.Irecv(from, fenceTag|k, nil)
		if err != nil {
			return err
		}
		if err := ch.Send(ctx, to, fenceTag|k, nil); err != nil {
			rr.Cancel()
			return err
		}
		if _, err := rr.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
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
