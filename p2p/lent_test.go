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
// lent pair where the link is free (its payload written from the sender's
// buffer, counted in LentSent), and the sender may reuse its buffer as
// soon as the send has completed: every message arrives as it was, at
// eager and pipelined sizes, sent from one buffer rewritten in between.
// Each message waits for the receiver's word that the one before arrived,
// so the link is idle when it is posted: from the second round on, the
// eager ones at least are lent. Over shm (no such capability) nothing is.
func TestLentSends(t *testing.T) {
	sizes := []int{1000, 4 << 10, 60 << 10, 200 << 10}
	const rounds = 3
	for _, prov := range []string{"tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			o := p2ptest.Options{Provider: prov, Timeout: 30 * time.Second}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 0 {
					buf := make([]byte, 200<<10)
					for round := range rounds {
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
							if _, err := ep.Recv(ctx, 1, 99, nil); err != nil {
								return err
							}
						}
					}
					ps := ep.Stats().Peers[1]
					if prov == "tcp" {
						// Of a round's 4 KiB and 60 KiB messages and 200
						// KiB's four fragments (1000 bytes are copied).
						assert.GreaterOrEqual(t, ps.LentSent.Msgs, uint64(2*(rounds-1)), "lent frames")
						assert.LessOrEqual(t, ps.LentSent.Msgs, uint64(rounds*(1+1+4)), "lent frames")
					} else {
						assert.Zero(t, ps.LentSent.Msgs, "lent frames over shm")
					}
					return nil
				}
				buf := make([]byte, 200<<10)
				for round := range rounds {
					for i, n := range sizes {
						st, err := ep.Recv(ctx, 0, i, buf)
						if err != nil {
							return err
						}
						if st.Count != n || !bytes.Equal(buf[:n], pattern(n, byte(round*10+i))) {
							return fmt.Errorf("round %d, message %d (%d bytes): payload differs", round, i, n)
						}
						if err := ep.Send(ctx, 0, 99, nil); err != nil {
							return err
						}
					}
				}
				return nil
			})
		})
	}
}
