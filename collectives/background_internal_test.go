package collectives

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closedWithin reports whether ch is closed within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestWaitedWakeClosesOnSet: a nap's channel closes once the Waited is
// set, whichever comes first, the nap's wake or the Set, and also when the
// two race.
func TestWaitedWakeClosesOnSet(t *testing.T) {
	t.Run("set first", func(t *testing.T) {
		var w Waited
		w.Set()
		assert.True(t, closedWithin(w.wake(), 0), "wake after Set is open")
	})
	t.Run("wake first", func(t *testing.T) {
		var w Waited
		ch := w.wake()
		assert.False(t, closedWithin(ch, 0), "wake closed before Set")
		assert.Equal(t, ch, w.wake(), "a second wake made another channel")
		w.Set()
		w.Set() // a second Set closes nothing twice
		assert.True(t, closedWithin(ch, time.Second), "Set did not close the nap's channel")
	})
	t.Run("racing", func(t *testing.T) {
		for range 2000 {
			var w Waited
			var wg sync.WaitGroup
			chs := make([]<-chan struct{}, 2)
			for i := range chs {
				wg.Go(func() { chs[i] = w.wake() })
			}
			wg.Go(w.Set)
			wg.Go(w.Set)
			wg.Wait()
			for _, ch := range chs {
				require.True(t, closedWithin(ch, 5*time.Second), "a wake that raced Set stayed open")
			}
		}
	})
}

// TestWaitedContext: the ctx a Waited makes is its parent's (deadline,
// done, error, values) and carries the Waited as Background's does.
func TestWaitedContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
	var w Waited
	ctx := w.Context(parent)
	dl, ok := ctx.Deadline()
	pdl, _ := parent.Deadline()
	assert.True(t, ok)
	assert.Equal(t, pdl, dl)
	assert.Equal(t, "v", ctx.Value(key{}))
	assert.Same(t, &w, ctx.Value(backgroundKey{}))
	assert.Same(t, &w, Background(parent, &w).Value(backgroundKey{}))
	assert.Equal(t, parent.Done(), ctx.Done())
	require.NoError(t, ctx.Err())
	cancel()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	// A child of it is canceled with its parent.
	var w2 Waited
	child, cancel2 := context.WithCancel(w2.Context(context.Background()))
	defer cancel2()
	outer, cancelOuter := context.WithCancel(context.Background())
	var w3 Waited
	grandchild, cancel3 := context.WithCancel(w3.Context(outer))
	defer cancel3()
	cancelOuter()
	assert.True(t, closedWithin(grandchild.Done(), 5*time.Second), "a child of a Waited's ctx missed its parent's cancel")
	assert.NoError(t, child.Err())
}
