package collectives_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// rsType is one element type and op of the reduce-scatter tests: run
// calls ReduceScatter on rank r with p blocks of m elements each (the
// result landing in send's first block when inPlace) and returns the
// bytes of r's result.
type rsType struct {
	name  string
	esize int
	run   func(ctx context.Context, e *collectives.Engine, r, p, m int, inPlace bool) ([]byte, error)
}

func rsOf[T reduce.Element](name string, op reduce.Op, gen func(r, i int) T) rsType {
	var zero T
	return rsType{name, len(reduce.Bytes([]T{zero})), func(ctx context.Context, e *collectives.Engine, r, p, m int, inPlace bool) ([]byte, error) {
		send := make([]T, p*m)
		for i := range send {
			send[i] = gen(r, i)
		}
		orig := slices.Clone(send)
		recv := make([]T, m)
		if inPlace {
			recv = send[:m]
		}
		if err := collectives.ReduceScatter(ctx, e, send, recv, op); err != nil {
			return nil, err
		}
		if !inPlace && !bytes.Equal(reduce.Bytes(send), reduce.Bytes(orig)) {
			return nil, fmt.Errorf("%s p=%d m=%d: rank %d's send buffer changed", name, p, m, r)
		}
		if inPlace && !bytes.Equal(reduce.Bytes(send[m:]), reduce.Bytes(orig[m:])) {
			return nil, fmt.Errorf("%s p=%d m=%d in place: rank %d's blocks after the first changed", name, p, m, r)
		}
		return slices.Clone(reduce.Bytes(recv)), nil
	}}
}

// rsTypes: floats whose sums round (the fold order shows in the bits),
// Avg (Finish on the result), products, integer max, 2- and 1-byte
// elements, and a non-commutative user op.
var rsTypes = []rsType{
	rsOf("float64/sum", reduce.Sum, func(r, i int) float64 {
		return float64((r*7919+i*104729)%2003-1001) * math.Pow(10, float64((r+i)%13-6))
	}),
	rsOf("float64/avg", reduce.Avg, func(r, i int) float64 { return float64((r+1)*(i%11)) / 3 }),
	rsOf("float32/prod", reduce.Prod, func(r, i int) float32 { return 1 + float32((r*31+i)%17)/64 }),
	rsOf("int32/max", reduce.Max, func(r, i int) int32 { return int32((r*7+i*13)%101 - 50) }),
	rsOf("int16/sum", reduce.Sum, func(r, i int) int16 { return int16(r*1000 + i%97) }),
	rsOf("uint8/bxor", reduce.BXor, func(r, i int) uint8 { return uint8(r*37 + i) }),
	rsOf("int32/last_nonzero", lastNonZero, func(r, i int) int32 {
		if (i+r)%3 == 0 {
			return 0
		}
		return int32((r+1)*100 + i%7)
	}),
}

// rsCounts are block sizes, in elements, around the rounds of the test
// region's 8 KiB slots: a round carries a piece of every block, per
// elements each, so p·per elements fill a slot.
func rsCounts(p, esize int) []int {
	per := (8 << 10) / p / esize
	return []int{0, 1, 7, per - 1, per, per + 1, 3*per + 5}
}

// TestSharedMemoryReduceScatter: the shared-memory reduce-scatter gives
// the Pairwise algorithm's bytes (the rank-order fold, x0 ⊕ x1 ⊕ … ⊕
// x(p−1)) for every type and op, rank count, Deterministic or not, with
// blocks of one round, a round and an element, several rounds and none;
// and the same bytes in place (the result in send's first block, as
// comm's ReduceScatterInPlace passes it), on the same slots call after
// call.
func TestSharedMemoryReduceScatter(t *testing.T) {
	t.Parallel()
	ps := []int{2, 3, 4, 5}
	types := rsTypes
	if raceEnabled && !long { // ten times slower
		ps, types = []int{2, 3, 5}, []rsType{rsTypes[0], rsTypes[1], rsTypes[4], rsTypes[6]}
	}
	for _, ty := range types {
		for _, p := range ps {
			for _, det := range []bool{false, true} {
				t.Run(name("type", ty.name, "p", p, "det", det), func(t *testing.T) {
					counts := rsCounts(p, ty.esize)
					// out[r][k]: rank r's result of call k (count k/2, in
					// place when k is odd).
					run := func(alg collectives.Algorithm, shared bool) [][][]byte {
						out := make([][][]byte, p)
						opts := force(collectives.CollReduceScatter, alg)
						opts.Deterministic = det
						errs := world(t, p, coltest.Options{Shared: shared}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
							for _, m := range counts {
								for _, inPlace := range []bool{false, true} {
									b, err := ty.run(ctx, e, r, p, m, inPlace)
									if err != nil {
										return err
									}
									out[r] = append(out[r], b)
									if err := checkAlg(e, alg); err != nil {
										return err
									}
								}
							}
							return nil
						})
						requireAllOK(t, errs)
						return out
					}
					want := run(collectives.Pairwise, false)
					got := run(collectives.SharedMemory, true)
					for r := range p {
						for k, b := range got[r] {
							require.True(t, bytes.Equal(b, want[r][k]), "rank %d, %d elements a block, in place %v: shared memory's result differs from pairwise's",
								r, counts[k/2], k%2 == 1)
						}
					}
				})
			}
		}
	}
}

// TestSharedMemoryReduceScatterOverlap: a recv that overlaps send other
// than as its first block (here: this rank's own block, and a window
// straddling two blocks) still gets the reduction of every rank's send as
// it was before the call.
func TestSharedMemoryReduceScatterOverlap(t *testing.T) {
	t.Parallel()
	const p = 3
	for _, m := range []int{5, 700} { // one round, several
		for _, at := range []string{"own", "straddle"} {
			t.Run(name("m", m, "at", at), func(t *testing.T) {
				errs := world(t, p, coltest.Options{Shared: true}, force(collectives.CollReduceScatter, collectives.SharedMemory),
					func(ctx context.Context, e *collectives.Engine, r int) error {
						send := input(r, p*m)
						off := r * m
						if at == "straddle" {
							off = m / 2
						}
						if err := collectives.ReduceScatter(ctx, e, send, send[off:off+m], reduce.Sum); err != nil {
							return err
						}
						if err := eq("overlapping reduce_scatter", send[off:off+m], refSum(p, p*m)[r*m:(r+1)*m]); err != nil {
							return err
						}
						return checkAlg(e, collectives.SharedMemory)
					})
				requireAllOK(t, errs)
			})
		}
	}
}

// TestReduceScatterChoosesSharedMemory: on one host with a shared region,
// Auto runs reduce-scatter through shared memory at the defaults, for
// commutative ops, non-commutative ones and Deterministic alike, from
// 8 bytes up to the default band's end; and a rank count of 3 and 4.
func TestReduceScatterChoosesSharedMemory(t *testing.T) {
	t.Parallel()
	upper := min(collectives.DefaultModel().ShmReduceScatterMax, 1<<30)
	for _, p := range []int{2, 3, 4} {
		for _, det := range []bool{false, true} {
			t.Run(name("p", p, "det", det), func(t *testing.T) {
				opts := collectives.Options{Deterministic: det}
				e, err := collectives.New(coltest.NewWorld(p, coltest.Options{Shared: true}).Group(0), opts)
				require.NoError(t, err)
				defer e.Close()
				for _, n := range []int{8 * p, 64 << 10, upper} {
					for _, commutative := range []bool{true, false} {
						a, err := e.Choose(collectives.CollReduceScatter, n, commutative)
						require.NoError(t, err)
						require.Equal(t, collectives.SharedMemory, a, "%d bytes, commutative %v", n, commutative)
					}
				}
				errs := world(t, p, coltest.Options{Shared: true}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
					for _, m := range []int{1, 3000} {
						if err := gridCases[collectives.CollReduceScatter](ctx, e, r, p, m); err != nil {
							return err
						}
						if err := checkAlg(e, collectives.SharedMemory); err != nil {
							return fmt.Errorf("%d elements a block: %w", m, err)
						}
					}
					return nil
				})
				requireAllOK(t, errs)
			})
		}
	}
}

// TestSharedMemoryAllocatesNothing: once an Engine has run a call, the
// shared-memory forms allocate nothing per call on any rank: small calls
// of every collective that has one (reduce-scatter also in place, and
// over several rounds of the test region's slots).
func TestSharedMemoryAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	type shmCall func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, f64 []float64) error
	calls := []struct {
		name string
		call shmCall
	}{
		{"reduce_scatter", func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, _ []float64) error {
			return collectives.ReduceScatter(ctx, e, f32[:4*p], f32[4*p:4*p+4], reduce.Sum)
		}},
		{"reduce_scatter_in_place", func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, _ []float64) error {
			return collectives.ReduceScatter(ctx, e, f32[:4*p], f32[:4], reduce.Sum)
		}},
		{"reduce_scatter_rounds", func(ctx context.Context, e *collectives.Engine, p int, _ []float32, f64 []float64) error {
			return collectives.ReduceScatter(ctx, e, f64[:3000*p], f64[3000*p:3000*p+3000], reduce.Sum)
		}},
		{"allreduce", func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, _ []float64) error {
			return collectives.Allreduce(ctx, e, f32[:4], reduce.Sum)
		}},
		{"reduce", func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, _ []float64) error {
			return collectives.Reduce(ctx, e, f32[:4], reduce.Sum, p-1)
		}},
		{"bcast", func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, _ []float64) error {
			return collectives.Bcast(ctx, e, f32[:4], 0)
		}},
		{"allgather", func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, _ []float64) error {
			return collectives.Allgather(ctx, e, f32[:4], f32[4:4+4*p])
		}},
		{"alltoall", func(ctx context.Context, e *collectives.Engine, p int, f32 []float32, _ []float64) error {
			return collectives.Alltoall(ctx, e, f32[:4*p], f32[4*p:8*p])
		}},
		{"barrier", func(ctx context.Context, e *collectives.Engine, _ int, _ []float32, _ []float64) error {
			return collectives.Barrier(ctx, e)
		}},
	}
	const runs = 200
	for _, tc := range calls {
		for _, p := range []int{2, 3} {
			t.Run(name("call", tc.name, "p", p), func(t *testing.T) {
				var allocs float64
				errs := world(t, p, coltest.Options{Shared: true}, collectives.Options{}, func(ctx context.Context, e *collectives.Engine, r int) error {
					f32, f64 := make([]float32, 8*p), make([]float64, 3000*(p+1))
					var callErr error
					call := func() {
						if err := tc.call(ctx, e, p, f32, f64); err != nil && callErr == nil {
							callErr = err
						}
					}
					for range 3 { // warm the pools
						call()
					}
					if err := checkAlg(e, collectives.SharedMemory); err != nil {
						return err
					}
					// AllocsPerRun counts the whole process's allocations:
					// rank 0 measures while the others make the same calls
					// (it calls once more than runs).
					if r == 0 {
						allocs = testing.AllocsPerRun(runs, call)
					} else {
						for range runs + 1 {
							call()
						}
					}
					return callErr
				})
				requireAllOK(t, errs)
				require.Zero(t, allocs, "allocations per call, over all %d ranks", p)
			})
		}
	}
}
