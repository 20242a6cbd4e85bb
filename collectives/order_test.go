package collectives_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// lastNonZero is associative but not commutative: the right-most non-zero
// operand wins, so any reordering of ranks shows in the result.
var lastNonZero = reduce.Func("last_nonzero", false, func(inout, in []int32) {
	for i, v := range in {
		if v != 0 {
			inout[i] = v
		}
	}
})

func ncInput(r, n int) []int32 {
	x := make([]int32, n)
	for i := range x {
		if (i+r)%3 != 0 {
			x[i] = int32((r+1)*100 + i%7)
		}
	}
	return x
}

func ncFold(from, to, n int) []int32 { // ranks [from, to)
	out := make([]int32, n)
	for r := from; r < to; r++ {
		for i, v := range ncInput(r, n) {
			if v != 0 {
				out[i] = v
			}
		}
	}
	return out
}

// ncAllreduceReduce checks lastNonZero's Allreduce on every rank and its
// Reduce to rank p−1 (whose other ranks' buffers stay as they were).
func ncAllreduceReduce(ctx context.Context, e *collectives.Engine, r, p, n int) error {
	buf := ncInput(r, n)
	if err := collectives.Allreduce(ctx, e, buf, lastNonZero); err != nil {
		return err
	}
	if err := eq32("allreduce", buf, ncFold(0, p, n)); err != nil {
		return err
	}
	buf = ncInput(r, n)
	if err := collectives.Reduce(ctx, e, buf, lastNonZero, p-1); err != nil {
		return err
	}
	want := ncInput(r, n)
	if r == p-1 {
		want = ncFold(0, p, n)
	}
	return eq32("reduce", buf, want)
}

func eq32(what string, got, want []int32) error {
	for i := range want {
		if got[i] != want[i] {
			return fmt.Errorf("%s: element %d is %d, want %d", what, i, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	return nil
}

// TestNonCommutative: user ops that are not commutative get rank order from
// every collective that reduces (the selector only admits order-keeping
// algorithms).
func TestNonCommutative(t *testing.T) {
	t.Parallel()
	for _, alg := range []collectives.Algorithm{collectives.Auto, collectives.RecursiveDoubling, collectives.Ordered} {
		for _, p := range gridRanks() {
			for _, n := range sizes {
				t.Run(name("alg", alg, "p", p, "n", n), func(t *testing.T) {
					errs := world(t, p, coltest.Options{}, force(collectives.CollAllreduce, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
						if err := ncAllreduceReduce(ctx, e, r, p, n); err != nil {
							return err
						}
						send := ncInput(r, p*n)
						recv := make([]int32, n)
						if err := collectives.ReduceScatter(ctx, e, send, recv, lastNonZero); err != nil {
							return err
						}
						if err := eq32("reduce_scatter", recv, ncFold(0, p, p*n)[r*n:(r+1)*n]); err != nil {
							return err
						}
						buf := ncInput(r, n)
						if err := collectives.Scan(ctx, e, buf, lastNonZero); err != nil {
							return err
						}
						if err := eq32("scan", buf, ncFold(0, r+1, n)); err != nil {
							return err
						}
						buf = ncInput(r, n)
						if err := collectives.Exscan(ctx, e, buf, lastNonZero); err != nil {
							return err
						}
						if r > 0 {
							return eq32("exscan", buf, ncFold(0, r, n))
						}
						return nil
					})
					requireAllOK(t, errs)
				})
			}
		}
	}
}

func randInput(r, n int) []float32 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(n)))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(6)-3)))
	}
	return x
}

func leftFold(p, n int) []float32 {
	out := randInput(0, n)
	for r := 1; r < p; r++ {
		for i, v := range randInput(r, n) {
			out[i] += v
		}
	}
	return out
}

func bitsEqual(a, b []float32) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d vs %d elements", len(a), len(b))
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return fmt.Errorf("element %d: %v (%#x) vs %v (%#x)", i, a[i], math.Float32bits(a[i]), b[i], math.Float32bits(b[i]))
		}
	}
	return nil
}

// TestDeterministic: with Options.Deterministic the result is the strict
// left fold x0+x1+…+x(p−1), bit for bit, whatever the size, and Reduce and
// ReduceScatter agree with Allreduce. Inputs are non-integer floats of mixed
// magnitudes, where any other order changes the bits.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	det := collectives.Options{Deterministic: true}
	for _, p := range []int{2, 3, 5, 8} {
		for _, n := range []int{1, 7, 1000, 20011} {
			t.Run(name("p", p, "n", n), func(t *testing.T) {
				want := leftFold(p, n)
				errs := world(t, p, coltest.Options{}, det, func(ctx context.Context, e *collectives.Engine, r int) error {
					buf := randInput(r, n)
					if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
						return err
					}
					if err := bitsEqual(buf, want); err != nil {
						return fmt.Errorf("allreduce: %w", err)
					}
					buf = randInput(r, n)
					if err := collectives.Reduce(ctx, e, buf, reduce.Sum, 0); err != nil {
						return err
					}
					if r == 0 {
						if err := bitsEqual(buf, want); err != nil {
							return fmt.Errorf("reduce: %w", err)
						}
					}
					return nil
				})
				requireAllOK(t, errs)
			})
		}
	}
	// Forcing a reordering algorithm is refused on every rank.
	o := det
	o.Algorithms = map[collectives.Collective]collectives.Algorithm{collectives.CollAllreduce: collectives.Ring}
	errs := world(t, 3, coltest.Options{}, o, func(ctx context.Context, e *collectives.Engine, r int) error {
		return collectives.Allreduce(ctx, e, []float32{1}, reduce.Sum)
	})
	for r, err := range errs {
		require.ErrorIs(t, err, collectives.ErrInvalidArgument, "rank %d", r)
		require.ErrorContains(t, err, "Deterministic")
	}
}

// TestBitIdentical: every algorithm gives every rank the same bits, with
// inputs where the reduction order matters.
func TestBitIdentical(t *testing.T) {
	t.Parallel()
	for _, alg := range collectives.Algorithms(collectives.CollAllreduce) {
		for _, p := range []int{3, 5, 8} {
			for _, n := range []int{7, 1000} {
				t.Run(name("alg", alg, "p", p, "n", n), func(t *testing.T) {
					got := make([][]float32, p)
					errs := world(t, p, worldFor(alg, p), force(collectives.CollAllreduce, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
						got[r] = randInput(r, n)
						return collectives.Allreduce(ctx, e, got[r], reduce.Sum)
					})
					requireAllOK(t, errs)
					for r := 1; r < p; r++ {
						require.NoError(t, bitsEqual(got[r], got[0]), "rank %d vs rank 0", r)
					}
					// And the sum is right to float32 accuracy.
					want := leftFold(p, n)
					for i := range want {
						require.InDelta(t, want[i], got[0][i], 1e-3*(1+math.Abs(float64(want[i]))))
					}
				})
			}
		}
	}
}

// TestOpsThroughAllreduce runs every built-in op and a few types through
// the collectives (the kernels themselves are tested in package reduce).
func TestOpsThroughAllreduce(t *testing.T) {
	t.Parallel()
	const p, n = 5, 33
	for _, op := range reduce.Builtins {
		t.Run(op.String(), func(t *testing.T) {
			errs := world(t, p, coltest.Options{}, collectives.Options{}, func(ctx context.Context, e *collectives.Engine, r int) error {
				buf := make([]int16, n)
				for i := range buf {
					buf[i] = int16((r*7 + i*3) % 11)
				}
				want := make([]int16, n)
				for i := range want {
					want[i] = int16(i * 3 % 11)
				}
				for q := 1; q < p; q++ {
					x := make([]int16, n)
					for i := range x {
						x[i] = int16((q*7 + i*3) % 11)
					}
					if err := reduce.Reduce(op, want, x); err != nil {
						return err
					}
				}
				if op.Code() == reduce.OpAvg {
					for i := range want {
						want[i] /= p
					}
				}
				if err := collectives.Allreduce(ctx, e, buf, op); err != nil {
					return err
				}
				for i := range buf {
					if buf[i] != want[i] {
						return fmt.Errorf("element %d: %d, want %d", i, buf[i], want[i])
					}
				}
				// bfloat16 sum and avg of small integers are exact.
				h := []reduce.BFloat16{reduce.BFloat16From(float32(r)), reduce.BFloat16From(2)}
				if op.Code() == reduce.OpSum || op.Code() == reduce.OpAvg {
					if err := collectives.Allreduce(ctx, e, h, op); err != nil {
						return err
					}
					w0, w1 := float32(0+1+2+3+4), float32(2*p)
					if op.Code() == reduce.OpAvg {
						w0, w1 = w0/p, w1/p
					}
					if h[0].Float32() != w0 || h[1].Float32() != w1 {
						return fmt.Errorf("bfloat16 %v: %v %v", op, h[0].Float32(), h[1].Float32())
					}
				}
				return nil
			})
			requireAllOK(t, errs)
		})
	}
}
