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
			return tcp.Open(ctx, tcp.Options{Token: []byte("verbstest"), ConnectTimeout: 2 * time.Second})
		},
		TwoProcess: true,
		Skip: map[string]string{
			// Known provider bug, reported: a class C NAK (REM_ACCESS_ERR,
			// REM_INV_REQ_ERR) is intermittently lost when the responder drops
			// the link on entering ERR; the requester then sees RETRY_EXC_ERR.
			"Errors": "tcp: NAK intermittently lost when the responder enters ERR (RETRY_EXC_ERR instead of the NAK status)",
		},
	})
}
