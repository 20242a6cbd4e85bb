package collectives_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

// TestActivityNamesTheLateRank: while rank 0 waits in a barrier that rank
// 1 has not entered, rank 0's Activity names the barrier, its sequence
// number, the algorithm, rank 1 and when it began waiting; once rank 1
// arrives, the call is over.
func TestActivityNamesTheLateRank(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "msg", true: "shm"}[shared], func(t *testing.T) {
			wo := coltest.Options{Shared: shared}
			eo := collectives.Options{}
			if shared {
				eo = force(collectives.CollBarrier, collectives.SharedMemory)
			}
			zero := make(chan *collectives.Engine, 1)
			var seen collectives.Activity
			var e0 *collectives.Engine
			var entered time.Time // when rank 0 is about to enter call #2
			errs := world(t, 2, wo, eo, func(ctx context.Context, e *collectives.Engine, rank int) error {
				if rank == 0 {
					e0 = e
					if a := e.Activity(); a != (collectives.Activity{Peer: -1}) {
						t.Errorf("Activity before any call = %+v", a)
					}
					if err := collectives.Barrier(ctx, e); err != nil { // #1, both ranks
						return err
					}
					entered = time.Now() // rank 1 reads it after receiving e
					zero <- e
					return collectives.Barrier(ctx, e) // #2: rank 1 comes late
				}
				if err := collectives.Barrier(ctx, e); err != nil {
					return err
				}
				var peer0 *collectives.Engine
				select {
				case peer0 = <-zero:
				case <-ctx.Done():
					return ctx.Err()
				}
				// Wait (bounded by ctx) until rank 0 is in call #2 and knows whom it waits for.
				for {
					seen = peer0.Activity()
					if seen.Running && seen.Seq == 2 && seen.Peer >= 0 {
						break
					}
					if ctx.Err() != nil {
						return ctx.Err()
					}
					time.Sleep(time.Millisecond) // polling a condition, not synchronising
				}
				// Since is when the call began waiting, read once: it stays
				// put while the call waits (a report's own time would not).
				if seen.Since.Before(entered) {
					t.Errorf("Since %v is before rank 0 entered call #2 (%v)", seen.Since, entered)
				}
				for time.Since(seen.Since) < 20*time.Millisecond && ctx.Err() == nil {
					time.Sleep(time.Millisecond) // polling a condition, not synchronising
				}
				if later := peer0.Activity(); later.Seq == 2 && later.Running && !later.Since.Equal(seen.Since) {
					t.Errorf("Since moved while call #2 waited: %v, then %v", seen.Since, later.Since)
				}
				return collectives.Barrier(ctx, e)
			})
			requireAllOK(t, errs)
			require.Equal(t, "barrier", seen.Op)
			require.Equal(t, 1, seen.Peer)
			require.NotEqual(t, "auto", seen.Algorithm)
			require.WithinDuration(t, time.Now(), seen.Since, 20*time.Second)
			after := e0.Activity()
			require.False(t, after.Running)
			require.Equal(t, uint32(2), after.Seq)
		})
	}
}
