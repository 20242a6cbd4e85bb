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
	})
}
