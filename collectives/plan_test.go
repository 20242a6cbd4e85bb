package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// TestPlanAllreduce: a plan of each allreduce algorithm, run several times
// over one buffer, gives a plain call's result each time and runs the
// algorithm it chose; plain calls in between keep their place.
func TestPlanAllreduce(t *testing.T) {
	for _, alg := range collectives.Algorithms(collectives.CollAllreduce) {
		for _, p := range []int{1, 3, 4} {
			t.Run(name("alg", alg, "p", p), func(t *testing.T) {
				const n = 3000
				errs := world(t, p, worldFor(alg, p), force(collectives.CollAllreduce, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
					buf := make([]float64, n)
					plan := collectives.PlanAllreduce(e, buf, reduce.Sum)
					if err := plan.Err(); err != nil {
						return err
					}
					if plan.Algorithm() != alg {
						return fmt.Errorf("plan chose %v, forced %v", plan.Algorithm(), alg)
					}
					for run := range 3 {
						copy(buf, input(r, n))
						if err := plan.Run(ctx); err != nil {
							return fmt.Errorf("run %d: %w", run, err)
						}
						if err := checkAlg(e, alg); err != nil {
							return err
						}
						if !slices.Equal(buf, refSum(p, n)) {
							return fmt.Errorf("run %d: wrong sum", run)
						}
						if err := collectives.Barrier(ctx, e); err != nil {
							return err
						}
					}
					return nil
				})
				requireAllOK(t, errs)
			})
		}
	}
}

// TestPlanBadArguments: a plan with an op its type lacks reports it at
// once, and each Run fails on every rank, the others included, instead of
// leaving them waiting.
func TestPlanBadArguments(t *testing.T) {
	const p = 3
	errs := world(t, p, worldFor(collectives.Auto, p), collectives.Options{}, func(ctx context.Context, e *collectives.Engine, r int) error {
		op := reduce.Sum
		if r == 1 {
			op = reduce.BAnd
		}
		plan := collectives.PlanAllreduce(e, make([]float32, 8), op)
		if (plan.Err() != nil) != (r == 1) {
			return fmt.Errorf("rank %d: Err() = %v", r, plan.Err())
		}
		for run := range 2 {
			err := plan.Run(ctx)
			if err == nil {
				return fmt.Errorf("run %d succeeded", run)
			}
			if r == 1 && !errors.Is(err, collectives.ErrUnsupported) {
				return fmt.Errorf("run %d on rank 1: %v", run, err)
			}
		}
		return collectives.Barrier(ctx, e)
	})
	requireAllOK(t, errs)
}
