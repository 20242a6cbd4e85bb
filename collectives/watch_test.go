package collectives_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// waitCounter wraps a Group; its requests offer WaitPassive and count which
// wait the Engine used for receives on the watchers' tag (≥ 1<<30).
type waitCounter struct {
	collectives.Group
	passive, polled *atomic.Int32
}

type countedReq struct {
	collectives.Request
	watch bool
	g     *waitCounter
}

func (g *waitCounter) Irecv(peer, tag int, buf []byte) (collectives.Request, error) {
	r, err := g.Group.Irecv(peer, tag, buf)
	if err != nil {
		return nil, err
	}
	return &countedReq{Request: r, watch: tag >= 1<<30, g: g}, nil
}

func (r *countedReq) Wait(ctx context.Context) (int, error) {
	if r.watch {
		r.g.polled.Add(1)
	}
	return r.Request.Wait(ctx)
}

func (r *countedReq) WaitPassive(ctx context.Context) (int, error) {
	if r.watch {
		r.g.passive.Add(1)
	}
	return r.Request.Wait(ctx)
}

// TestWatchersWaitPassively: the mismatch watchers' receives stay pending
// for the Engine's life; waiting on them with a polling Wait would take a
// CPU from the collectives beside them (it made small allreduces 10x
// slower), so the Engine uses WaitPassive when requests have it.
func TestWatchersWaitPassively(t *testing.T) {
	var passive, polled atomic.Int32
	w := coltest.NewWorld(3, coltest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := w.Run(func(rank int, g collectives.Group) error {
		e, err := collectives.New(&waitCounter{Group: g, passive: &passive, polled: &polled}, collectives.Options{})
		if err != nil {
			return err
		}
		defer e.Close()
		buf := []float64{float64(rank)}
		return collectives.Allreduce(ctx, e, buf, reduce.Sum)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	require.Zero(t, polled.Load(), "watcher receives waited with the polling Wait")
	require.Positive(t, passive.Load(), "no watcher receive waited with WaitPassive")
}
