package p2p_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// Over tcp an eager frame or pipelined fragment of 4 KiB or more goes as a
// lent pair (its payload written from the sender's buffer, counted in
// LentSent), and the sender may reuse its buffer as soon as the send has
// completed: every message arrives as it was, at eager and pipelined
// sizes, sent back to back from one buffer rewritten in between. Over shm
// (no such capability) nothing is lent.
func TestLentSends(t *testing.T) {
	sizes := []int{1000, 4 << 10, 60 << 10, 200 << 10}
	for _, prov := range []string{"tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			o := p2ptest.Options{Provider: prov, Timeout: 30 * time.Second}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 0 {
					buf := make([]byte, 200<<10)
					for round := range 3 {
						for i, n := range sizes {
							copy(buf, pattern(n, byte(round*10+i)))
							r, err := ep.Isend(1, i, buf[:n])
							if err != nil {
								return err
							}
							if _, err := r.Wait(ctx); err != nil {
								return err
							}
							clear(buf[:n]) // the buffer is the sender's again
						}
					}
					if _, err := ep.Recv(ctx, 1, 99, nil); err != nil {
						return err
					}
					ps := ep.Stats().Peers[1]
					if prov == "tcp" {
						// A round: the 4 KiB and 60 KiB messages, and the four
						// fragments of 200 KiB; 1000 bytes are copied.
						assert.Equal(t, uint64(3*(1+1+4)), ps.LentSent.Msgs, "lent frames")
					} else {
						assert.Zero(t, ps.LentSent.Msgs, "lent frames over shm")
					}
					return nil
				}
				buf := make([]byte, 200<<10)
				for round := range 3 {
					for i, n := range sizes {
						st, err := ep.Recv(ctx, 0, i, buf)
						if err != nil {
							return err
						}
						if st.Count != n || !bytes.Equal(buf[:n], pattern(n, byte(round*10+i))) {
							return fmt.Errorf("round %d, message %d (%d bytes): payload differs", round, i, n)
						}
					}
				}
				return ep.Send(ctx, 0, 99, nil)
			})
		})
	}
}
