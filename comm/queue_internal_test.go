package comm

import (
	"context"
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
