package collectives_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// countingCtx counts the lookups of values in it.
type countingCtx struct {
	context.Context
	n atomic.Int64
}

func (c *countingCtx) Value(key any) any {
	c.n.Add(1)
	return c.Context.Value(key)
}

// A call that never waits looks nothing up in its ctx: whether it runs in
// the background (its Waited) matters only to its waits, and a lookup
// walks the caller's whole chain of contexts on every call.
func TestCallThatNeverWaitsLooksUpNothing(t *testing.T) {
	w := coltest.NewWorld(1, coltest.Options{Shared: true})
	o := force(collectives.CollBcast, collectives.SharedMemory)
	o.Algorithms[collectives.CollAllreduce] = collectives.SharedMemory
	e, err := collectives.New(w.Group(0), o)
	require.NoError(t, err)
	defer e.Close()
	ctx := &countingCtx{Context: context.Background()}
	buf := make([]float32, 4)
	for range 3 {
		require.NoError(t, collectives.Bcast(ctx, e, buf, 0))
		require.NoError(t, collectives.Allreduce(ctx, e, buf, reduce.Sum))
	}
	require.Equal(t, collectives.SharedMemory, e.LastAlgorithm())
	require.Zero(t, ctx.n.Load(), "ctx.Value calls")
}
