package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/p2p"
)

// TestCollectiveInlineOverTCP: over tcp, whose eager messages hold 256
// KiB, a bcast payload of up to 256 KiB travels in its header's message,
// one p2p message per call rather than a header and a payload (comm's
// group reports p2p's eager limit to the collectives): one of 64 KiB as a
// PIPE fragment steered whole into the receiver's buffers (p2p's
// steersWhole). 256 KiB itself, the provider's size, fits because the
// default limit leaves room for the header beyond it.
func TestCollectiveInlineOverTCP(t *testing.T) {
	t.Parallel()
	for _, kib := range []int{16, 64, 256} {
		t.Run(fmt.Sprintf("%dKiB", kib), func(t *testing.T) {
			t.Parallel()
			const calls = 5
			o := comm.Options{Transport: "tcp", Collectives: collectives.Options{StallProbe: -1}}
			runOK(t, 2, o, func(ctx context.Context, c *comm.Comm) error {
				buf := make([]float32, kib<<10/4)
				if c.Rank() == 0 {
					for i := range buf {
						buf[i] = float32(i)
					}
				}
				ps := func() p2p.PeerStats { return c.Stats().Peers[1-c.Rank()] }
				before := ps()
				for range calls {
					if err := comm.Bcast(ctx, c, buf, 0); err != nil {
						return err
					}
				}
				after := ps()
				for i, v := range buf {
					if v != float32(i) {
						return fmt.Errorf("element %d is %v", i, v)
					}
				}
				sent := after.EagerSent.Msgs - before.EagerSent.Msgs
				piped := after.PipeSent.Msgs - before.PipeSent.Msgs
				// One message a call: eager, or above 32 KiB steered whole
				// as one PIPE fragment.
				wantSent, wantPiped := uint64(calls), uint64(0)
				if kib > 32 {
					wantSent, wantPiped = 0, calls
				}
				if c.Rank() == 0 && (sent != wantSent || piped != wantPiped) {
					return fmt.Errorf("the root sent %d eager and %d pipelined messages for %d bcasts of %d KiB, want %d and %d",
						sent, piped, calls, kib, wantSent, wantPiped)
				}
				return nil
			})
		})
	}
}
