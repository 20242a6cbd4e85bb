//go:build !race

package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/comm"
)

// TestLargeCollectives runs every collective of comm (everyCollective,
// each result checked element by element against the serial reference)
// with large vectors over the real transports: tcp (pipelined and
// rendezvous messages, READs in chunks) and shm (the shared-memory
// algorithms' large paths, with the slots of a real region, and the
// single-copy rendezvous). The sizes are odd, so blocks are uneven: about
// 800 KB (past every eager, pipelining and shared-memory cut-off below
// 1 MiB) and, over shm, 3 MiB (past the 1 MiB ones). The thresholds
// themselves are crossed one by one in the collectives and p2p packages'
// Large tests. Without -race only; test.sh runs it in its -run Large step.
func TestLargeCollectives(t *testing.T) {
	if testing.Short() {
		t.Skip("large messages")
	}
	for _, tr := range []string{"tcp", "shm"} {
		// Two ranks take the shared-memory algorithms' two-rank forms;
		// over tcp three suffice (uneven blocks), and the 800 KB size: the
		// 3 MiB one takes 15 s there with the machine loaded, and
		// TestLargeP2P already sends 3 MiB over tcp.
		ps, sizes := []int{2, 3}, []int{100_003, 3<<20/8 + 5}
		if tr == "tcp" {
			ps, sizes = []int{3}, sizes[:1]
		}
		for _, p := range ps {
			t.Run(fmt.Sprintf("%s/ranks=%d", tr, p), func(t *testing.T) {
				runOK(t, p, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
					for _, n := range sizes {
						if err := everyCollective(ctx, c, n); err != nil {
							return fmt.Errorf("n=%d: %w", n, err)
						}
					}
					return nil
				})
			})
		}
	}
}
