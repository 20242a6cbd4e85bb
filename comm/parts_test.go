package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// Collective messages whose payload travels with its header (up to the
// pair's inline limit) go in parts over the real transports (p2p's
// IsendParts and IrecvParts: the header and the payload each from and into
// its own place), and arrive whole: blocks of 300 B (the shm ring), 5000 B
// (over tcp a lent pair) and 20 KiB, through alltoall, allgather and bcast.
func TestPartsTransports(t *testing.T) {
	blocks := []int{300 / 8, 5000 / 8, 20 << 10 / 8}
	for _, tr := range []string{"tcp", "shm"} {
		t.Run(tr, func(t *testing.T) {
			o := comm.Options{Transport: tr, Collectives: collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{
				collectives.CollAlltoall:  collectives.Linear,
				collectives.CollAllgather: collectives.Ring,
				collectives.CollBcast:     collectives.Binomial,
			}}}
			runOK(t, 3, o, func(ctx context.Context, c *comm.Comm) error {
				p, me := c.Size(), c.Rank()
				for _, n := range blocks {
					send := make([]int64, p*n)
					for d := range p {
						copy(send[d*n:], input(me*p+d, n, 1))
					}
					recv := make([]int64, p*n)
					if err := comm.Alltoall(ctx, c, send, recv); err != nil {
						return fmt.Errorf("alltoall of %d-element blocks: %w", n, err)
					}
					for s := range p {
						if err := eq(fmt.Sprintf("alltoall block from rank %d (%d elements)", s, n), recv[s*n:(s+1)*n], input(s*p+me, n, 1)); err != nil {
							return err
						}
					}
					if err := comm.Allgather(ctx, c, input(me, n, 2), recv); err != nil {
						return fmt.Errorf("allgather of %d-element blocks: %w", n, err)
					}
					for s := range p {
						if err := eq(fmt.Sprintf("allgather block of rank %d (%d elements)", s, n), recv[s*n:(s+1)*n], input(s, n, 2)); err != nil {
							return err
						}
					}
					buf := make([]int64, n)
					if me == 1 {
						copy(buf, input(1, n, 3))
					}
					if err := comm.Bcast(ctx, c, buf, 1); err != nil {
						return fmt.Errorf("bcast of %d elements: %w", n, err)
					}
					if err := eq(fmt.Sprintf("bcast of %d elements", n), buf, input(1, n, 3)); err != nil {
						return err
					}
				}
				st := c.Stats()
				for r := range p {
					if r != me {
						assert.Positive(t, st.Peers[r].PartsSent.Msgs, "rank %d: messages in parts to rank %d", me, r)
					}
				}
				return nil
			})
		})
	}
}
