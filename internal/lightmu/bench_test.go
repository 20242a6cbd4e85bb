package lightmu_test

import (
	"sync"
	"testing"

	"github.com/rdmago/rdmago/internal/lightmu"
)

// BenchmarkLockUnlock is an uncontended Lock and Unlock around a store,
// the shape of p2p's endpoint lock on the small-message path, against
// sync.Mutex: the difference is sync.Mutex's locked Unlock.
//
//	go test -run '^$' -bench LockUnlock ./internal/lightmu
func BenchmarkLockUnlock(b *testing.B) {
	var n int
	b.Run("lightmu", func(b *testing.B) {
		var mu lightmu.Mutex
		for b.Loop() {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	b.Run("sync", func(b *testing.B) {
		var mu sync.Mutex
		for b.Loop() {
			mu.Lock()
			n++
			mu.Unlock()
		}
	})
	_ = n
}
