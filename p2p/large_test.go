//go:build !race

package p2p_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestLargeP2P sends messages on both sides of every protocol limit of
// each provider (eager, pipelined, rendezvous; the READ's chunk and
// whole-read sizes; the ring's inline size) and a multi-megabyte one, with
// the receive posted first and arriving unexpected, and checks every byte
// and which protocol carried each message (the per-peer counters). The
// sizes come from the endpoint (ProtocolLimits), so they follow tuning.
// Without -race only (test.sh runs it in its -run Large step).
func TestLargeP2P(t *testing.T) {
	if testing.Short() {
		t.Skip("large messages")
	}
	for _, prov := range []string{"loop", "tcp", "shm"} {
		for _, mode := range []string{"posted", "unexpected"} {
			t.Run(prov+"/"+mode, func(t *testing.T) {
				o := p2ptest.Options{Provider: prov, Timeout: 60 * time.Second}
				p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
					peer := 1 - ep.Rank()
					eager, pipe, whole, shapes := ep.ProtocolLimits(peer)
					var sizes []int
					for _, l := range append([]int{eager, pipe, whole}, shapes...) {
						if l > 0 && l <= 8<<20 { // a READ chunk of maxRead means "whole"
							sizes = append(sizes, l, l+1)
						}
					}
					sizes = append(sizes, 3<<20+5) // several MiB, odd
					slices.Sort(sizes)
					sizes = slices.Compact(sizes)
					want := func(n int) string {
						switch {
						case n <= eager && (whole == 0 || n <= whole):
							return "eager"
						case n <= max(eager, pipe):
							return "pipelined" // steered whole, when within eager
						}
						return "rendezvous"
					}
					if ep.Rank() == 0 {
						if mode == "unexpected" {
							// The receiver posts its receives only after the
							// note sent behind every message.
							var reqs []*p2p.Request
							for i, n := range sizes {
								r, err := ep.Isend(peer, i, pattern(n, byte(i)))
								if err != nil {
									return err
								}
								reqs = append(reqs, r)
							}
							if err := ep.Send(ctx, peer, 1000, nil); err != nil {
								return err
							}
							for _, r := range reqs {
								if _, err := r.Wait(ctx); err != nil {
									return err
								}
							}
						} else {
							for i, n := range sizes {
								if err := ep.Send(ctx, peer, i, pattern(n, byte(i))); err != nil {
									return err
								}
							}
						}
						if _, err := ep.Recv(ctx, peer, 1001, nil); err != nil { // the receiver has checked everything
							return err
						}
						ps := ep.Stats().Peers[peer]
						count := map[string]uint64{}
						for _, n := range sizes {
							count[want(n)]++
						}
						if mode == "unexpected" {
							count["eager"]++ // the note
						}
						got := map[string]uint64{"eager": ps.EagerSent.Msgs, "pipelined": ps.PipeSent.Msgs, "rendezvous": ps.RndvSent.Msgs}
						for _, k := range []string{"eager", "pipelined", "rendezvous"} {
							if got[k] != count[k] {
								return fmt.Errorf("%s: %d messages sent %s, want %d (sizes %v, eager %d, pipelined %d)", prov, got[k], k, count[k], sizes, eager, pipe)
							}
						}
						return nil
					}
					if mode == "unexpected" {
						if _, err := ep.Recv(ctx, peer, 1000, nil); err != nil {
							return err
						}
					}
					for i, n := range sizes {
						buf := make([]byte, n)
						st, err := ep.Recv(ctx, peer, i, buf)
						if err != nil {
							return fmt.Errorf("message %d (%d bytes): %w", i, n, err)
						}
						if st.Count != n {
							return fmt.Errorf("message %d: %d bytes, want %d", i, st.Count, n)
						}
						if exp := pattern(n, byte(i)); !bytes.Equal(buf, exp) {
							j := 0
							for buf[j] == exp[j] {
								j++
							}
							return fmt.Errorf("%s message %d (%d bytes, %s): byte %d is %d, want %d", prov, i, n, want(n), j, buf[j], exp[j])
						}
					}
					return ep.Send(ctx, peer, 1001, nil)
				})
			})
		}
	}
}
