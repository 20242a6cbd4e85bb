package loop

import (
	"context"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

func TestConformance(t *testing.T) {
	verbstest.Run(t, verbstest.Options{
		Open: func(ctx context.Context) (verbs.Device, error) {
			return Open(ctx, Options{ConnectTimeout: 5 * time.Second})
		},
	})
}
