//go:build !race

// The race detector allocates on its own: these tests run without it.

package comm

import (
	"context"
	"testing"
	"time"
)

// TestWindowAllocatesNothing: the OSU message-rate loop (a window of
// Irecvs and Isends of 8 bytes over shm, WaitAll, then Release or
// ReleaseAll) allocates nothing in steady state, its start and wait ctx
// carrying a deadline as a user's would: comm's request rides with the
// recycled p2p request, and neither layer makes a second object per
// message.
func TestWindowAllocatesNothing(t *testing.T) {
	const window = 16
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	comms := initPair(t, "shm")
	s, r := make([]byte, 8), make([]byte, 8)
	reqs := make([]*Request, 0, 2*window)
	for _, all := range []bool{false, true} {
		var loopErr error
		step := func() {
			reqs = reqs[:0]
			for range window {
				rr, err := Irecv(ctx, comms[1], r, 0, 1)
				if err != nil {
					loopErr = err
					return
				}
				rs, err := Isend(ctx, comms[0], s, 1, 1)
				if err != nil {
					loopErr = err
					return
				}
				reqs = append(reqs, rr, rs)
			}
			if err := WaitAll(ctx, reqs...); err != nil {
				loopErr = err
				return
			}
			if all {
				ReleaseAll(reqs...)
				return
			}
			for _, q := range reqs {
				q.Release()
			}
		}
		step()
		if allocs := testing.AllocsPerRun(50, step); allocs != 0 || loopErr != nil {
			t.Errorf("ReleaseAll %v: %v allocations per window of %d messages (err %v)", all, allocs, window, loopErr)
		}
	}
}
