package comm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/shmsync"
)

// The collective queue: an idle queue grants the turn at once; waiting
// turns come in the order they were taken; a turn whose ctx ends leaves
// the line (or passes the turn on if it had come), and the rest still run
// in order. In a synctest bubble, so "nobody runs before first is done" is
// checked once both waiters are blocked, not after a guessed delay.
// Both ways of handing turns over: with locked instructions, and (where
// the process has asymmetric fences) the light one.
func TestQueue(t *testing.T) {
	for _, mode := range queueModes(t) {
		t.Run(mode.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { testQueue(t, mode.heavy) })
		})
	}
}

type queueMode struct {
	name  string
	heavy bool
}

// queueModes are the queue's ways of handing turns over that this
// process has.
func queueModes(t *testing.T) []queueMode {
	modes := []queueMode{{"heavy", true}}
	if shmsync.Asymmetric() {
		modes = append(modes, queueMode{"light", false})
	} else {
		t.Log("no asymmetric fences here: the light hand-over is not tested")
	}
	return modes
}

func testQueue(t *testing.T, heavy bool) {
	q := queue{heavy: heavy}
	ctx := context.Background()
	first := q.take()
	require.Nil(t, first, "an idle queue grants the turn at once")
	require.NoError(t, q.wait(ctx, first))

	second, third, fourth := q.take(), q.take(), q.take()
	require.NotNil(t, second)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, q.wait(gone, third), context.Canceled, "third gives up while first runs")

	order := make(chan string, 2)
	go func() {
		if q.wait(ctx, fourth) == nil {
			order <- "fourth"
			q.done()
		}
	}()
	go func() {
		if q.wait(ctx, second) == nil {
			order <- "second"
			q.done()
		}
	}()
	synctest.Wait() // both wait for their turns
	require.Empty(t, order, "nobody runs before first is done")
	q.done()
	for _, want := range []string{"second", "fourth"} {
		select {
		case got := <-order:
			require.Equal(t, want, got)
		case <-time.After(5 * time.Second):
			t.Fatalf("%s never got its turn", want)
		}
	}
	synctest.Wait() // fourth has given its turn back, not only said it ran
	require.Nil(t, q.take(), "idle again")
	q.done()

	// A turn that has come is taken even with an ended ctx (the call then
	// fails fast on its own), and done passes it on.
	require.Nil(t, q.take())
	next, after := q.take(), q.take()
	q.done()
	require.NoError(t, q.wait(gone, next))
	q.done()
	select {
	case <-after:
	case <-time.After(5 * time.Second):
		t.Fatal("the turn was not passed on")
	}
}

// TestQueueExclusive: goroutines that take turns concurrently, some of
// them giving up, never run two turns at once, and every turn that waits
// comes (the idle fast path and the waiting line hand the turn over
// without losing or doubling it).
func TestQueueExclusive(t *testing.T) {
	for _, mode := range queueModes(t) {
		t.Run(mode.name, func(t *testing.T) { testQueueExclusive(t, mode.heavy) })
	}
}

func testQueueExclusive(t *testing.T, heavy bool) {
	q := queue{heavy: heavy}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gone, stop := context.WithCancel(ctx)
	stop()
	const workers, turns = 4, 2000
	var running, ran atomic.Int32
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range turns {
				c := ctx
				if (w+i)%7 == 0 {
					c = gone // gives up unless the turn is its already
				}
				if err := q.wait(c, q.take()); err != nil {
					if c == gone {
						continue
					}
					errs <- err
					return
				}
				if n := running.Add(1); n != 1 {
					errs <- fmt.Errorf("%d turns at once", n)
					return
				}
				ran.Add(1)
				running.Add(-1)
				q.done()
			}
			errs <- nil
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	require.Positive(t, ran.Load())
	require.Nil(t, q.take(), "idle at the end")
	q.done()
}

// TestQueueLightHandOver: in the light mode a turn given back with nobody
// waiting is left free (no locked instruction, see queue), the next take
// claims it; a take that queues behind a running turn gets it when that
// turn ends, whichever of the two moved first.
func TestQueueLightHandOver(t *testing.T) {
	if !shmsync.Asymmetric() {
		t.Skip("no asymmetric fences here")
	}
	var q queue
	require.Nil(t, q.take())
	q.done()
	require.Equal(t, qBusy, q.state.Load(), "the light hand-back leaves the state alone")
	require.Equal(t, uint32(1), atomic.LoadUint32(&q.freed), "and marks the turn free")
	require.Nil(t, q.take(), "the next take claims the free turn")
	require.Equal(t, uint32(0), atomic.LoadUint32(&q.freed))

	// A turn queued behind the running one comes when it ends.
	next := q.take()
	require.NotNil(t, next)
	require.Equal(t, qQueued, q.state.Load())
	q.done()
	select {
	case <-next:
	case <-time.After(5 * time.Second):
		t.Fatal("the queued turn never came")
	}
	require.Equal(t, qBusy, q.state.Load())
	q.done()
	require.Nil(t, q.take(), "free again")
	q.done()

	// The race the heavy fence settles: the holder gives the turn back
	// while a take queues, having looked at the state before the take
	// made it qQueued (so the holder hands nothing over). The take then
	// finds the turn free and takes it instead of waiting for nobody.
	require.Nil(t, q.take())
	testQueued = func(q *queue) { atomic.StoreUint32(&q.freed, 1) }
	t.Cleanup(func() { testQueued = nil })
	require.Nil(t, q.take(), "a take that queues claims a turn its holder gave back")
	require.Empty(t, q.waiting)
	require.Equal(t, qBusy, q.state.Load())
	q.done()
	testQueued = nil
	require.Nil(t, q.take())
	q.done()
}

// A queue's answer to light is shmsync.Asymmetric's unless the queue
// is heavy, and stays the same once given.
func TestQueueLightness(t *testing.T) {
	for _, heavy := range []bool{true, false} {
		q := queue{heavy: heavy}
		want := !heavy && shmsync.Asymmetric()
		for range 3 {
			require.Equal(t, want, q.light(), "heavy %v", heavy)
		}
	}
}
