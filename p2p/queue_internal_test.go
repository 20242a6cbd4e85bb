package p2p

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A peer's send queue that fills and drains in every window of sends (a
// burst beyond its credits) reuses its array: once it has grown, a window
// allocates nothing, and the items come out in the order they went in.
func TestSendQueueReusesArray(t *testing.T) {
	var p peer
	items := make([]outItem, 100)
	window := func() {
		for i := range items {
			p.enqueue(&items[i])
		}
		for i := range items {
			if p.queue[0] != &items[i] {
				t.Fatalf("item %d came out of the queue out of order", i)
			}
			p.popQueue()
		}
	}
	window()
	require.Zero(t, testing.AllocsPerRun(20, window), "allocations per window of queued sends")
	require.Empty(t, p.queue)
	for _, it := range p.qbuf[:cap(p.qbuf)] {
		require.Nil(t, it, "a drained queue keeps no item alive")
	}
}

// A queue drained only part way before more items arrive keeps its order
// when it reaches the end of its array, sliding back to the front or
// moving to a larger array, and a burst longer than queueKeep leaves its
// array to the garbage collector once drained.
func TestSendQueueOrderAcrossSlides(t *testing.T) {
	var p peer
	items := make([]outItem, 3*queueKeep)
	in, out := 0, 0
	push := func(n int) {
		for range n {
			p.enqueue(&items[in%len(items)])
			in++
		}
	}
	pop := func(n int) {
		for range n {
			if p.queue[0] != &items[out%len(items)] {
				t.Fatalf("item %d came out of the queue out of order", out)
			}
			p.popQueue()
			out++
		}
	}
	push(8)
	cycle := func() { // a queue of 5 to 8 items, popped 3 and topped up 3 at a time
		for range 100 {
			pop(3)
			push(3)
		}
	}
	cycle()
	require.Zero(t, testing.AllocsPerRun(5, cycle), "a queue that never holds more than 8 items slides back instead of moving")
	pop(8)
	push(2 * queueKeep)
	pop(2 * queueKeep)
	require.Nil(t, p.qbuf, "a drained queue longer than queueKeep lets its array go")
	require.Empty(t, p.queue)
	push(1)
	pop(1)
}
