package collectives_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// input is rank r's integer-valued vector, so float sums are exact in any
// order and results compare with ==.
func input(r, n int) []float64 {
	return slices.Clone(memo(inputs, [2]int{r, n}, func() []float64 {
		x := make([]float64, n)
		for i := range x {
			x[i] = float64((r+1)*(i%13) - 3*r + i%5)
		}
		return x
	}))
}

// refSum is read-only (shared between ranks).
func refSum(p, n int) []float64 {
	return memo(sums, [2]int{p, n}, func() []float64 {
		out := make([]float64, n)
		for r := 0; r < p; r++ {
			for i, v := range input(r, n) {
				out[i] += v
			}
		}
		return out
	})
}

// The references of the large cases are costly; compute each once.
var (
	memoMu       sync.Mutex
	inputs, sums = map[[2]int][]float64{}, map[[2]int][]float64{}
)

func memo(m map[[2]int][]float64, k [2]int, f func() []float64) []float64 {
	memoMu.Lock()
	v, ok := m[k]
	memoMu.Unlock()
	if ok {
		return v
	}
	v = f()
	if k[1] >= 1<<16 { // keep only large ones; small ones are cheap
		memoMu.Lock()
		m[k] = v
		memoMu.Unlock()
	}
	return v
}

func TestAllreduceGrid(t *testing.T) {
	t.Parallel()
	for _, alg := range collectives.Algorithms(collectives.CollAllreduce) {
		for _, p := range gridRanks() {
			for _, n := range sizes {
				t.Run(name("alg", alg, "p", p, "n", n), func(t *testing.T) {
					want := refSum(p, n)
					got := make([][]float64, p)
					errs := world(t, p, worldFor(alg, p), force(collectives.CollAllreduce, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
						buf := input(r, n)
						got[r] = buf
						if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
							return err
						}
						return checkAlg(e, alg)
					})
					requireAllOK(t, errs)
					for r := 0; r < p; r++ {
						require.Equal(t, want, got[r], "rank %d", r)
					}
				})
			}
		}
	}
}

var _ = coltest.Options{}

func checkAlg(e *collectives.Engine, want collectives.Algorithm) error {
	if got := e.LastAlgorithm(); got != want {
		return fmt.Errorf("ran %v, forced %v", got, want)
	}
	return nil
}
