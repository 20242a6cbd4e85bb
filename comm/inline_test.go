package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// TestCollectiveInlineOverTCP: over tcp, whose eager messages hold 64
// KiB, a 16 KiB bcast payload travels in its header's message, one p2p
// message per call rather than a header and a payload (comm's group
// reports p2p's eager limit to the collectives).
func TestCollectiveInlineOverTCP(t *testing.T) {
	t.Parallel()
	const calls = 5
	o := comm.Options{Transport: "tcp", Collectives: collectives.Options{StallProbe: -1}}
	runOK(t, 2, o, func(ctx context.Context, c *comm.Comm) error {
		buf := make([]float32, 4096)
		if c.Rank() == 0 {
			for i := range buf {
				buf[i] = float32(i)
			}
		}
		before := c.Stats().Peers[1-c.Rank()].EagerSent.Msgs
		for range calls {
			if err := comm.Bcast(ctx, c, buf, 0); err != nil {
				return err
			}
		}
		sent := c.Stats().Peers[1-c.Rank()].EagerSent.Msgs - before
		for i, v := range buf {
			if v != float32(i) {
				return fmt.Errorf("element %d is %v", i, v)
			}
		}
		if c.Rank() == 0 && sent != calls {
			return fmt.Errorf("the root sent %d messages for %d bcasts of 16 KiB, want one each", sent, calls)
		}
		return nil
	})
}
