package comm

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// The collective queue: an idle queue grants the turn at once; waiting
// turns come in the order they were taken; a turn whose ctx ends leaves
// the line (or passes the turn on if it had come), and the rest still run
// in order. In a synctest bubble, so "nobody runs before first is done" is
// checked once both waiters are blocked, not after a guessed delay.
func TestQueue(t *testing.T) {
	synctest.Test(t, testQueue)
}

func testQueue(t *testing.T) {
	var q queue
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
	var q queue
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
