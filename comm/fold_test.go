package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// The reductions that fold messages into their buffer as they arrive
// (p2p's fold receives: binomial reduce, ring reduce-scatter) give the
// exact sums over the real transports, with payloads that go eager,
// pipelined (folded fragment by fragment) and by rendezvous (above p2p's
// FoldLimit: into the engine's scratch memory, then folded): 2 KiB, 48
// and 200 KiB, 600 KiB of int64s.
func TestFoldReceiveTransports(t *testing.T) {
	if testing.Short() {
		t.Skip("large messages")
	}
	sizes := []int{2 << 10 / 8, 48 << 10 / 8, 200 << 10 / 8, 600 << 10 / 8}
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			o := comm.Options{Transport: tr, Collectives: collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{
				collectives.CollReduce:        collectives.Binomial,
				collectives.CollReduceScatter: collectives.Ring,
			}}}
			runOK(t, 3, o, func(ctx context.Context, c *comm.Comm) error {
				p, me := c.Size(), c.Rank()
				for _, n := range sizes {
					buf := input(me, n, 1)
					if err := comm.Reduce(ctx, c, buf, comm.Sum, 2); err != nil {
						return fmt.Errorf("reduce of %d elements: %w", n, err)
					}
					if me == 2 {
						if err := eq(fmt.Sprintf("reduce of %d elements", n), buf, fold(p, n, 1, p, add)); err != nil {
							return err
						}
					}
					m := n / p
					out := make([]int64, m)
					if err := comm.ReduceScatter(ctx, c, input(me, m*p, 2), out, comm.Sum); err != nil {
						return fmt.Errorf("reduce-scatter of %d elements: %w", m*p, err)
					}
					if err := eq(fmt.Sprintf("reduce-scatter of %d elements", m*p), out, fold(p, m*p, 2, p, add)[me*m:(me+1)*m]); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}
