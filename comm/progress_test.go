package comm_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/comm"
)

// TestNonBlockingProgressWithoutWait: a started non-blocking collective
// makes progress while its caller neither waits for nor tests it. Rank 0
// starts an Iallreduce (then an Ibcast it is the root of) and only sleeps
// on a channel until rank 1's blocking call of the same collective has
// returned, which it can only do once rank 0's part has run; then rank 0
// waits and checks its own result. Small and large counts take different
// algorithms (several steps, rendezvous transfers). If progress happened
// only inside Wait or Test, rank 1 would never return and the test would
// fail at its timeout.
func TestNonBlockingProgressWithoutWait(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			var peerDone [2]chan struct{}
			for i := range peerDone {
				peerDone[i] = make(chan struct{})
			}
			runOK(t, 2, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				me := c.Rank()
				for i, n := range []int{3, 200_000} {
					buf := input(me, n, i)
					bc := make([]int64, n)
					if me == 0 {
						bc = input(7, n, i)
					}
					if me == 1 {
						if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
							return err
						}
						if err := comm.Bcast(ctx, c, bc, 0); err != nil {
							return err
						}
						close(peerDone[i])
					} else {
						ra, err := comm.Iallreduce(ctx, c, buf, comm.Sum)
						if err != nil {
							return err
						}
						rb, err := comm.Ibcast(ctx, c, bc, 0)
						if err != nil {
							return err
						}
						wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
						select {
						case <-peerDone[i]:
						case <-wctx.Done():
							cancel()
							return fmt.Errorf("n=%d: rank 1's Allreduce and Bcast did not return while rank 0 did not wait: no progress outside Wait", n)
						}
						cancel()
						if err := comm.WaitAll(ctx, ra, rb); err != nil {
							return err
						}
					}
					if err := eq(fmt.Sprintf("n=%d allreduce", n), buf, fold(2, n, i, 2, add)); err != nil {
						return err
					}
					if err := eq(fmt.Sprintf("n=%d bcast", n), bc, input(7, n, i)); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
