package comm

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
)

// Undefined is the Split color of a rank that wants no new communicator.
const Undefined = -1

// Context ids.
//
// Every communicator has a context id k; its traffic uses the endpoint's
// matching contexts 2k (user point-to-point) and 2k+1 (collectives), so no
// two communicators' messages ever match. The world is k = 0. New ids come
// from an atomic counter in the rendezvous store (bootstrap.Adder): the
// parent's rank 0 reserves one id per new communicator and broadcasts the
// first, so ids are unique in the whole job even when many communicators
// are split at once from different goroutines. With a store that cannot
// count (a PMI service), the parent agrees on the maximum of its members'
// next free ids instead, which is unique as long as one process does not
// create communicators from two parents at the same time.
const ctxKey = "comm/ctx"

// allocIDs reserves n consecutive context ids, collectively over c (it
// runs inside one of c's collective turns), and returns the first.
func (c *Comm) allocIDs(ctx context.Context, n int) (uint32, error) {
	w := c.w
	if ad, ok := w.store.(bootstrap.Adder); ok {
		base := []int64{0}
		if c.rank == 0 {
			v, err := ad.Add(ctx, ctxKey+"/"+w.name, int64(n))
			if err != nil {
				// Tell the others rather than leave them in the Bcast.
				collectives.Bcast(ctx, c.eng, base[:0], -1)
				return 0, err
			}
			base[0] = v - int64(n) + 1
		}
		if err := collectives.Bcast(ctx, c.eng, base, 0); err != nil {
			return 0, err
		}
		return uint32(base[0]), nil
	}
	next := []int64{int64(max(w.nextCtx.Load(), 1))}
	if err := collectives.Allreduce(ctx, c.eng, next, Max); err != nil {
		return 0, err
	}
	for {
		cur := w.nextCtx.Load()
		want := max(cur, uint32(next[0])+uint32(n))
		if w.nextCtx.CompareAndSwap(cur, want) {
			break
		}
	}
	return uint32(next[0]), nil
}

// Split partitions the communicator: ranks that pass the same color form
// a new communicator, ordered by key and then by their rank here (MPI
// semantics). A rank passing Undefined gets a nil communicator. It is a
// collective over c; every rank calls it, in its collective order.
func (c *Comm) Split(ctx context.Context, color, key int) (*Comm, error) {
	var out *Comm
	err := c.collective(ctx, "Split", func(ctx context.Context) error {
		// Everybody's (color, key), in one exchange.
		mine := []int64{int64(color), int64(key)}
		all := make([]int64, 2*c.size)
		if err := collectives.Allgather(ctx, c.eng, mine, all); err != nil {
			return err
		}
		var colors []int64
		for r := range c.size {
			if col := all[2*r]; col >= 0 && !slices.Contains(colors, col) {
				colors = append(colors, col)
			}
		}
		slices.Sort(colors)
		// Ids are reserved even when this rank's color is bad, so that
		// every rank runs the same collectives.
		var base uint32
		if len(colors) > 0 {
			var err error
			if base, err = c.allocIDs(ctx, len(colors)); err != nil {
				return err
			}
		}
		if color == Undefined {
			return nil
		}
		if color < 0 {
			return fmt.Errorf("%w: color %d is negative and not Undefined", ErrInvalidArgument, color)
		}
		type entry struct{ key, rank int }
		var group []entry
		for r := range c.size {
			if all[2*r] == int64(color) {
				group = append(group, entry{int(all[2*r+1]), r})
			}
		}
		// cmp.Compare, not a subtraction: keys near the int limits
		// would overflow it and sort out of order.
		slices.SortFunc(group, func(a, b entry) int {
			return cmp.Or(cmp.Compare(a.key, b.key), cmp.Compare(a.rank, b.rank))
		})
		members := make([]int, len(group))
		for i, e := range group {
			members[i] = c.members[e.rank]
		}
		id := base + uint32(slices.Index(colors, int64(color)))
		var err error
		out, err = c.w.newComm(id, members, false)
		return err
	})
	return out, err
}

// Dup returns a new communicator with the same ranks in the same order
// and its own matching contexts: its messages and collectives never match
// c's, so a library (or another goroutine) can run collectives on it while
// c is busy. It is a collective over c.
func (c *Comm) Dup(ctx context.Context) (*Comm, error) {
	var out *Comm
	err := c.collective(ctx, "Dup", func(ctx context.Context) error {
		id, err := c.allocIDs(ctx, 1)
		if err != nil {
			return err
		}
		out, err = c.w.newComm(id, slices.Clone(c.members), false)
		return err
	})
	return out, err
}
