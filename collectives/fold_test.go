package collectives_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// plainGroup hides every optional capability of the group it wraps: the
// engine sees only collectives.Group.
type plainGroup struct{ collectives.Group }

// The reduction steps that receive by folding (binomial reduce,
// Rabenseifner's reduce and allreduce, the ring and recursive-halving
// reduce-scatters) give the exact sums, with every payload split from its
// header (InlineBytes 8) or every one inline (1 MiB), over even and
// uneven blocks, whether the group folds as messages arrive (FoldReceiver,
// which the world counts: only split payloads up to the group's FoldLimit
// are fold receives) or not (the engine folds from scratch memory).
func TestFoldReceive(t *testing.T) {
	cases := []struct {
		coll collectives.Collective
		alg  collectives.Algorithm
	}{
		{collectives.CollReduce, collectives.Binomial},
		{collectives.CollReduce, collectives.Rabenseifner},
		{collectives.CollAllreduce, collectives.Rabenseifner},
		{collectives.CollReduceScatter, collectives.Ring},
		{collectives.CollReduceScatter, collectives.RecursiveHalving},
	}
	for _, tc := range cases {
		for _, capable := range []bool{true, false} {
			for _, n := range []int{2, 3, 5} {
				// Every payload split from its header (InlineBytes 8) or
				// every one inline; split ones above a FoldLimit of 8
				// bytes take the engine's scratch receive.
				for _, c := range []struct{ inline, count, limit int }{{8, 40, 0}, {8, 41, 0}, {1 << 20, 40, 0}, {8, 40, 8}} {
					count := c.count
					name := fmt.Sprintf("%v/%v/fold=%v/p=%d/inline=%d/count=%d/limit=%d", tc.coll, tc.alg, capable, n, c.inline, count, c.limit)
					t.Run(name, func(t *testing.T) {
						w := coltest.NewWorld(n, coltest.Options{FoldLimit: c.limit})
						eo := force(tc.coll, tc.alg)
						eo.InlineBytes = c.inline
						errs := runWorldAs(w, eo, capable, func(ctx context.Context, e *collectives.Engine, rank int) error {
							return foldCase(ctx, e, tc.coll, rank, n, count)
						})
						requireAllOK(t, errs)
						// Inline payloads fold from the staging buffer, and
						// two ranks' recursive halving folds its own vector
						// into what arrives: no fold receive there.
						split := c.inline == 8 && c.limit == 0 && !(tc.alg == collectives.RecursiveHalving && n == 2)
						if capable && split {
							assert.Positive(t, w.Folds(), "fold receives posted")
						} else {
							assert.Zero(t, w.Folds(), "fold receives posted")
						}
					})
				}
			}
		}
	}
}

// foldCase runs coll on rank's vector (element i of rank r: r*1000+i+1,
// every rank's whole vector of n·count elements for a reduce-scatter) and
// checks the sums.
func foldCase(ctx context.Context, e *collectives.Engine, coll collectives.Collective, rank, n, count int) error {
	total := count
	if coll == collectives.CollReduceScatter {
		total = n * count
	}
	buf := make([]int64, total)
	want := make([]int64, total)
	for i := range buf {
		buf[i] = int64(rank*1000 + i + 1)
		for r := range n {
			want[i] += int64(r*1000 + i + 1)
		}
	}
	switch coll {
	case collectives.CollReduce:
		if err := collectives.Reduce(ctx, e, buf, reduce.Sum, 1); err != nil {
			return err
		}
		if rank == 1 && !assert.ObjectsAreEqual(want, buf) {
			return fmt.Errorf("rank %d: reduce result differs: %v, want %v", rank, buf, want)
		}
	case collectives.CollAllreduce:
		if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
			return err
		}
		if !assert.ObjectsAreEqual(want, buf) {
			return fmt.Errorf("rank %d: allreduce result differs: %v, want %v", rank, buf, want)
		}
	case collectives.CollReduceScatter:
		out := make([]int64, count)
		if err := collectives.ReduceScatter(ctx, e, buf, out, reduce.Sum); err != nil {
			return err
		}
		if w := want[rank*count : (rank+1)*count]; !assert.ObjectsAreEqual(w, out) {
			return fmt.Errorf("rank %d: reduce-scatter block differs: %v, want %v", rank, out, w)
		}
	}
	return nil
}

// A fold receive that the group fails (a truncated message, here from a
// peer whose vector is longer) fails the call on the receiving rank with
// the group's error, as a plain receive's would.
func TestFoldReceiveMismatch(t *testing.T) {
	errs := world(t, 2, coltest.Options{}, force(collectives.CollReduce, collectives.Binomial), func(ctx context.Context, e *collectives.Engine, rank int) error {
		n := 40
		if rank == 1 {
			n = 41
		}
		return collectives.Reduce(ctx, e, make([]int64, n), reduce.Sum, 0)
	})
	require.Error(t, errs[0])
	var mm *collectives.MismatchError
	assert.ErrorAs(t, errs[0], &mm, "rank 0: %v", errs[0])
}
