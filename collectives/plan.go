package collectives

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/collectives/reduce"
)

// Plan is one collective call fixed in advance, to be run many times (a
// persistent collective, as MPI_Allreduce_init makes): its buffer, op,
// reduction kernel and algorithm are settled when it is made, so a Run
// skips the argument checks, the kernel lookup and the cost model of a
// plain call, and builds no closure. What a Run does on the wire, how it
// keeps the ranks' sequence numbers in step and how it reports a mismatch
// are a plain call's. Every rank must run its plans in the same order as
// its other collectives on the Engine.
//
// Arguments that are wrong are not an error of the Plan's making: each
// Run then fails with them (telling the other ranks, as a plain call
// does), so that no rank is left waiting for one whose plan failed. Err
// reports them at once.
type Plan struct {
	e    *Engine
	s    spec
	kern *reduce.Kernel
	alg  Algorithm
	bad  error
	fn   func(c *call, alg Algorithm) error
}

// PlanAllreduce plans Allreduce(ctx, e, buf, op).
func PlanAllreduce[T reduce.Element](e *Engine, buf []T, op reduce.Op) *Plan {
	b := reduce.Bytes(buf)
	p := &Plan{e: e, s: spec{coll: CollAllreduce, dt: reduce.DTypeOf[T](), op: op, count: int64(len(buf)), nbytes: len(b)}}
	p.fn = func(c *call, alg Algorithm) error { return c.allreduce(b, alg) }
	p.kern, p.alg, p.bad = e.prepare(&p.s)
	return p
}

// Err is what is wrong with the plan's arguments (every Run fails with
// it), or nil.
func (p *Plan) Err() error {
	if p.bad == nil {
		return nil
	}
	return &Error{Op: p.s.coll.String(), Rank: p.e.rank, Peer: -1, Err: p.bad}
}

// Algorithm is the algorithm every Run uses (Auto when the arguments are
// wrong).
func (p *Plan) Algorithm() Algorithm { return p.alg }

// Run runs the planned call once.
func (p *Plan) Run(ctx context.Context) error {
	if ctx == nil {
		return &Error{Op: p.s.coll.String(), Rank: p.e.rank, Peer: -1, Err: fmt.Errorf("%w: nil context", ErrInvalidArgument)}
	}
	return p.e.execute(ctx, &p.s, p.kern, p.alg, p.bad, p.fn)
}
