package lightmu

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// setPhases sets the waiting phases for one test.
func setPhases(t *testing.T, sp, y int, park, starve time.Duration) {
	t.Helper()
	os, oy, op, ost := spins, yields, parkMax, starveAfter
	spins, yields, parkMax, starveAfter = sp, y, park, starve
	t.Cleanup(func() { spins, yields, parkMax, starveAfter = os, oy, op, ost })
}

// waitFor polls cond until it holds or the test's deadline nears.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for !cond() {
		if ctx.Err() != nil {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// locked runs f in a goroutine and returns a channel closed when f has
// returned, which must be within the test's deadline.
func locked(f func()) chan struct{} {
	done := make(chan struct{})
	go func() { f(); close(done) }()
	return done
}

func within(t *testing.T, done chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

func TestMutualExclusion(t *testing.T) {
	for _, tc := range []struct {
		name          string
		spins, yields int
	}{
		{"defaults", spins, yields},
		{"parks at once", 0, 0}, // every contended Lock parks
	} {
		t.Run(tc.name, func(t *testing.T) {
			setPhases(t, tc.spins, tc.yields, parkMax, starveAfter)
			var mu Mutex
			var inside atomic.Int32
			n := 0
			const goroutines, each = 8, 2000
			var wg sync.WaitGroup
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range each {
						if i%3 == 0 {
							for !mu.TryLock() {
							}
						} else {
							mu.Lock()
						}
						if inside.Add(1) != 1 {
							t.Error("two goroutines inside the lock")
						}
						n++
						inside.Add(-1)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			require.Equal(t, goroutines*each, n)
		})
	}
}

func TestTryLock(t *testing.T) {
	var mu Mutex
	require.True(t, mu.TryLock(), "the zero Mutex is unlocked")
	require.False(t, mu.TryLock(), "TryLock took a held lock")
	mu.Unlock()
	require.True(t, mu.TryLock(), "TryLock after Unlock")
	mu.Unlock()
}

func TestUnlockOfUnlockedPanics(t *testing.T) {
	var mu Mutex
	require.PanicsWithValue(t, "lightmu: unlock of unlocked mutex", mu.Unlock)
}

// A parked waiter is woken by Unlock, not by its park's timeout: with a
// park longer than the test's deadline, a lost wake-up fails the test.
func TestUnlockWakesParkedWaiter(t *testing.T) {
	setPhases(t, 0, 0, time.Hour, time.Hour)
	var mu Mutex
	for round := range 50 {
		mu.Lock()
		done := locked(mu.Lock)
		waitFor(t, "the waiter parks", func() bool { return mu.waiters.Load() == 1 })
		mu.Unlock()
		within(t, done, fmt.Sprintf("the parked Lock (round %d)", round))
		require.Equal(t, int32(0), mu.waiters.Load(), "a waiter stays counted")
		mu.Unlock()
	}
}

// A waiter that has waited starveAfter takes first claim: from then on
// nobody else takes the lock, not even a TryLock on a free lock, until the
// waiter has had it.
func TestStarvedWaiterHasFirstClaim(t *testing.T) {
	setPhases(t, 0, 0, time.Hour, 0) // starving at once
	var mu Mutex
	mu.Lock()
	var had atomic.Bool
	release := make(chan struct{})
	waiter := locked(func() {
		mu.Lock()
		had.Store(true)
		<-release
		mu.Unlock()
	})
	waitFor(t, "the waiter claims the lock", func() bool { return atomic.LoadUint32(&mu.starving) == 1 })
	mu.Unlock()
	for !had.Load() {
		if mu.TryLock() {
			t.Fatal("TryLock took the lock before the waiter with first claim")
		}
	}
	close(release)
	within(t, waiter, "the waiter")
	require.Equal(t, uint32(0), atomic.LoadUint32(&mu.starving), "first claim left set")
	require.True(t, mu.TryLock(), "the lock is not free after the waiter")
	mu.Unlock()
}
