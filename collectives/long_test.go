package collectives_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// TestLongCrossProduct (RDMAGO_LONG=1 only) adds the element-type × op
// dimension to the grid: every reducing collective × every algorithm ×
// rank counts × sizes × types × every op defined for the type, against a
// serial left fold through the (separately verified) kernels. Values are
// small integers, so every order gives the same result, also for floats.
func TestLongCrossProduct(t *testing.T) {
	if !long {
		t.Skip("RDMAGO_LONG=1 runs the full cross-product")
	}
	t.Parallel()
	crossType[int8](t, "int8")
	crossType[uint16](t, "uint16")
	crossType[int64](t, "int64")
	crossType[float32](t, "float32")
	crossType[float64](t, "float64")
	crossType[reduce.BFloat16](t, "bfloat16")
	crossType[reduce.Float16](t, "float16")
}

func small[T reduce.Element](r, i int) T {
	// 1..7. Sums stay exact everywhere; integer products wrap, which is
	// order-independent; float products of 16 ranks exceed float32's 24
	// bits, but the run is deterministic and passes (and float64 is exact).
	v := (r*5+i*3)%7 + 1
	var z T
	switch any(z).(type) {
	case reduce.BFloat16:
		return T(reduce.BFloat16From(float32(v)))
	case reduce.Float16:
		return T(reduce.Float16From(float32(v)))
	}
	return T(v)
}

func crossType[T reduce.Element](t *testing.T, tname string) {
	dt := reduce.DTypeOf[T]()
	for _, op := range reduce.Builtins {
		if _, err := op.Resolve(dt); err != nil {
			continue // bitwise on floats
		}
		if op.Code() == reduce.OpProd && dt.IsFloat() && dt.Size() == 2 {
			continue // 7^16 is not representable in 16 bits: rounding would depend on order
		}
		for _, coll := range []collectives.Collective{collectives.CollAllreduce, collectives.CollReduce, collectives.CollReduceScatter, collectives.CollScan} {
			for _, alg := range collectives.Algorithms(coll) {
				for _, p := range rankCounts {
					for _, n := range sizes {
						t.Run(name("type", tname, "op", op, "coll", coll, "alg", alg, "p", p, "n", n), func(t *testing.T) {
							errs := world(t, p, worldFor(alg, p), force(coll, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
								return crossCase[T](ctx, e, coll, op, r, p, n)
							})
							requireAllOK(t, errs)
						})
					}
				}
			}
		}
	}
}

func vec[T reduce.Element](r, n int) []T {
	x := make([]T, n)
	for i := range x {
		x[i] = small[T](r, i)
	}
	return x
}

// fold is the serial reference over ranks [0, upto), Avg divided by div.
func fold[T reduce.Element](op reduce.Op, upto, n, div int) ([]T, error) {
	acc := vec[T](0, n)
	for r := 1; r < upto; r++ {
		if err := reduce.Reduce(op, acc, vec[T](r, n)); err != nil {
			return nil, err
		}
	}
	if op.Code() == reduce.OpAvg && div > 0 {
		k, _ := op.Resolve(reduce.DTypeOf[T]())
		k.Finish(reduce.Bytes(acc), div)
	}
	return acc, nil
}

func same[T reduce.Element](what string, got, want []T) error {
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

func crossCase[T reduce.Element](ctx context.Context, e *collectives.Engine, coll collectives.Collective, op reduce.Op, r, p, n int) error {
	switch coll {
	case collectives.CollAllreduce, collectives.CollReduce:
		buf := vec[T](r, n)
		var err error
		if coll == collectives.CollAllreduce {
			err = collectives.Allreduce(ctx, e, buf, op)
		} else {
			err = collectives.Reduce(ctx, e, buf, op, p-1)
			if r != p-1 {
				return err
			}
		}
		if err != nil {
			return err
		}
		want, err := fold[T](op, p, n, p)
		if err != nil {
			return err
		}
		return same(coll.String(), buf, want)
	case collectives.CollReduceScatter:
		recv := make([]T, n)
		if err := collectives.ReduceScatter(ctx, e, vec[T](r, p*n), recv, op); err != nil {
			return err
		}
		want, err := fold[T](op, p, p*n, p)
		if err != nil {
			return err
		}
		return same("reduce_scatter", recv, want[r*n:(r+1)*n])
	default:
		buf := vec[T](r, n)
		if err := collectives.Scan(ctx, e, buf, op); err != nil {
			return err
		}
		want, err := fold[T](op, r+1, n, r+1)
		if err != nil {
			return err
		}
		return same("scan", buf, want)
	}
}

var _ = coltest.Options{}
