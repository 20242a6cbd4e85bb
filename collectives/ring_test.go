package collectives_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// ringOpts forces the ring allreduce with pieces of at most piece bytes
// (negative: whole blocks).
func ringOpts(piece int) collectives.Options {
	o := force(collectives.CollAllreduce, collectives.Ring)
	o.Model = &collectives.Model{RingPieceBytes: piece}
	return o
}

// TestRingPieces: the pipelined ring gives the exact sum, the same bits on
// every rank, and leaves send alone, in place and from a separate send
// buffer, for pieces of one element, of a few (a size that is not a
// multiple of the element, rounded down), of many and of whole blocks, on
// uneven blocks, blocks shorter than a piece and empty blocks.
func TestRingPieces(t *testing.T) {
	t.Parallel()
	ranks := []int{1, 2, 3, 5, 8}
	for _, p := range ranks {
		for _, n := range []int{0, 1, 7, 1000, 4099} {
			for _, piece := range []int{8, 100, 4096, -1} {
				if piece < 100 && n > 1000 {
					continue // thousands of one-element messages: slow under -race, and n=1000 has them
				}
				for _, into := range []bool{false, true} {
					t.Run(name("p", p, "n", n, "piece", piece, "into", into), func(t *testing.T) {
						want := refSum(p, n)
						got := make([][]float64, p)
						errs := world(t, p, coltest.Options{}, ringOpts(piece), func(ctx context.Context, e *collectives.Engine, r int) error {
							send := input(r, n)
							if !into {
								got[r] = send
								return collectives.Allreduce(ctx, e, send, reduce.Sum)
							}
							got[r] = make([]float64, n)
							for i := range got[r] {
								got[r][i] = -1e300 // what a reduction that skipped recv would leave
							}
							if err := collectives.AllreduceInto(ctx, e, send, got[r], reduce.Sum); err != nil {
								return err
							}
							if !slices.Equal(send, input(r, n)) {
								return fmt.Errorf("rank %d: send was modified", r)
							}
							return nil
						})
						requireAllOK(t, errs)
						for r := range p {
							require.Equal(t, want, got[r], "rank %d", r)
						}
					})
				}
			}
		}
	}
}

// TestRingPiecesBitIdentical: with inputs whose sum depends on the order,
// every rank of the pipelined ring gets the same bits, whatever the
// pieces, in place and from a separate send buffer.
func TestRingPiecesBitIdentical(t *testing.T) {
	t.Parallel()
	const p, n = 5, 1003
	for _, piece := range []int{4, 60, -1} {
		for _, into := range []bool{false, true} {
			t.Run(name("piece", piece, "into", into), func(t *testing.T) {
				got := make([][]float32, p)
				errs := world(t, p, coltest.Options{}, ringOpts(piece), func(ctx context.Context, e *collectives.Engine, r int) error {
					send := randInput(r, n)
					if !into {
						got[r] = send
						return collectives.Allreduce(ctx, e, send, reduce.Sum)
					}
					got[r] = make([]float32, n)
					return collectives.AllreduceInto(ctx, e, send, got[r], reduce.Sum)
				})
				requireAllOK(t, errs)
				for r := 1; r < p; r++ {
					require.NoError(t, bitsEqual(got[r], got[0]), "rank %d vs rank 0", r)
				}
			})
		}
	}
}

// TestRingPiecesOps runs every built-in op over several element sizes
// through the pipelined ring, in pieces of one, two and three elements
// and whole, and through Rabenseifner's algorithm, on 3 ranks (one pair
// folds) and 4, in place and into a separate buffer: a piece cut inside
// an element, or a part reduced against the wrong part of send, shows.
func TestRingPiecesOps(t *testing.T) {
	t.Parallel()
	const n = 37
	for _, op := range reduce.Builtins {
		for _, piece := range []int{1, 4, 6, -1, 0} { // 0: Rabenseifner
			opts := ringOpts(piece)
			if piece == 0 {
				opts = force(collectives.CollAllreduce, collectives.Rabenseifner)
			}
			for _, p := range []int{3, 4} {
				t.Run(name("op", op, "piece", piece, "p", p), func(t *testing.T) {
					errs := world(t, p, coltest.Options{}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
						if err := ringOpCheck[int16](ctx, e, op, r, p, n); err != nil {
							return fmt.Errorf("int16: %w", err)
						}
						if err := ringOpCheck[int64](ctx, e, op, r, p, n); err != nil {
							return fmt.Errorf("int64: %w", err)
						}
						if op.Code() == reduce.OpBAnd || op.Code() == reduce.OpBOr || op.Code() == reduce.OpBXor {
							return nil
						}
						if err := ringOpCheck[float32](ctx, e, op, r, p, n); err != nil {
							return fmt.Errorf("float32: %w", err)
						}
						return nil
					})
					requireAllOK(t, errs)
				})
			}
		}
	}
}

// ringOpCheck runs op over small integers (exact in every type) in place
// and into a separate buffer and compares both with reduce.Reduce's.
func ringOpCheck[T int16 | int64 | float32](ctx context.Context, e *collectives.Engine, op reduce.Op, r, p, n int) error {
	in := func(q int) []T {
		x := make([]T, n)
		for i := range x {
			x[i] = T((q*7+i*3)%11 + 1)
		}
		return x
	}
	want := in(0)
	for q := 1; q < p; q++ {
		if err := reduce.Reduce(op, want, in(q)); err != nil {
			return err
		}
	}
	if op.Code() == reduce.OpAvg {
		for i := range want {
			want[i] /= T(p)
		}
	}
	buf := in(r)
	if err := collectives.Allreduce(ctx, e, buf, op); err != nil {
		return err
	}
	if !slices.Equal(buf, want) {
		return fmt.Errorf("in place: %v, want %v", buf, want)
	}
	send, recv := in(r), make([]T, n)
	if err := collectives.AllreduceInto(ctx, e, send, recv, op); err != nil {
		return err
	}
	if !slices.Equal(recv, want) {
		return fmt.Errorf("into: %v, want %v", recv, want)
	}
	if !slices.Equal(send, in(r)) {
		return fmt.Errorf("into: send was modified")
	}
	return nil
}

// TestAllreduceIntoEveryAlgorithm: AllreduceInto gives the sum and leaves
// send alone with every algorithm, on powers of two and not (where
// Rabenseifner's folds), and with send and recv the same buffer or
// overlapping.
func TestAllreduceIntoEveryAlgorithm(t *testing.T) {
	t.Parallel()
	const n = 1000
	for _, alg := range collectives.Algorithms(collectives.CollAllreduce) {
		for _, p := range []int{2, 3, 5, 8} {
			want := refSum(p, n)
			t.Run(name("alg", alg, "p", p), func(t *testing.T) {
				errs := world(t, p, worldFor(alg, p), force(collectives.CollAllreduce, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
					send, recv := input(r, n), make([]float64, n)
					if err := collectives.AllreduceInto(ctx, e, send, recv, reduce.Sum); err != nil {
						return err
					}
					if !slices.Equal(recv, want) || !slices.Equal(send, input(r, n)) {
						return fmt.Errorf("separate buffers: wrong result or send modified")
					}
					same := input(r, n)
					if err := collectives.AllreduceInto(ctx, e, same, same, reduce.Sum); err != nil {
						return err
					}
					if !slices.Equal(same, want) {
						return fmt.Errorf("same buffer: wrong result")
					}
					// recv starts one element into send: the ring must not
					// receive into what it still has to send.
					both := append(input(r, n), 0)
					if err := collectives.AllreduceInto(ctx, e, both[:n], both[1:], reduce.Sum); err != nil {
						return err
					}
					if !slices.Equal(both[1:], want) {
						return fmt.Errorf("overlapping buffers: wrong result")
					}
					return nil
				})
				requireAllOK(t, errs)
			})
		}
	}
}

// TestAllreduceIntoLengths: a recv of the wrong length is the caller's
// error, naming both lengths, and the other ranks hear of it.
func TestAllreduceIntoLengths(t *testing.T) {
	t.Parallel()
	errs := world(t, 2, coltest.Options{}, ringOpts(-1), func(ctx context.Context, e *collectives.Engine, r int) error {
		recv := make([]float64, 4)
		if r == 1 {
			recv = recv[:3]
		}
		return collectives.AllreduceInto(ctx, e, make([]float64, 4), recv, reduce.Sum)
	})
	require.ErrorIs(t, errs[1], collectives.ErrInvalidArgument)
	require.ErrorContains(t, errs[1], "recv has 3 elements, want 4")
	require.Error(t, errs[0])
}

// TestAllreduceIntoRecursiveDoublingKeepsOrder: recursive doubling into a
// separate buffer keeps rank order for an op that is not commutative, and
// gives the very bits of the in-place call (it combines the same operands
// in the same order), on powers of two and on ranks that fold.
func TestAllreduceIntoRecursiveDoublingKeepsOrder(t *testing.T) {
	t.Parallel()
	for _, p := range []int{1, 2, 3, 4, 5, 8} {
		for _, n := range []int{0, 1, 7, 1000} {
			t.Run(name("p", p, "n", n), func(t *testing.T) {
				into, inPlace := make([][]float32, p), make([][]float32, p)
				errs := world(t, p, coltest.Options{}, force(collectives.CollAllreduce, collectives.RecursiveDoubling), func(ctx context.Context, e *collectives.Engine, r int) error {
					// Every call runs before any check, so that a wrong
					// result fails the test at once instead of leaving the
					// other ranks waiting for this one's next call.
					send, recv := ncInput(r, n), make([]int32, n)
					if err := collectives.AllreduceInto(ctx, e, send, recv, lastNonZero); err != nil {
						return err
					}
					into[r] = make([]float32, n)
					if err := collectives.AllreduceInto(ctx, e, randInput(r, n), into[r], reduce.Sum); err != nil {
						return err
					}
					inPlace[r] = randInput(r, n)
					if err := collectives.Allreduce(ctx, e, inPlace[r], reduce.Sum); err != nil {
						return err
					}
					if err := eq32("into", recv, ncFold(0, p, n)); err != nil {
						return err
					}
					return eq32("send", send, ncInput(r, n))
				})
				requireAllOK(t, errs)
				for r := range p {
					require.NoError(t, bitsEqual(into[r], inPlace[0]), "rank %d into vs rank 0 in place", r)
				}
			})
		}
	}
}
