package p2p_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// An eager message that arrives before its receive is posted is copied
// aside; the copies are recycled, so a run of them does not allocate one
// payload per message (which cost a garbage collection every few dozen
// 64 KiB messages and the pages' return to the kernel). Rank 1 receives
// each message only once Probe has seen it arrive, and acknowledges it
// before rank 0 sends the next, so every message is unexpected and at
// most one copy is alive at a time.
//
// The same for a message sent as a train of eager fragments (tcp's
// PipelineLimit, above the eager limit): the buffer that gathers them
// until the receive is posted is recycled too.
func TestUnexpectedEagerCopiesRecycled(t *testing.T) {
	for _, tc := range []struct {
		prov string
		pipe bool
	}{{"loop", false}, {"tcp", false}, {"tcp", true}} {
		name := tc.prov
		if tc.pipe {
			name += "-pipelined"
		}
		t.Run(name, func(t *testing.T) {
			const rounds, warm = 40, 4
			var perMsg uint64
			var size int
			o := p2ptest.Options{Provider: tc.prov}
			if tc.pipe {
				o.P2P.EagerLimit, o.P2P.PipelineLimit = 16<<10, 256<<10
			}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				n := min(ep.EagerLimit(1-ep.Rank()), 48<<10)
				if tc.pipe {
					n = 200 << 10
				}
				if n < 8<<10 {
					return fmt.Errorf("eager limit %d too small for this test", n)
				}
				var ack [1]byte
				msg := pattern(n, 3)
				if ep.Rank() == 0 {
					for range rounds {
						if err := ep.Send(ctx, 1, 5, msg); err != nil {
							return err
						}
						if _, err := ep.Recv(ctx, 1, 6, ack[:]); err != nil {
							return err
						}
					}
					return nil
				}
				buf := make([]byte, n)
				var ms runtime.MemStats
				var before uint64
				for i := range rounds {
					if i == warm {
						runtime.ReadMemStats(&ms)
						before = ms.TotalAlloc
					}
					if _, err := ep.Probe(ctx, 0, 5); err != nil {
						return err
					}
					st, err := ep.Recv(ctx, 0, 5, buf)
					if err != nil {
						return err
					}
					if st.Count != n || !bytes.Equal(buf, msg) {
						return fmt.Errorf("round %d: got %d bytes, want %d of the pattern", i, st.Count, n)
					}
					clear(buf)
					if err := ep.Send(ctx, 0, 6, ack[:]); err != nil {
						return err
					}
				}
				runtime.ReadMemStats(&ms)
				perMsg = (ms.TotalAlloc - before) / (rounds - warm)
				size = n
				return nil
			})
			// Both ranks and the providers allocate a little per message;
			// a fresh copy of each payload would be at least its size.
			require.Less(t, perMsg, uint64(size/2), "bytes allocated per %d-byte unexpected message", size)
		})
	}
}
