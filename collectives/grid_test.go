package collectives_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// gridCase runs one collective on rank r and checks r's result against a
// serial reference; it returns an error instead of failing so that it can
// run on the rank goroutines.
type gridCase func(ctx context.Context, e *collectives.Engine, r, p, n int) error

func concat(p int, f func(r int) []float64) []float64 {
	var out []float64
	for r := 0; r < p; r++ {
		out = append(out, f(r)...)
	}
	return out
}

func eq(what string, got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i] != want[i] {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

// vcounts are uneven per-rank counts around n (some zero).
func vcounts(p, n int) []int {
	c := make([]int, p)
	for r := range c {
		c[r] = (n + r*3) % (n + 2)
	}
	return c
}

func refScan(p, n, upto int) []float64 {
	out := make([]float64, n)
	for r := 0; r < upto; r++ {
		for i, v := range input(r, n) {
			out[i] += v
		}
	}
	return out
}

var gridCases = map[collectives.Collective]gridCase{
	collectives.CollBarrier: nil, // TestBarrier
	collectives.CollBcast: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		root := p / 2
		buf := make([]float64, n)
		if r == root {
			buf = input(root, n)
		}
		if err := collectives.Bcast(ctx, e, buf, root); err != nil {
			return err
		}
		return eq("bcast", buf, input(root, n))
	},
	collectives.CollReduce: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		root := (p - 1) / 2
		buf := input(r, n)
		if err := collectives.Reduce(ctx, e, buf, reduce.Sum, root); err != nil {
			return err
		}
		if r == root {
			return eq("reduce", buf, refSum(p, n))
		}
		return eq("reduce leaves non-root input", buf, input(r, n))
	},
	collectives.CollAllreduce: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		buf := input(r, n)
		if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
			return err
		}
		return eq("allreduce", buf, refSum(p, n))
	},
	collectives.CollAllgather: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		recv := make([]float64, p*n)
		if err := collectives.Allgather(ctx, e, input(r, n), recv); err != nil {
			return err
		}
		return eq("allgather", recv, concat(p, func(r int) []float64 { return input(r, n) }))
	},
	collectives.CollAllgatherv: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		c := vcounts(p, n)
		total := 0
		for _, x := range c {
			total += x
		}
		recv := make([]float64, total)
		if err := collectives.Allgatherv(ctx, e, input(r, c[r]), recv, c); err != nil {
			return err
		}
		return eq("allgatherv", recv, concat(p, func(r int) []float64 { return input(r, c[r]) }))
	},
	collectives.CollReduceScatter: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		recv := make([]float64, n)
		send := input(r, p*n)
		orig := slices.Clone(send)
		if err := collectives.ReduceScatter(ctx, e, send, recv, reduce.Sum); err != nil {
			return err
		}
		if err := eq("reduce_scatter send untouched", send, orig); err != nil {
			return err
		}
		return eq("reduce_scatter", recv, refSum(p, p*n)[r*n:(r+1)*n])
	},
	collectives.CollGather: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		root := p - 1
		var recv []float64
		if r == root {
			recv = make([]float64, p*n)
		}
		if err := collectives.Gather(ctx, e, input(r, n), recv, root); err != nil {
			return err
		}
		if r != root {
			return nil
		}
		return eq("gather", recv, concat(p, func(r int) []float64 { return input(r, n) }))
	},
	collectives.CollGatherv: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		root := p / 3
		c := vcounts(p, n)
		var recv []float64
		if r == root {
			for _, x := range c {
				recv = append(recv, make([]float64, x)...)
			}
			recv = append([]float64{}, recv...)
		}
		if err := collectives.Gatherv(ctx, e, input(r, c[r]), recv, c, root); err != nil {
			return err
		}
		if r != root {
			return nil
		}
		return eq("gatherv", recv, concat(p, func(r int) []float64 { return input(r, c[r]) }))
	},
	collectives.CollScatter: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		root := p / 2
		var send []float64
		if r == root {
			send = input(99, p*n)
		}
		recv := make([]float64, n)
		if err := collectives.Scatter(ctx, e, send, recv, root); err != nil {
			return err
		}
		return eq("scatter", recv, input(99, p*n)[r*n:(r+1)*n])
	},
	collectives.CollScatterv: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		root := p - 1
		c := vcounts(p, n)
		all := concat(p, func(r int) []float64 { return input(r+7, c[r]) })
		var send []float64
		if r == root {
			send = all
		}
		recv := make([]float64, c[r])
		if err := collectives.Scatterv(ctx, e, send, c, recv, root); err != nil {
			return err
		}
		return eq("scatterv", recv, input(r+7, c[r]))
	},
	collectives.CollAlltoall: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		// Block j of rank i's send is input(100*i+j, n).
		send := concat(p, func(j int) []float64 { return input(100*r+j, n) })
		recv := make([]float64, p*n)
		if err := collectives.Alltoall(ctx, e, send, recv); err != nil {
			return err
		}
		return eq("alltoall", recv, concat(p, func(i int) []float64 { return input(100*i+r, n) }))
	},
	collectives.CollAlltoallv: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		cnt := func(i, j int) int { return (n + i + 2*j) % (n + 3) } // rank i sends cnt(i,j) to j
		sc, rc := make([]int, p), make([]int, p)
		for j := 0; j < p; j++ {
			sc[j], rc[j] = cnt(r, j), cnt(j, r)
		}
		send := concat(p, func(j int) []float64 { return input(100*r+j, cnt(r, j)) })
		recv := make([]float64, len(concat(p, func(i int) []float64 { return make([]float64, cnt(i, r)) })))
		if err := collectives.Alltoallv(ctx, e, send, sc, recv, rc); err != nil {
			return err
		}
		return eq("alltoallv", recv, concat(p, func(i int) []float64 { return input(100*i+r, cnt(i, r)) }))
	},
	collectives.CollScan: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		buf := input(r, n)
		if err := collectives.Scan(ctx, e, buf, reduce.Sum); err != nil {
			return err
		}
		return eq("scan", buf, refScan(p, n, r+1))
	},
	collectives.CollExscan: func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
		buf := input(r, n)
		if err := collectives.Exscan(ctx, e, buf, reduce.Sum); err != nil {
			return err
		}
		if r == 0 {
			return eq("exscan rank 0 untouched", buf, input(0, n))
		}
		return eq("exscan", buf, refScan(p, n, r))
	},
}

// TestGrid runs every collective × every algorithm × rank counts × sizes
// against the serial references.
func TestGrid(t *testing.T) {
	t.Parallel()
	for _, coll := range collectives.Collectives() {
		f := gridCases[coll]
		if f == nil || coll == collectives.CollAllreduce {
			continue // TestAllreduceGrid
		}
		for _, alg := range collectives.Algorithms(coll) {
			for _, p := range gridRanks() {
				for _, n := range sizes {
					t.Run(name("coll", coll, "alg", alg, "p", p, "n", n), func(t *testing.T) {
						errs := world(t, p, worldFor(alg, p), force(coll, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
							if err := f(ctx, e, r, p, n); err != nil {
								return err
							}
							return checkAlg(e, alg)
						})
						requireAllOK(t, errs)
					})
				}
			}
		}
	}
}

// TestBarrier: no rank leaves a barrier before every rank has entered it,
// with every algorithm (the hierarchical one over uneven hosts, ranks
// interleaved: see worldFor) and Auto.
func TestBarrier(t *testing.T) {
	t.Parallel()
	algs := append([]collectives.Algorithm{collectives.Auto}, collectives.Algorithms(collectives.CollBarrier)...)
	for _, alg := range algs {
		for _, p := range gridRanks() {
			t.Run(name("alg", alg, "p", p), func(t *testing.T) { testBarrier(t, alg, p) })
		}
	}
}

func testBarrier(t *testing.T, alg collectives.Algorithm, p int) {
	var arrived atomic.Int32
	errs := world(t, p, worldFor(alg, p), force(collectives.CollBarrier, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
		for round := 1; round <= 3; round++ {
			arrived.Add(1)
			if err := collectives.Barrier(ctx, e); err != nil {
				return err
			}
			if got := arrived.Load(); got < int32(round*p) {
				return fmt.Errorf("round %d: left the barrier with %d arrivals, want ≥ %d", round, got, round*p)
			}
			if err := collectives.Barrier(ctx, e); err != nil { // keep rounds apart
				return err
			}
		}
		return nil
	})
	requireAllOK(t, errs)
}

var _ = require.New
