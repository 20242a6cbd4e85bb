package p2p_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestAllocWindowMapped: a window of provider memory has all its pages
// mapped when AllocWindow returns, on its owner and, once a peer maps it
// (Direct), on that peer too, rather than a page at a time at first use
// (the shm rings' first lap paid that).
func TestAllocWindowMapped(t *testing.T) {
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := ep.AllocWindow(ctx, 256<<10)
		if err != nil {
			return err
		}
		defer w.Close(ctx)
		mapped := func(what string, b []byte) error {
			p, err := ntcopy.Present(b)
			if err != nil {
				return err
			}
			if i := slices.Index(p, false); i >= 0 || len(p) != 64 {
				return fmt.Errorf("%s: page %d of %d not mapped", what, i, len(p))
			}
			return nil
		}
		if err := mapped("own window", w.Bytes()); err != nil {
			return err
		}
		if err := mapped("the peer's window", w.Direct(1-ep.Rank())); err != nil {
			return err
		}
		return nil
	})
}
