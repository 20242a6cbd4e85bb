package lightmu

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBiasedMutualExclusion: the favoured side, handed from goroutine to
// goroutine as comm's queue hands it, and other takers never hold the
// lock at once. The checks are plain memory: under the race detector
// (where Biased runs on its Mutex alone) a broken lock is a reported race;
// elsewhere it shows as a holder overwritten or a count lost.
func TestBiasedMutualExclusion(t *testing.T) {
	for _, tc := range []struct {
		name   string
		favour bool
	}{{"favoured", true}, {"mutex alone", false}} {
		t.Run(tc.name, func(t *testing.T) {
			var b Biased
			if tc.favour {
				b.Favour()
			}
			var holder, n int
			enter := func(id int) {
				if holder != 0 {
					t.Errorf("%d entered while %d holds the lock", id, holder)
				}
				holder = id
				n++
				for range 50 { // a critical section long enough to overlap
					if holder != id {
						t.Errorf("%d's hold overwritten by %d", id, holder)
						break
					}
				}
				holder = 0
			}
			const others, each, favoured = 3, 300, 200000
			var wg sync.WaitGroup
			for o := range others {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range each {
						b.Lock()
						enter(o + 1)
						b.Unlock()
					}
				}()
			}
			// The favoured side moves between goroutines, one at a time:
			// a channel hands it over, as comm's queue does.
			turn := make(chan struct{}, 1)
			turn <- struct{}{}
			const hands = 4
			for h := range hands {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range favoured / hands {
						<-turn
						b.LockFavoured()
						enter(100 + h)
						b.UnlockFavoured()
						turn <- struct{}{}
					}
				}()
			}
			wg.Wait()
			require.Equal(t, others*each+favoured/hands*hands, n)
		})
	}
}

// BenchmarkBiased: a take and release by the favoured side (plain stores
// and a load) and by another taker (a heavy fence besides the mutex).
func BenchmarkBiased(b *testing.B) {
	for _, tc := range []struct {
		name         string
		lock, unlock func(*Biased)
	}{
		{"favoured", (*Biased).LockFavoured, (*Biased).UnlockFavoured},
		{"other", (*Biased).Lock, (*Biased).Unlock},
	} {
		b.Run(tc.name, func(b *testing.B) {
			var mu Biased
			mu.Favour()
			n := 0
			for b.Loop() {
				tc.lock(&mu)
				n++
				tc.unlock(&mu)
			}
			_ = n
		})
	}
}
