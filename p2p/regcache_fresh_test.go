package p2p_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
)

// TestRegCacheKeepsFewOverSoftware: over providers whose registration is a
// table entry (verbs.SoftRegCache), rendezvous messages from and into
// buffers allocated anew for each leave at most that many registrations
// cached, each of which keeps its buffer alive (with 64, a 2 MiB Send and
// Recv between new buffers took 25 times as long as between the same
// ones); an explicit Options.RegCacheEntries still wins.
func TestRegCacheKeepsFewOverSoftware(t *testing.T) {
	const msgs, size = 12, 512 << 10 // a rendezvous over every provider here
	for _, tc := range []struct {
		prov string
		set  int
		want int
	}{
		{"loop", 0, verbs.SoftRegCache},
		{"shm", 0, verbs.SoftRegCache},
		{"tcp", 0, verbs.SoftRegCache},
		{"loop", 10, 10},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.prov, tc.set), func(t *testing.T) {
			p, err := verbs.Lookup(tc.prov)
			require.NoError(t, err)
			require.Equal(t, verbs.SoftRegCache, p.Traits().RegCache)
			o := p2ptest.Options{Provider: tc.prov, P2P: p2p.Options{RegCacheEntries: tc.set}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				for i := range msgs {
					buf := make([]byte, size)
					if ep.Rank() == 0 {
						buf[size-1] = byte(i)
						if err := ep.Send(ctx, 1, i, buf); err != nil {
							return err
						}
					} else if _, err := ep.Recv(ctx, 0, i, buf); err != nil {
						return err
					} else if buf[size-1] != byte(i) {
						return fmt.Errorf("message %d: last byte %d", i, buf[size-1])
					}
				}
				// A last exchange, so that the sender's rendezvous have
				// all been read and released.
				if ep.Rank() == 1 {
					if err := ep.Send(ctx, 0, 99, nil); err != nil {
						return err
					}
				} else if _, err := ep.Recv(ctx, 1, 99, nil); err != nil {
					return err
				}
				s := ep.Stats()
				if s.RegMisses < msgs || s.RegEntries > tc.want {
					return fmt.Errorf("%d registrations cached after %d misses, want at most %d", s.RegEntries, s.RegMisses, tc.want)
				}
				return nil
			})
		})
	}
}
