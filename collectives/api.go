package collectives

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/ntcopy"
)

// spec describes one call for run.
type spec struct {
	coll   Collective
	dt     reduce.DType
	op     reduce.Op // zero Op for collectives that do not reduce
	root   int
	count  int64 // the count every message (and the fingerprint) carries
	nbytes int   // size the cost model sees
	// argErr is what is wrong with the other arguments (buffer lengths,
	// counts), or nil. It is computed by the caller, not a func that run
	// calls: a closure stored in spec went to the heap on every call,
	// because spec's op leaks through Op.Resolve's errors.
	argErr error
}

// run is the common path of every collective: choose the algorithm, begin
// the call (which keeps the sequence numbers of all ranks in step even when
// this rank's arguments are bad: it then tells the others instead of
// leaving them waiting), cross-check fingerprints in Debug mode, run.
func (e *Engine) run(ctx context.Context, s *spec, fn func(c *call, alg Algorithm) error) error {
	if ctx == nil {
		return &Error{Op: s.coll.String(), Rank: e.rank, Peer: -1, Err: fmt.Errorf("%w: nil context", ErrInvalidArgument)}
	}
	kern, alg, bad := e.prepare(s)
	return e.execute(ctx, s, kern, alg, bad, fn)
}

// prepare is the part of run that depends only on the call's arguments:
// the reduction kernel, the argument checks and the algorithm (a Plan
// does it once for many runs). bad is what was wrong with the arguments.
func (e *Engine) prepare(s *spec) (kern *reduce.Kernel, alg Algorithm, bad error) {
	if s.op.Valid() || s.coll == CollReduce || s.coll == CollAllreduce || s.coll == CollReduceScatter || s.coll == CollScan || s.coll == CollExscan {
		var err error
		if kern, err = s.op.KernelOf(s.dt); err != nil {
			bad = fmt.Errorf("%w: %w", ErrUnsupported, err)
		}
	} else {
		kern = reduce.NoOp(s.dt)
	}
	if s.dt.Size() == 0 && bad == nil {
		bad = fmt.Errorf("%w: element type %v", ErrUnsupported, s.dt)
	}
	if bad == nil && (s.root < 0 || s.root >= e.size) {
		bad = fmt.Errorf("%w: root %d out of range [0, %d)", ErrInvalidArgument, s.root, e.size)
	}
	if bad == nil {
		bad = s.argErr
	}
	alg = Auto
	if bad == nil {
		var err error
		if alg, err = e.choose(s.coll, s.nbytes, !s.op.Valid() || s.op.Commutative()); err != nil {
			bad = err
		}
	}
	return kern, alg, bad
}

// execute is the part of run that communicates: begin, the shared-memory
// agreement's entry (shmEnter), fingerprints, fn.
func (e *Engine) execute(ctx context.Context, s *spec, kern *reduce.Kernel, alg Algorithm, bad error, fn func(c *call, alg Algorithm) error) error {
	c, err := e.begin(ctx, s.coll, alg, kern, max(s.dt.Size(), 1), s.root, s.count)
	if err != nil {
		return err
	}
	var late error // the previous call's disagreement (see shmEnter)
	after := false // the previous call's check waits for this one's end
	readsAll, pends := false, false
	if alg == SharedMemory {
		var seen int
		readsAll, seen = e.shmReads(s)
		// A shared-memory call that does not read every peer's header (a
		// bcast, a reduce on a sender, an empty allreduce) leaves its
		// agreement to this rank's next call, or Close (see Agreement in
		// alg_shm.go). It writes that record now, before it publishes:
		// the stores of a publication wait in the store buffer until the
		// peer polling those lines gives them up. The header is filled as
		// begin filled the call's, not copied from it (see call.h).
		if pends = e.size > 1 && !readsAll; pends {
			p := e.shm.nextPend()
			p.calls, p.op, p.alg, p.seen = c.calls, c.op, alg, seen
			callHeader(&p.h, s.coll, alg, kern, c.seq, s.root, s.count)
		}
	}
	if e.shm != nil && e.size > 1 {
		if late, after, err = c.shmEnter(bad, readsAll); err != nil {
			return c.end(err)
		}
	}
	if bad != nil {
		if f := e.forced[s.coll]; f != Auto {
			c.alg = f // the error names the algorithm the caller forced, not "auto"
		}
		return c.end(c.invalid(bad))
	}
	if e.opts.Debug && e.size > 1 {
		if err := c.fingerprint(); err != nil {
			return c.end(err)
		}
	}
	// A panic in fn (a user's op, say) still ends the call, so that the
	// Engine's locks are released and Close returns; the panic goes on.
	ended := false
	defer func() {
		if !ended {
			c.end(fmt.Errorf("%w: the call panicked", ErrProtocol))
		}
	}()
	err = fn(c, alg)
	if after {
		if err == nil {
			// Every peer published this call's data, so announced the
			// previous call: its check waits for nobody now.
			late, err = c.shmVerify(e.shm.pend())
		}
		e.shm.pend().calls = 0
	}
	if err == nil && pends {
		e.shm.pendNext()
	}
	ended = true
	if err = c.end(err); err == nil {
		return late // this call did its part; it reports the previous one's disagreement
	}
	return err
}

// shmReads says which peers' headers a shared-memory call compares with
// this rank's, with their data: all of them (every rank of a barrier, an
// allgather, an alltoall, a reduce-scatter and of an allreduce with data,
// a reduce root or any rank of a block-folding reduce, a bcast reader of
// two ranks), else seen, one of them (a bcast reader's root), or -1.
func (e *Engine) shmReads(s *spec) (all bool, seen int) {
	me, size := e.rank, e.size
	switch s.coll {
	case CollBarrier, CollAllgather, CollAlltoall, CollReduceScatter:
		return true, -1
	case CollAllreduce:
		return s.nbytes > 0, -1
	case CollReduce:
		// The block-folding form reads every peer's slot on every rank.
		return me == s.root || e.model.reduceFolds(s.nbytes), -1
	case CollBcast:
		if me != s.root {
			return size == 2, s.root
		}
	}
	return false, -1
}

func lenErr(what string, got, want int) error {
	return fmt.Errorf("%w: %s has %d elements, want %d", ErrInvalidArgument, what, got, want)
}

// Barrier returns once every rank of the group has entered it.
func Barrier(ctx context.Context, e *Engine) error {
	return e.run(ctx, &spec{coll: CollBarrier, dt: reduce.Uint8}, func(c *call, alg Algorithm) error {
		switch alg {
		case SharedMemory:
			return c.barrierShm()
		case Hierarchical:
			return c.barrierHier()
		}
		return c.barrierDissemination()
	})
}

// Bcast copies root's buf into buf on every rank. len(buf) must be the
// same everywhere.
func Bcast[T reduce.Element](ctx context.Context, e *Engine, buf []T, root int) error {
	b := reduce.Bytes(buf)
	return e.run(ctx, &spec{coll: CollBcast, dt: reduce.DTypeOf[T](), root: root, count: int64(len(buf)), nbytes: len(b)},
		func(c *call, alg Algorithm) error {
			switch alg {
			case ScatterAllgather:
				return c.bcastScatterAllgather(b, root)
			case Chain:
				return c.bcastChain(b, root)
			case Hierarchical:
				return c.bcastHier(b, root)
			case SharedMemory:
				if c.e.size == 2 {
					if c.e.shm.pw != nil && c.e.model.bcastSplits(len(b)) {
						return c.bcastShmSplit(b, root)
					}
					return c.bcastShm(b, root)
				}
				// Reading the root's buffer makes the root wait for every
				// reader, which costs turns on the CPUs when the ranks
				// outnumber them (Crowded); the slots let it go.
				if c.e.shm.pr != nil && !c.e.shm.crowded && c.e.model.bcastReads(len(b)) {
					return c.bcastShmRead(b, root)
				}
				return c.bcastShm(b, root)
			}
			return c.bcastBinomial(b, root)
		})
}

// Allreduce replaces buf on every rank with the element-wise reduction of
// all ranks' buf under op. Every rank gets the same bits.
func Allreduce[T reduce.Element](ctx context.Context, e *Engine, buf []T, op reduce.Op) error {
	b := reduce.Bytes(buf)
	return e.run(ctx, &spec{coll: CollAllreduce, dt: reduce.DTypeOf[T](), op: op, count: int64(len(buf)), nbytes: len(b)},
		func(c *call, alg Algorithm) error { return c.allreduce(b, alg) })
}

// AllreduceInto leaves in recv, on every rank, the element-wise reduction
// of all ranks' send under op; send is not modified. len(recv) must be
// len(send). Every rank gets the same bits. Recursive doubling, the ring
// and Rabenseifner's algorithm reduce straight from send into recv,
// without copying send first (the others copy it and run in place);
// recursive doubling gets Allreduce's bits, the other two (commutative
// ops only) may not with an op that is commutative but not down to the
// bits.
func AllreduceInto[T reduce.Element](ctx context.Context, e *Engine, send, recv []T, op reduce.Op) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	var argErr error
	if len(recv) != len(send) {
		argErr = lenErr("recv", len(recv), len(send))
	}
	return e.run(ctx, &spec{coll: CollAllreduce, dt: reduce.DTypeOf[T](), op: op, count: int64(len(send)), nbytes: len(sb), argErr: argErr},
		func(c *call, alg Algorithm) error { return c.allreduceInto(sb, rb, alg) })
}

// allreduceInto runs AllreduceInto's algorithm alg from send into recv.
func (c *call) allreduceInto(send, recv []byte, alg Algorithm) error {
	if alg != Ring && alg != Rabenseifner && alg != RecursiveDoubling || overlap(send, recv) {
		ntcopy.Bulk(recv, send)
		return c.allreduce(recv, alg)
	}
	var err error
	switch alg {
	case Ring:
		err = c.ringPipe(send, recv, c.e.model.ringPiece(c.esize))
	case Rabenseifner:
		err = c.allreduceRabenseifner(send, recv)
	default:
		err = c.allreduceRD(send, recv)
	}
	if err == nil && c.kern.Finish != nil {
		c.kern.Finish(recv, c.n)
	}
	return err
}

// allreduce runs Allreduce's algorithm alg over b.
func (c *call) allreduce(b []byte, alg Algorithm) error {
	var err error
	switch alg {
	case Ring:
		err = c.allreduceRing(b)
	case Rabenseifner:
		err = c.allreduceRabenseifner(nil, b)
	case RingOneSided:
		err = c.allreduceRingOneSided(b)
	case Ordered:
		err = c.allreduceOrdered(b)
	case Hierarchical:
		err = c.allreduceHier(b)
	case SharedMemory:
		if c.e.model.shmFolds(c.e.size, len(b)) {
			err = c.allreduceShmRS(b)
		} else {
			err = c.allreduceShm(b)
		}
	default:
		err = c.allreduceRD(nil, b)
	}
	if err == nil && c.kern.Finish != nil {
		c.kern.Finish(b, c.n)
	}
	return err
}

// Reduce leaves the reduction of all ranks' buf under op in root's buf.
// Other ranks' buf is left unchanged.
func Reduce[T reduce.Element](ctx context.Context, e *Engine, buf []T, op reduce.Op, root int) error {
	b := reduce.Bytes(buf)
	return e.run(ctx, &spec{coll: CollReduce, dt: reduce.DTypeOf[T](), op: op, root: root, count: int64(len(buf)), nbytes: len(b)},
		func(c *call, alg Algorithm) error { return c.reduce(b, alg, root) })
}

// ReduceInto is Reduce from every rank's send into root's recv (recv is
// ignored elsewhere and may be nil there); send is not modified. A root
// that reads the other rank's buffer (two ranks over shared memory from
// Model.ShmReduceReadMin, an op that commutes, Deterministic off) reads
// it straight into recv and folds send into that; every other root
// copies send into recv and reduces in place.
func ReduceInto[T reduce.Element](ctx context.Context, e *Engine, send, recv []T, op reduce.Op, root int) error {
	sb := reduce.Bytes(send)
	var rb []byte
	var argErr error
	if e.rank == root {
		rb = reduce.Bytes(recv)
		if len(recv) != len(send) {
			argErr = lenErr("recv", len(recv), len(send))
		}
	}
	return e.run(ctx, &spec{coll: CollReduce, dt: reduce.DTypeOf[T](), op: op, root: root, count: int64(len(send)), nbytes: len(sb), argErr: argErr},
		func(c *call, alg Algorithm) error {
			if c.me != root {
				return c.reduce(sb, alg, root)
			}
			if alg == SharedMemory && c.reducesReadInto(len(sb)) && !overlap(sb, rb) {
				var err error
				if c.reducesSplit(len(sb)) {
					err = c.reduceShmSplit(sb, rb, root)
				} else {
					err = c.reduceShmRead(sb, rb, root, true)
				}
				if err == nil && c.kern.Finish != nil {
					c.kern.Finish(rb, c.n)
				}
				return err
			}
			ntcopy.Bulk(rb, sb)
			return c.reduce(rb, alg, root)
		})
}

// reduce runs Reduce's algorithm alg on b.
func (c *call) reduce(b []byte, alg Algorithm, root int) error {
	// The message-based algorithms reduce in place: a non-root works on a
	// copy, so that its buf stays unchanged. (The shared-memory ones only
	// read a non-root's buf.)
	work := b
	if c.me != root && len(b) > 0 && alg != SharedMemory {
		work = c.get(len(b))
		ntcopy.Bulk(work, b)
	}
	var err error
	switch alg {
	case Rabenseifner:
		err = c.reduceToRoot(work, root, true)
	case Ordered:
		if err = c.orderedReduceScatter(work); err == nil {
			err = c.gatherBlocks(work, root)
		}
	case Hierarchical:
		err = c.reduceHier(work, root)
	case SharedMemory:
		switch {
		case c.e.model.reduceFolds(len(b)):
			err = c.reduceShmRS(b, root)
		case c.reducesSplit(len(b)):
			err = c.reduceShmSplit(b, b, root)
		case c.reducesRead(len(b), root):
			err = c.reduceShmRead(b, b, root, false)
		default:
			err = c.reduceShm(b, root)
		}
	default:
		err = c.reduceBinomial(work, root)
	}
	if err == nil && c.me == root && c.kern.Finish != nil {
		c.kern.Finish(b, c.n)
	}
	return err
}

// ReduceScatter reduces all ranks' send (p blocks of len(recv) elements)
// under op and leaves block r of the result in rank r's recv. send is not
// modified.
func ReduceScatter[T reduce.Element](ctx context.Context, e *Engine, send, recv []T, op reduce.Op) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollReduceScatter, dt: reduce.DTypeOf[T](), op: op, count: int64(len(recv)), nbytes: len(sb),
		argErr: func() error {
			if len(send) != p*len(recv) {
				return lenErr("send", len(send), p*len(recv))
			}
			return nil
		}()},
		func(c *call, alg Algorithm) error {
			if alg == SharedMemory {
				err := c.reduceScatterShm(sb, rb)
				if err == nil && c.kern.Finish != nil {
					c.kern.Finish(rb, c.n)
				}
				return err
			}
			work := c.get(len(sb))
			if alg != RecursiveHalving { // which reads sb itself
				ntcopy.Bulk(work, sb)
			}
			// The block helpers split c.vec elements; here the vector has
			// p·m of them, in blocks of exactly m (messages still announce m).
			c.vec = p * len(recv)
			var err error
			switch alg {
			case RecursiveHalving:
				var f fold
				if f, err = c.halvingReduceScatter(sb, work); err == nil {
					err = c.unfoldBlock(f, work, rb)
				}
			case Ring:
				if err = c.ringReduceScatter(work); err == nil {
					ntcopy.Bulk(rb, block(work, c.esize, c.vec, p, c.me))
				}
			case Hierarchical:
				err = c.reduceScatterHier(work, rb)
			default:
				if err = c.orderedReduceScatter(work); err == nil {
					ntcopy.Bulk(rb, block(work, c.esize, c.vec, p, c.me))
				}
			}
			if err == nil && c.kern.Finish != nil {
				c.kern.Finish(rb, c.n)
			}
			return err
		})
}

// unfoldBlock finishes the recursive-halving reduce-scatter: new rank j
// holds the blocks of old ranks first(j)..last(j); each keeps its own and
// the odd rank of a folded pair hands the even one its block.
func (c *call) unfoldBlock(f fold, work, recv []byte) error {
	p, es, cnt := c.n, c.esize, c.vec
	me := c.me
	if me < 2*f.rem && me%2 == 0 {
		return c.recvWait(me+1, recv)
	}
	ntcopy.Bulk(recv, block(work, es, cnt, p, me))
	if me < 2*f.rem {
		s, err := c.send(me-1, block(work, es, cnt, p, me-1), c.h.count)
		if err != nil {
			return err
		}
		return s.wait()
	}
	return nil
}

// Allgather concatenates every rank's send, in rank order, into every
// rank's recv (len(recv) == p·len(send)).
func Allgather[T reduce.Element](ctx context.Context, e *Engine, send, recv []T) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollAllgather, dt: reduce.DTypeOf[T](), count: int64(len(send)), nbytes: len(rb),
		argErr: func() error {
			if len(recv) != p*len(send) {
				return lenErr("recv", len(recv), p*len(send))
			}
			return nil
		}()},
		func(c *call, alg Algorithm) error {
			ntcopy.Bulk(c.rblock(rb, c.me), sb)
			switch alg {
			case SharedMemory:
				if c.e.shm.pr != nil && c.e.model.readsBlocks(len(sb)) {
					return c.allgatherShmRead(sb, rb)
				}
				return c.allgatherShm(sb, rb)
			case RecursiveDoubling:
				return c.allgatherRD(rb)
			case Bruck:
				return c.allgatherBruck(rb)
			case Linear:
				return c.allgatherLinear(rb)
			case Hierarchical:
				return c.allgatherHier(rb)
			}
			return c.allgatherRing(rb)
		})
}

// Allgatherv is Allgather with per-rank counts: rank r contributes
// counts[r] elements, placed at the prefix sum of the counts before r.
// Every rank must pass the same counts.
func Allgatherv[T reduce.Element](ctx context.Context, e *Engine, send, recv []T, counts []int) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	total := 0
	for _, n := range counts {
		total += n
	}
	return e.run(ctx, &spec{coll: CollAllgatherv, dt: reduce.DTypeOf[T](), count: int64(total), nbytes: len(rb),
		argErr: func() error {
			if err := checkCounts(counts, p); err != nil {
				return err
			}
			if len(send) != counts[e.rank] {
				return lenErr("send", len(send), counts[e.rank])
			}
			if len(recv) != total {
				return lenErr("recv", len(recv), total)
			}
			return nil
		}()},
		func(c *call, alg Algorithm) error {
			off := prefix(counts)
			ntcopy.Bulk(rb[off[c.me]*c.esize:], sb)
			return c.allgathervRing(rb, counts)
		})
}

func checkCounts(counts []int, p int) error {
	if len(counts) != p {
		return fmt.Errorf("%w: %d counts for %d ranks", ErrInvalidArgument, len(counts), p)
	}
	for i, n := range counts {
		if n < 0 {
			return fmt.Errorf("%w: counts[%d] = %d is negative", ErrInvalidArgument, i, n)
		}
	}
	return nil
}

// Gather concatenates every rank's send into root's recv, in rank order
// (len(recv) == p·len(send) at the root; recv is ignored elsewhere).
func Gather[T reduce.Element](ctx context.Context, e *Engine, send, recv []T, root int) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollGather, dt: reduce.DTypeOf[T](), root: root, count: int64(len(send)), nbytes: p * len(sb),
		argErr: func() error {
			if e.rank == root && len(recv) != p*len(send) {
				return lenErr("recv", len(recv), p*len(send))
			}
			return nil
		}()},
		func(c *call, alg Algorithm) error {
			if alg == Binomial {
				return c.gatherBinomial(sb, rb, root)
			}
			return c.gatherLinear(sb, rb, root)
		})
}

// Gatherv gathers counts[r] elements from each rank r into root's recv
// (prefix-sum layout). counts matters at the root only; each rank's
// len(send) must equal the root's counts entry for it.
func Gatherv[T reduce.Element](ctx context.Context, e *Engine, send, recv []T, counts []int, root int) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollGatherv, dt: reduce.DTypeOf[T](), root: root, nbytes: p * len(sb),
		argErr: func() error {
			if e.rank != root {
				return nil
			}
			if err := checkCounts(counts, p); err != nil {
				return err
			}
			if len(send) != counts[root] {
				return lenErr("send", len(send), counts[root])
			}
			if t := prefix(counts)[p]; len(recv) != t {
				return lenErr("recv", len(recv), t)
			}
			return nil
		}()},
		func(c *call, _ Algorithm) error { return c.gathervLinear(sb, rb, counts, root) })
}

// Scatter sends block r of root's send (p blocks of len(recv) elements) to
// rank r's recv.
func Scatter[T reduce.Element](ctx context.Context, e *Engine, send, recv []T, root int) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollScatter, dt: reduce.DTypeOf[T](), root: root, count: int64(len(recv)), nbytes: p * len(rb),
		argErr: func() error {
			if e.rank == root && len(send) != p*len(recv) {
				return lenErr("send", len(send), p*len(recv))
			}
			return nil
		}()},
		func(c *call, alg Algorithm) error {
			if alg == Binomial {
				return c.scatterBinomial(sb, rb, root)
			}
			return c.scatterLinear(sb, rb, root)
		})
}

// Scatterv sends counts[r] elements of root's send (prefix-sum layout) to
// rank r's recv, whose length must equal that count.
func Scatterv[T reduce.Element](ctx context.Context, e *Engine, send []T, counts []int, recv []T, root int) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollScatterv, dt: reduce.DTypeOf[T](), root: root, nbytes: p * len(rb),
		argErr: func() error {
			if e.rank != root {
				return nil
			}
			if err := checkCounts(counts, p); err != nil {
				return err
			}
			if len(recv) != counts[root] {
				return lenErr("recv", len(recv), counts[root])
			}
			if t := prefix(counts)[p]; len(send) != t {
				return lenErr("send", len(send), t)
			}
			return nil
		}()},
		func(c *call, _ Algorithm) error { return c.scattervLinear(sb, rb, counts, root) })
}

// Alltoall sends block j of every rank's send to rank j, where it lands as
// block i (i the sender) of recv. len(send) == len(recv) == p·m.
func Alltoall[T reduce.Element](ctx context.Context, e *Engine, send, recv []T) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollAlltoall, dt: reduce.DTypeOf[T](), count: int64(len(send) / p), nbytes: len(sb),
		argErr: func() error {
			if len(send)%p != 0 {
				return fmt.Errorf("%w: send has %d elements, not a multiple of %d ranks", ErrInvalidArgument, len(send), p)
			}
			if len(recv) != len(send) {
				return lenErr("recv", len(recv), len(send))
			}
			return nil
		}()},
		func(c *call, alg Algorithm) error {
			switch alg {
			case SharedMemory:
				if c.e.shm.pr != nil && c.e.model.readsBlocks(len(sb)/p) {
					return c.alltoallShmRead(sb, rb)
				}
				return c.alltoallShm(sb, rb)
			case Bruck:
				return c.alltoallBruck(sb, rb)
			case Linear:
				return c.alltoallLinear(sb, rb)
			case Hierarchical:
				return c.alltoallHier(sb, rb)
			}
			return c.alltoallPairwise(sb, rb)
		})
}

// Alltoallv sends scounts[j] elements to rank j and receives rcounts[i]
// from rank i (prefix-sum layouts). Each rank's rcounts[i] must equal rank
// i's scounts entry for it.
func Alltoallv[T reduce.Element](ctx context.Context, e *Engine, send []T, scounts []int, recv []T, rcounts []int) error {
	sb, rb := reduce.Bytes(send), reduce.Bytes(recv)
	p := e.size
	return e.run(ctx, &spec{coll: CollAlltoallv, dt: reduce.DTypeOf[T](), nbytes: len(sb),
		argErr: func() error {
			if err := checkCounts(scounts, p); err != nil {
				return err
			}
			if err := checkCounts(rcounts, p); err != nil {
				return err
			}
			if t := prefix(scounts)[p]; len(send) != t {
				return lenErr("send", len(send), t)
			}
			if t := prefix(rcounts)[p]; len(recv) != t {
				return lenErr("recv", len(recv), t)
			}
			return nil
		}()},
		func(c *call, _ Algorithm) error { return c.alltoallvPairwise(sb, scounts, rb, rcounts) })
}

// Scan replaces buf on rank r with the reduction of ranks 0..r's buf, in
// rank order. With Avg, rank r divides by r+1.
func Scan[T reduce.Element](ctx context.Context, e *Engine, buf []T, op reduce.Op) error {
	return scan(ctx, e, buf, op, false)
}

// Exscan replaces buf on rank r > 0 with the reduction of ranks 0..r−1's
// buf; rank 0's buf is left unchanged (MPI leaves it undefined). With Avg,
// rank r divides by r.
func Exscan[T reduce.Element](ctx context.Context, e *Engine, buf []T, op reduce.Op) error {
	return scan(ctx, e, buf, op, true)
}

func scan[T reduce.Element](ctx context.Context, e *Engine, buf []T, op reduce.Op, exclusive bool) error {
	b := reduce.Bytes(buf)
	coll := CollScan
	if exclusive {
		coll = CollExscan
	}
	return e.run(ctx, &spec{coll: coll, dt: reduce.DTypeOf[T](), op: op, count: int64(len(buf)), nbytes: len(b)},
		func(c *call, _ Algorithm) error {
			have, err := c.scanRD(b, exclusive)
			if err == nil && have && c.kern.Finish != nil {
				n := c.me + 1
				if exclusive {
					n = c.me
				}
				c.kern.Finish(b, n)
			}
			return err
		})
}
