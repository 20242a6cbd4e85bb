package collectives_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// A message that travels whole in its header's message, or in parts
// (header and payload, each from where it is), goes by the group's SendNow
// (collectives.NowSender) when the group has it and takes the message at
// once, whatever the algorithm: the sends of the binomial,
// Rabenseifner and ordered reduce, the linear gathers, the folds of a
// non-power-of-two allreduce and reduce-scatter, a binomial bcast and a
// ring allgather. The results are those of the Isend path, which a group
// that refuses (its link backed up) or lacks the capability takes.
func TestSmallSendsGoNow(t *testing.T) {
	const n = 3 // not a power of two: the folds send alone too
	cases := []struct {
		name string
		coll collectives.Collective
		alg  collectives.Algorithm
		run  func(ctx context.Context, e *collectives.Engine, rank, count int) error
	}{
		{"reduce", collectives.CollReduce, collectives.Binomial, reduceCase},
		{"reduce", collectives.CollReduce, collectives.Rabenseifner, reduceCase},
		{"reduce", collectives.CollReduce, collectives.Ordered, reduceCase},
		{"gather", collectives.CollGather, collectives.Linear, gatherCase},
		{"gatherv", collectives.CollGatherv, collectives.Linear, gathervCase},
		{"allreduce", collectives.CollAllreduce, collectives.Rabenseifner, allreduceCase},
		{"reduce_scatter", collectives.CollReduceScatter, collectives.RecursiveHalving, reduceScatterCase},
		{"bcast", collectives.CollBcast, collectives.Binomial, bcastCase},
		{"allgather", collectives.CollAllgather, collectives.Ring, allgatherCase},
	}
	var nowParts int64
	defer func() { assert.Positive(t, nowParts, "parts sends by SendNow, all cases") }()
	for _, tc := range cases {
		// int64 elements: 40 bytes staged in the message record, 240 (and
		// the 32-byte header) in a pooled buffer, both inline and below
		// the size that goes in parts; 640 in parts, the header staged
		// and the payload sent from where it is.
		for _, count := range []int{5, 30, 80} {
			for _, mode := range []string{"now", "refused", "plain"} {
				t.Run(fmt.Sprintf("%s/%v/count=%d/%s", tc.name, tc.alg, count, mode), func(t *testing.T) {
					w := coltest.NewWorld(n, coltest.Options{RefuseNow: mode == "refused"})
					errs := runWorldAs(w, force(tc.coll, tc.alg), mode != "plain", func(ctx context.Context, e *collectives.Engine, rank int) error {
						// Twice: the second call reuses the first's staging.
						for range 2 {
							if err := tc.run(ctx, e, rank, count); err != nil {
								return err
							}
						}
						return nil
					})
					requireAllOK(t, errs)
					if mode == "now" {
						assert.Positive(t, w.NowSent(), "messages sent by SendNow")
					} else {
						assert.Zero(t, w.NowSent(), "messages sent by SendNow")
					}
					if mode == "now" {
						// Every parts message too: none took IsendParts.
						assert.Equal(t, w.PartsSent(), w.NowPartsSent(), "parts sends by SendNow")
						nowParts += w.NowPartsSent()
					} else {
						assert.Zero(t, w.NowPartsSent(), "parts sends by SendNow")
					}
				})
			}
		}
	}
}

// loneVal is element i of rank r's vector.
func loneVal(r, i int) int64 { return int64(r*1000 + i) }

// rankVector is rank r's vector of count elements.
func rankVector(r, count int) []int64 {
	v := make([]int64, count)
	for i := range v {
		v[i] = loneVal(r, i)
	}
	return v
}

func reduceCase(ctx context.Context, e *collectives.Engine, rank, count int) error {
	buf := rankVector(rank, count)
	if err := collectives.Reduce(ctx, e, buf, reduce.Sum, 0); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	return checkSums(buf, e.Size(), 0)
}

func allreduceCase(ctx context.Context, e *collectives.Engine, rank, count int) error {
	buf := rankVector(rank, count)
	if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
		return err
	}
	return checkSums(buf, e.Size(), 0)
}

func reduceScatterCase(ctx context.Context, e *collectives.Engine, rank, count int) error {
	p := e.Size()
	send, recv := rankVector(rank, p*count), make([]int64, count)
	if err := collectives.ReduceScatter(ctx, e, send, recv, reduce.Sum); err != nil {
		return err
	}
	if err := checkSums(recv, p, rank*count); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	return nil
}

// checkSums checks element i of buf against the sum over p ranks of
// element off+i of their vectors.
func checkSums(buf []int64, p, off int) error {
	for i, v := range buf {
		var want int64
		for r := range p {
			want += loneVal(r, off+i)
		}
		if v != want {
			return fmt.Errorf("element %d = %d, want %d", i, v, want)
		}
	}
	return nil
}

func gatherCase(ctx context.Context, e *collectives.Engine, rank, count int) error {
	p := e.Size()
	send, recv := rankVector(rank, count), make([]int64, p*count)
	if err := collectives.Gather(ctx, e, send, recv, 0); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	return checkBlocks(recv, p, count)
}

// checkBlocks checks that block r of recv (count elements) is rank r's
// vector, for every rank.
func checkBlocks(recv []int64, p, count int) error {
	for r := range p {
		for i := range count {
			if got := recv[r*count+i]; got != loneVal(r, i) {
				return fmt.Errorf("block %d element %d = %d, want %d", r, i, got, loneVal(r, i))
			}
		}
	}
	return nil
}

// gathervCase: rank r sends r+1 elements.
func gathervCase(ctx context.Context, e *collectives.Engine, rank, count int) error {
	p := e.Size()
	counts := make([]int, p)
	total := 0
	for r := range p {
		counts[r] = r + 1
		total += r + 1
	}
	send := rankVector(rank, rank+1)
	recv := make([]int64, total)
	if err := collectives.Gatherv(ctx, e, send, recv, counts, 0); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	off := 0
	for r := range p {
		for i := range counts[r] {
			if got := recv[off+i]; got != loneVal(r, i) {
				return fmt.Errorf("rank %d's element %d = %d, want %d", r, i, got, loneVal(r, i))
			}
		}
		off += counts[r]
	}
	return nil
}

func bcastCase(ctx context.Context, e *collectives.Engine, rank, count int) error {
	buf := make([]int64, count)
	if rank == 0 {
		buf = rankVector(0, count)
	}
	if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
		return err
	}
	for i, v := range buf {
		if v != loneVal(0, i) {
			return fmt.Errorf("rank %d: element %d = %d, want %d", rank, i, v, loneVal(0, i))
		}
	}
	return nil
}

func allgatherCase(ctx context.Context, e *collectives.Engine, rank, count int) error {
	p := e.Size()
	send, recv := rankVector(rank, count), make([]int64, p*count)
	if err := collectives.Allgather(ctx, e, send, recv); err != nil {
		return err
	}
	if err := checkBlocks(recv, p, count); err != nil {
		return fmt.Errorf("rank %d: %w", rank, err)
	}
	return nil
}
