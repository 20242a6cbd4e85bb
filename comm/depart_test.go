package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/p2p"
)

// A rank that leaves early (its loop ended one iteration sooner), closes
// its communicator and returns: the others' next collective over shared
// memory must fail at once with ErrClosed naming that rank, as it does
// over p2p, instead of waiting for their context to end.
func TestEarlyCloseSharedMemory(t *testing.T) {
	colls := []struct {
		name string
		fn   func(ctx context.Context, c *comm.Comm) error
	}{
		{"allreduce", func(ctx context.Context, c *comm.Comm) error {
			return comm.Allreduce(ctx, c, []float64{1}, comm.Sum)
		}},
		{"barrier", func(ctx context.Context, c *comm.Comm) error { return comm.Barrier(ctx, c) }},
		{"bcast", func(ctx context.Context, c *comm.Comm) error {
			return comm.Bcast(ctx, c, make([]int64, 1), c.Size()-1)
		}},
		{"bcast-64KiB", func(ctx context.Context, c *comm.Comm) error {
			return comm.Bcast(ctx, c, make([]byte, 64<<10), 0)
		}},
	}
	const p, rounds = 4, 5
	for _, cl := range colls {
		for _, leaver := range []int{0, p - 1} {
			t.Run(fmt.Sprintf("%s/leaver=%d", cl.name, leaver), func(t *testing.T) {
				earlyClose(t, p, rounds, leaver, cl.fn)
			})
		}
	}
}

func earlyClose(t *testing.T, p, rounds, leaver int, fn func(ctx context.Context, c *comm.Comm) error) {
	// The leaver's Close waits up to CloseTimeout for its goodbyes to
	// complete, which peers busy elsewhere may not let them: keep it short.
	o := comm.Options{Transport: "shm", P2P: p2p.Options{CloseTimeout: 200 * time.Millisecond}}
	errs := run(t, p, o, func(ctx context.Context, c *comm.Comm) error {
		// Every rank runs the same calls; then the leaver closes and the
		// others run one more.
		n := rounds
		for i := range n {
			if err := fn(ctx, c); err != nil {
				return fmt.Errorf("call %d: %w", i, err)
			}
		}
		if c.LastAlgorithm() != "shared_memory" {
			return fmt.Errorf("the calls ran %q, not the shared-memory algorithm", c.LastAlgorithm())
		}
		if c.Rank() == leaver {
			return c.Close()
		}
		// A call that does not need the leaver may still succeed (a bcast
		// reader that reads the root only); a following one may not. A
		// bound far above the milliseconds the failure takes; the run's own
		// deadline is 30 s.
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		start := time.Now()
		var err error
		var oe *comm.OpError
		for i := 0; i < 3 && err == nil; i++ {
			err = fn(cctx, c)
		}
		switch {
		case err == nil:
			return fmt.Errorf("3 calls succeeded without rank %d", leaver)
		case errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("waited %v for rank %d, which had closed: %v", time.Since(start).Round(time.Millisecond), leaver, err)
		case !errors.Is(err, comm.ErrClosed) || !errors.As(err, &oe) || oe.Peer != leaver ||
			!strings.Contains(err.Error(), fmt.Sprintf("peer %d: closed its", leaver)):
			return fmt.Errorf("want ErrClosed naming rank %d as the peer, got %v", leaver, err)
		}
		return nil
	})
	requireOK(t, errs)
}
