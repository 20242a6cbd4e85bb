package latch_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/latch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// closedWithin reports whether ch is closed within d.
func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	default:
	}
	if d == 0 {
		return false
	}
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

// TestChanClosesOnSet: a channel from Chan closes once the latch is set,
// whether Chan came first, after Set, or raced it; only the first Set
// reports it set the latch.
func TestChanClosesOnSet(t *testing.T) {
	t.Run("set first", func(t *testing.T) {
		var l latch.Latch
		assert.False(t, l.IsSet())
		assert.True(t, l.Set())
		assert.False(t, l.Set(), "a second Set said it set the latch")
		assert.True(t, l.IsSet())
		assert.True(t, closedWithin(l.Chan(), 0), "Chan after Set is open")
	})
	t.Run("chan first", func(t *testing.T) {
		var l latch.Latch
		ch := l.Chan()
		assert.False(t, closedWithin(ch, 0), "closed before Set")
		assert.Equal(t, ch, l.Chan(), "a second Chan made another channel")
		l.Set()
		l.Set() // closes nothing twice
		assert.True(t, closedWithin(ch, time.Second), "Set did not close the channel")
	})
	t.Run("racing", func(t *testing.T) {
		for range 2000 {
			var l latch.Latch
			var wg sync.WaitGroup
			chs := make([]<-chan struct{}, 3)
			for i := range chs {
				wg.Go(func() { chs[i] = l.Chan() })
			}
			var sets [2]bool
			for i := range sets {
				wg.Go(func() { sets[i] = l.Set() })
			}
			wg.Wait()
			require.True(t, sets[0] != sets[1], "Set reported %v", sets)
			for _, ch := range append(chs, l.Chan()) {
				require.True(t, closedWithin(ch, 5*time.Second), "a channel that raced Set stayed open")
			}
		}
	})
}

// TestSetPublishes: what the setter wrote before Set is visible to whoever
// sees the latch set (run with -race).
func TestSetPublishes(t *testing.T) {
	var l latch.Latch
	var v int
	go func() { v = 42; l.Set() }()
	<-l.Chan()
	assert.Equal(t, 42, v)
	for !l.IsSet() {
	}
	assert.Equal(t, 42, v)
}

func ExampleLatch() {
	var l latch.Latch
	var result int
	go func() { result = 6 * 7; l.Set() }()
	<-l.Chan()
	fmt.Println(result)
	// Output: 42
}
