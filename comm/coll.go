package comm

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/ntcopy"
)

// Collectives. Every rank of the communicator calls the same collectives
// in the same order, with matching arguments: the same root, op and
// element type, and lengths that fit. A disagreement (count, root, op,
// type) fails every rank with ErrMismatch naming two ranks and both
// values; a rank's own bad argument fails it with ErrInvalidArgument and
// the others with a *collectives.PeerError naming it, with its reason.
// Exception: over the network, a rank of a one-way collective (Bcast,
// Reduce, Gather(v), Scatter(v), Scan, Exscan) whose part was done before
// the disagreement showed (the root of a Bcast) may return success, unless
// Options.Collectives.Debug (RDMAGO_DEBUG=1). On one host over shm there is
// no exception, but such a rank may learn of it only later: its next
// collective on the communicator does its part and then returns the
// earlier call's error, or Close does if there is none (docs/collectives.md).
//
// Naming: the short name is MPI's usual form of each collective: in place
// for Bcast, Allreduce, Reduce, Scan and Exscan (buf is both input and
// result), separate send and recv buffers for the gather, scatter and
// all-to-all family. The other form, where MPI has both, carries a suffix:
// AllreduceInto, ReduceInto, ScanInto, ExscanInto take send and recv;
// AllgatherInPlace, ReduceScatterInPlace, AlltoallInPlace work in one
// buffer.

// collective runs fn as the communicator's next collective.
func (c *Comm) collective(ctx context.Context, op string, fn func(ctx context.Context) error) error {
	if err := c.check(op); err != nil {
		return err
	}
	if ctx == nil {
		return c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	var turn chan struct{}
	if c.lazyN.Load() > 0 {
		// Lazily started calls whose turns come first run now (lazy.go).
		turn = c.takeAfterLazy(ctx)
	} else {
		turn = c.q.take()
	}
	if err := c.q.wait(ctx, turn); err != nil {
		return c.opErr(op, NoPeer, NoTag, err)
	}
	defer c.q.done()
	if err := fn(ctx); err != nil {
		return c.wrap(op, NoPeer, NoTag, err)
	}
	return nil
}

// start runs fn as the communicator's next collective in the background
// and returns its request. Its turn is taken now, so later collectives of
// this rank run after it. A call of at most lazyStartMax bytes (nbytes,
// the caller's largest buffer) is only queued, for whoever claims it first
// (lazy.go); a larger one gets its goroutine now.
func (c *Comm) start(ctx context.Context, op string, nbytes int, fn func(ctx context.Context) error) (*Request, error) {
	if err := c.check(op); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, c.opErr(op, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	// One allocation for the request: its Waited and the ctx made from it
	// live inside it, and its done channel is made only for somebody who
	// blocks on it (fin); a start and a Wait at once made 7 and cost
	// 0.66 µs more than the blocking call.
	r := &Request{c: c, op: op, fn: fn, startDone: ctx.Done()}
	// Until somebody waits for it, the collective sleeps between checks
	// instead of spinning: the caller is computing (collectives.Waited).
	r.cctx = r.waited.Context(ctx)
	if nbytes <= lazyStartMax {
		// Queued with its turn: a Wait, a Test or the lazy worker starts
		// it (lazy.go).
		c.w.lazy.add(r)
		return r, nil
	}
	r.turn = c.q.take()
	// The goroutine runs it unless a Wait has taken it first (runInline).
	go func() {
		if r.claim() {
			r.run()
		}
	}()
	return r, nil
}

// run runs a claimed non-blocking collective once its turn comes, and
// completes r.
func (r *Request) run() {
	c := r.c
	var err error
	if err = c.q.wait(r.cctx, r.turn); err != nil {
		err = c.opErr(r.op, NoPeer, NoTag, err)
	} else {
		err = r.fn(r.cctx)
		c.q.done()
		if err != nil {
			err = c.wrap(r.op, NoPeer, NoTag, err)
		}
	}
	r.finish(err)
}

// finish completes a non-blocking collective with err.
func (r *Request) finish(err error) {
	r.err = err
	r.fin.Set()
}

// runInline runs a non-blocking collective on the goroutine that waits
// for it when nobody has begun it (it was queued lazily, or its goroutine
// has not started) and ctx ends no sooner than the collective's own (the
// ctx it started with, or one that never ends), so that Wait still
// returns when ctx ends; the calls of its communicator queued before it
// run first. A call started and waited for at once then costs no
// goroutine switch and wake-up: an 8-byte Iallreduce and Wait between two
// ranks took 3.3 µs, a blocking Allreduce 0.6. It reports whether it ran
// the collective.
func (r *Request) runInline(ctx context.Context) bool {
	if r.fn == nil {
		return false
	}
	if !r.runsUnder(ctx) {
		return false
	}
	if r.lazy && !r.claimed.Load() {
		r.c.runAll(ctx, r.c.w.lazy.claimBefore(r.c, r))
	}
	if !r.claim() {
		return false
	}
	r.inline = true
	r.run()
	return true
}

// Barrier returns once every rank of the communicator has entered it.
func Barrier(ctx context.Context, c *Comm) error {
	return c.collective(ctx, "Barrier", func(ctx context.Context) error { return collectives.Barrier(ctx, c.eng) })
}

// Ibarrier starts a barrier; its request completes once every rank has
// entered it.
func Ibarrier(ctx context.Context, c *Comm) (*Request, error) {
	return c.start(ctx, "Ibarrier", 0, func(ctx context.Context) error { return collectives.Barrier(ctx, c.eng) })
}

// Bcast copies root's buf into buf on every rank (same length everywhere).
func Bcast[T Element](ctx context.Context, c *Comm, buf []T, root int) error {
	return c.collective(ctx, "Bcast", func(ctx context.Context) error { return collectives.Bcast(ctx, c.eng, buf, root) })
}

// Ibcast starts a Bcast.
func Ibcast[T Element](ctx context.Context, c *Comm, buf []T, root int) (*Request, error) {
	return c.start(ctx, "Ibcast", nbytes(buf), func(ctx context.Context) error { return collectives.Bcast(ctx, c.eng, buf, root) })
}

// Allreduce replaces buf on every rank with the element-wise reduction of
// all ranks' buf under op. Every rank gets the same bits.
func Allreduce[T Element](ctx context.Context, c *Comm, buf []T, op Op) error {
	return c.collective(ctx, "Allreduce", func(ctx context.Context) error { return collectives.Allreduce(ctx, c.eng, buf, op) })
}

// AllreduceInto is Allreduce from send into recv (same length); send is
// not modified.
func AllreduceInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	return c.collective(ctx, "Allreduce", allreduceInto(c, send, recv, op))
}

// Iallreduce starts an Allreduce; buf belongs to the request until it
// completes.
func Iallreduce[T Element](ctx context.Context, c *Comm, buf []T, op Op) (*Request, error) {
	return c.start(ctx, "Iallreduce", nbytes(buf), func(ctx context.Context) error { return collectives.Allreduce(ctx, c.eng, buf, op) })
}

// Reduce leaves the reduction of all ranks' buf under op in root's buf;
// other ranks' buf is not changed.
func Reduce[T Element](ctx context.Context, c *Comm, buf []T, op Op, root int) error {
	return c.collective(ctx, "Reduce", func(ctx context.Context) error { return collectives.Reduce(ctx, c.eng, buf, op, root) })
}

// ReduceInto reduces every rank's send into root's recv (recv is ignored
// elsewhere and may be nil there); send is not modified.
func ReduceInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op, root int) error {
	return c.collective(ctx, "Reduce", reduceInto(c, send, recv, op, root))
}

// reduceInto is the body of ReduceInto and IreduceInto.
func reduceInto[T Element](c *Comm, send, recv []T, op Op, root int) func(context.Context) error {
	return func(ctx context.Context) error { return collectives.ReduceInto(ctx, c.eng, send, recv, op, root) }
}

// Ireduce starts a Reduce.
func Ireduce[T Element](ctx context.Context, c *Comm, buf []T, op Op, root int) (*Request, error) {
	return c.start(ctx, "Ireduce", nbytes(buf), func(ctx context.Context) error { return collectives.Reduce(ctx, c.eng, buf, op, root) })
}

// Allgather concatenates every rank's send, in rank order, into every
// rank's recv: len(recv) == Size()·len(send).
func Allgather[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	return c.collective(ctx, "Allgather", func(ctx context.Context) error { return collectives.Allgather(ctx, c.eng, send, recv) })
}

// AllgatherInPlace is Allgather where each rank's contribution is already
// in its block of buf (block r is buf[r·m:(r+1)·m], m = len(buf)/Size()).
func AllgatherInPlace[T Element](ctx context.Context, c *Comm, buf []T) error {
	return c.collective(ctx, "Allgather", allgatherInPlace(c, buf))
}

// allgatherInPlace is the body of AllgatherInPlace and IallgatherInPlace.
func allgatherInPlace[T Element](c *Comm, buf []T) func(context.Context) error {
	return func(ctx context.Context) error {
		m := len(buf) / c.size
		if len(buf)%c.size != 0 {
			return collectives.Allgather(ctx, c.eng, buf[:m], buf) // reports the bad length
		}
		mine := make([]T, m)
		localCopy(mine, buf[c.rank*m:])
		return collectives.Allgather(ctx, c.eng, mine, buf)
	}
}

// Iallgather starts an Allgather.
func Iallgather[T Element](ctx context.Context, c *Comm, send, recv []T) (*Request, error) {
	return c.start(ctx, "Iallgather", nbytes(recv), func(ctx context.Context) error { return collectives.Allgather(ctx, c.eng, send, recv) })
}

// Allgatherv gathers counts[r] elements from every rank r into every
// rank's recv, at the prefix sum of the counts before r. Every rank passes
// the same counts; len(send) == counts[Rank()].
func Allgatherv[T Element](ctx context.Context, c *Comm, send, recv []T, counts []int) error {
	return c.collective(ctx, "Allgatherv", func(ctx context.Context) error {
		return collectives.Allgatherv(ctx, c.eng, send, recv, counts)
	})
}

// ReduceScatter reduces every rank's send (Size() blocks of len(recv)
// elements) under op and leaves block r of the result in rank r's recv
// (MPI_Reduce_scatter_block). send is not modified.
func ReduceScatter[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	return c.collective(ctx, "ReduceScatter", func(ctx context.Context) error {
		return collectives.ReduceScatter(ctx, c.eng, send, recv, op)
	})
}

// ReduceScatterInPlace is ReduceScatter whose result lands in the first
// block of buf: afterwards buf[:len(buf)/Size()] is this rank's block.
func ReduceScatterInPlace[T Element](ctx context.Context, c *Comm, buf []T, op Op) error {
	return c.collective(ctx, "ReduceScatter", reduceScatterInPlace(c, buf, op))
}

// reduceScatterInPlace is the body of ReduceScatterInPlace and
// IreduceScatterInPlace.
func reduceScatterInPlace[T Element](c *Comm, buf []T, op Op) func(context.Context) error {
	return func(ctx context.Context) error {
		// recv may overlap send: the message-based algorithms copy send
		// into scratch before they write recv, and the shared-memory one
		// writes each piece of the first block only after publishing it.
		return collectives.ReduceScatter(ctx, c.eng, buf, buf[:len(buf)/c.size], op)
	}
}

// IreduceScatter starts a ReduceScatter.
func IreduceScatter[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) (*Request, error) {
	return c.start(ctx, "IreduceScatter", nbytes(send), func(ctx context.Context) error {
		return collectives.ReduceScatter(ctx, c.eng, send, recv, op)
	})
}

// Gather concatenates every rank's send into root's recv, in rank order
// (len(recv) == Size()·len(send) at the root; recv is ignored elsewhere).
func Gather[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.collective(ctx, "Gather", func(ctx context.Context) error { return collectives.Gather(ctx, c.eng, send, recv, root) })
}

// Gatherv gathers counts[r] elements from every rank r into root's recv
// (prefix-sum layout). counts matters at the root only.
func Gatherv[T Element](ctx context.Context, c *Comm, send, recv []T, counts []int, root int) error {
	return c.collective(ctx, "Gatherv", func(ctx context.Context) error {
		return collectives.Gatherv(ctx, c.eng, send, recv, counts, root)
	})
}

// Scatter sends block r of root's send (Size() blocks of len(recv)
// elements) to rank r's recv.
func Scatter[T Element](ctx context.Context, c *Comm, send, recv []T, root int) error {
	return c.collective(ctx, "Scatter", func(ctx context.Context) error { return collectives.Scatter(ctx, c.eng, send, recv, root) })
}

// Scatterv sends counts[r] elements of root's send (prefix-sum layout) to
// rank r's recv, whose length must be that count. counts matters at the
// root only.
func Scatterv[T Element](ctx context.Context, c *Comm, send []T, counts []int, recv []T, root int) error {
	return c.collective(ctx, "Scatterv", func(ctx context.Context) error {
		return collectives.Scatterv(ctx, c.eng, send, counts, recv, root)
	})
}

// Alltoall sends block j of every rank's send to rank j, where it lands as
// block i (i the sender) of recv; len(send) == len(recv) == Size()·m.
func Alltoall[T Element](ctx context.Context, c *Comm, send, recv []T) error {
	return c.collective(ctx, "Alltoall", func(ctx context.Context) error { return collectives.Alltoall(ctx, c.eng, send, recv) })
}

// AlltoallInPlace is Alltoall with one buffer for both.
func AlltoallInPlace[T Element](ctx context.Context, c *Comm, buf []T) error {
	return c.collective(ctx, "Alltoall", alltoallInPlace(c, buf))
}

// alltoallInPlace is the body of AlltoallInPlace and IalltoallInPlace.
func alltoallInPlace[T Element](c *Comm, buf []T) func(context.Context) error {
	return func(ctx context.Context) error {
		send := make([]T, len(buf))
		localCopy(send, buf)
		return collectives.Alltoall(ctx, c.eng, send, buf)
	}
}

// Ialltoall starts an Alltoall.
func Ialltoall[T Element](ctx context.Context, c *Comm, send, recv []T) (*Request, error) {
	return c.start(ctx, "Ialltoall", nbytes(send), func(ctx context.Context) error { return collectives.Alltoall(ctx, c.eng, send, recv) })
}

// Alltoallv sends scounts[j] elements to rank j and receives rcounts[i]
// from rank i (prefix-sum layouts). Rank i's scounts entry for this rank
// must equal this rank's rcounts[i].
func Alltoallv[T Element](ctx context.Context, c *Comm, send []T, scounts []int, recv []T, rcounts []int) error {
	return c.collective(ctx, "Alltoallv", func(ctx context.Context) error {
		return collectives.Alltoallv(ctx, c.eng, send, scounts, recv, rcounts)
	})
}

// Scan replaces buf on rank r with the reduction of ranks 0..r's buf, in
// rank order (MPI_Scan).
func Scan[T Element](ctx context.Context, c *Comm, buf []T, op Op) error {
	return c.collective(ctx, "Scan", func(ctx context.Context) error { return collectives.Scan(ctx, c.eng, buf, op) })
}

// ScanInto is Scan from send into recv (same length).
func ScanInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	return c.collective(ctx, "Scan", into(c, send, recv, op, collectives.Scan[T]))
}

// Exscan replaces buf on rank r > 0 with the reduction of ranks 0..r−1's
// buf (MPI_Exscan); rank 0's buf is left unchanged.
func Exscan[T Element](ctx context.Context, c *Comm, buf []T, op Op) error {
	return c.collective(ctx, "Exscan", func(ctx context.Context) error { return collectives.Exscan(ctx, c.eng, buf, op) })
}

// ExscanInto is Exscan from send into recv (same length); rank 0's recv
// gets a copy of its send (MPI leaves it undefined).
func ExscanInto[T Element](ctx context.Context, c *Comm, send, recv []T, op Op) error {
	return c.collective(ctx, "Exscan", into(c, send, recv, op, collectives.Exscan[T]))
}

// into is the body of AllreduceInto, ScanInto, ExscanInto and their
// non-blocking forms: run, one of the in-place engine collectives, from
// send into recv.
func into[T Element](c *Comm, send, recv []T, op Op, run func(context.Context, *collectives.Engine, []T, Op) error) func(context.Context) error {
	return func(ctx context.Context) error {
		if err := sameLen(send, recv); err != nil {
			// Still take part (with an op the engine refuses), so that the
			// other ranks fail at once instead of waiting for this one.
			run(ctx, c.eng, recv[:0:0], Op{})
			return err
		}
		localCopy(recv, send)
		return run(ctx, c.eng, recv, op)
	}
}

// allreduceInto is the body of AllreduceInto and IallreduceInto: the
// engine's own AllreduceInto, which can reduce from send without copying
// it into recv first. Lengths that differ take into's way of failing.
func allreduceInto[T Element](c *Comm, send, recv []T, op Op) func(context.Context) error {
	if len(send) != len(recv) {
		return into(c, send, recv, op, collectives.Allreduce[T])
	}
	return func(ctx context.Context) error { return collectives.AllreduceInto(ctx, c.eng, send, recv, op) }
}

func sameLen[T any](send, recv []T) error {
	if len(send) != len(recv) {
		return fmt.Errorf("%w: send has %d elements, recv %d", ErrInvalidArgument, len(send), len(recv))
	}
	return nil
}

// localCopy copies src into dst as copy does, keeping a copy of 1 MiB or
// more in the caches (ntcopy.Bulk): Go's copy streams those past them,
// and the collective that follows reads or rewrites the lines at once.
func localCopy[T Element](dst, src []T) {
	ntcopy.Bulk(reduce.Bytes(dst), reduce.Bytes(src))
}
