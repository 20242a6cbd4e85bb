package verbstest_test

import (
	"context"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/tcp"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

// TestTCP runs the suite, two-process cases included, against the TCP
// provider on loopback.
func TestTCP(t *testing.T) {
	verbstest.Run(t, verbstest.Options{
		Open: func(ctx context.Context) (verbs.Device, error) {
			return tcp.Open(ctx, tcp.Options{Token: []byte("verbstest"), ConnectTimeout: 10 * time.Second})
		},
		TwoProcess: true,
	})
}
