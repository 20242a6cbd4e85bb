package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// TestSerializedEngineUnderAbortsAndProbes: with Options.Serialized a
// call's own takes of the Engine's lock are plain stores, and the
// watchers (aborts from peers, stall probes) and the probe timer take it
// the other way while calls run. Calls keep their results, every
// disagreement fails every rank, and the call after it works.
func TestSerializedEngineUnderAbortsAndProbes(t *testing.T) {
	t.Parallel()
	const p, calls, every = 3, 400, 40
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) {
			t.Parallel()
			// Probes every 20 µs: the timer and the peers' status messages
			// take the lock beside nearly every call.
			eo := collectives.Options{Serialized: true, StallProbe: 20 * time.Microsecond}
			run := serializedRun(p, calls, every)
			// A lock the watchers never get hangs Close, past world's
			// deadline: the test gives up waiting instead.
			done := make(chan []error, 1)
			go func() { done <- world(t, p, coltest.Options{Shared: shared}, eo, run) }()
			var errs []error
			select {
			case errs = <-done:
			case <-time.After(90 * time.Second):
				t.Fatal("the calls or Close did not return")
			}
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
		})
	}
}

// serializedRun is each rank's part: calls allreduces, checked, every
// every-th from its middle with another count on rank 1.
func serializedRun(p, calls, every int) func(ctx context.Context, e *collectives.Engine, r int) error {
	return func(ctx context.Context, e *collectives.Engine, r int) error {
		for i := range calls {
			n := 5
			odd := i%every == every/2 // never the last call, after which the ranks close
			if odd && r == 1 {
				n = 6
			}
			buf := make([]int32, n)
			for k := range buf {
				buf[k] = int32(r + i + k)
			}
			err := collectives.Allreduce(ctx, e, buf, reduce.Sum)
			if odd {
				if !errors.Is(err, collectives.ErrMismatch) {
					return fmt.Errorf("call %d: got %v, want a mismatch", i, err)
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
			for k, v := range buf {
				if want := int32(p*(i+k) + p*(p-1)/2); v != want {
					return fmt.Errorf("call %d: element %d is %d, want %d", i, k, v, want)
				}
			}
		}
		return nil
	}
}
