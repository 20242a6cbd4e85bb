//go:build linux

package shm_test

import (
	"context"
	"testing"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/shm"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

func TestConformance(t *testing.T) {
	verbstest.Run(t, verbstest.Options{
		Open: func(ctx context.Context) (verbs.Device, error) {
			return shm.Open(ctx, shm.Options{DeviceOptions: verbs.DeviceOptions{Token: []byte("conformance")}})
		},
		TwoProcess: true,
	})
}
