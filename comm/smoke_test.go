package comm_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/comm"
)

func TestSmoke(t *testing.T) {
	runOK(t, 4, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		buf := []float32{float32(c.Rank()), 1}
		if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
			return err
		}
		if buf[0] != 6 || buf[1] != 4 {
			return fmt.Errorf("got %v", buf)
		}
		return nil
	})
}
