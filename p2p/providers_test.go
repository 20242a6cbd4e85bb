package p2p_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	_ "github.com/rdmago/rdmago/verbs/shm"
	_ "github.com/rdmago/rdmago/verbs/tcp"
)

var allProviders = []string{"loop", "tcp", "shm", "auto"}

// The main exchange patterns over every provider: both protocols, flow
// control, wildcards, and a mix of sizes, between 3 ranks.
func TestProviders(t *testing.T) {
	for _, prov := range allProviders {
		t.Run(prov, func(t *testing.T) {
			o := p2ptest.Options{Provider: prov, P2P: p2p.Options{EagerLimit: 1024, EagerSlots: 8}}
			p2ptest.Run(t, 3, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if prov == "auto" {
					for r := range ep.Size() {
						if want := map[bool]string{true: "self", false: "shm"}[r == ep.Rank()]; ep.Transport(r) != want {
							return fmt.Errorf("auto transport to rank %d is %q, want %q", r, ep.Transport(r), want)
						}
					}
				}
				sizes := []int{0, 1, 1024, 1025, 100_000, 1<<20 + 3}
				right, left := (ep.Rank()+1)%ep.Size(), (ep.Rank()+ep.Size()-1)%ep.Size()
				var reqs []*p2p.Request
				for i, n := range sizes {
					for k := range 3 {
						r, err := ep.Isend(right, i, pattern(n, byte(k+ep.Rank())))
						if err != nil {
							return err
						}
						reqs = append(reqs, r)
					}
				}
				for i, n := range sizes {
					for k := range 3 {
						buf := make([]byte, n)
						st, err := ep.Recv(ctx, p2p.AnySource, i, buf)
						if err != nil {
							return err
						}
						if st.Source != left || st.Count != n || !bytes.Equal(buf, pattern(n, byte(k+left))) {
							return fmt.Errorf("size %d #%d: wrong message (status %+v)", n, k, st)
						}
					}
				}
				return p2p.WaitAll(ctx, reqs...)
			})
		})
	}
}
