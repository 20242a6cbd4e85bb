package verbstest_test

import (
	"context"
	"testing"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/loop"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

// TestLoop runs the suite against the in-process provider, so the suite
// itself is exercised by this package's tests.
func TestLoop(t *testing.T) {
	verbstest.Run(t, verbstest.Options{
		Open: func(ctx context.Context) (verbs.Device, error) {
			return loop.Open(ctx, loop.Options{})
		},
		Skip: map[string]string{
			// Known provider bug, reported: softrc's requester fails a request
			// with RETRY_EXC_ERR when its whole execution takes longer than
			// timeout×(retry_cnt+1), although the peer is alive and making
			// progress (real RC acknowledges per packet).
			"Ops/Large": "softrc: ACK timer spans the whole 64 MiB request, so a live peer fails with RETRY_EXC_ERR",
		},
	})
}
