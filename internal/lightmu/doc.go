// Package lightmu is a mutual-exclusion lock for short critical sections
// that one goroutine takes over and over, such as p2p's endpoint lock on
// the small-message path: its Unlock is a plain store on amd64, where
// sync.Mutex's is a locked read-modify-write (LOCK XADD), which also waits
// for every store before it to leave the CPU's store buffer.
//
//	var mu lightmu.Mutex
//	var n int
//	var wg sync.WaitGroup
//	for range 4 {
//		wg.Add(1)
//		go func() {
//			defer wg.Done()
//			for range 1000 {
//				mu.Lock()
//				n++
//				mu.Unlock()
//			}
//		}()
//	}
//	wg.Wait() // n == 4000
//
// Semantics are sync.Mutex's: the zero Mutex is unlocked, Lock blocks
// until the lock is free, TryLock takes it only if it is free now, Unlock
// of an unlocked Mutex panics, a Mutex must not be copied after first use,
// and the n'th Unlock happens before the (n+1)'th Lock returns. All methods
// are safe for concurrent use.
//
// Waiting. A Lock that finds the lock held polls it, then yields to other
// goroutines, then parks on a channel that Unlock signals when it sees a
// waiter counted. A plain store gives no order against Unlock's later load
// of that count (x86 may satisfy the load while the store is still
// buffered), so a waiter that counts itself keeps polling for a while
// before it parks, long enough for any Unlock's store to become visible,
// and parks at most parkMax at a time: a wake-up missed that way costs
// time, never the lock. A waiter that has waited starveAfter takes first
// claim on the lock (as sync.Mutex's starvation mode hands it over), so a
// goroutine that keeps re-locking cannot shut the others out.
//
// Biased is a Mutex that favours one taker at a time (which its caller
// guarantees): that side takes and releases it with plain stores, and
// every other taker pays a heavy fence (membarrier(2)) instead, where the
// process has asymmetric fences (see internal/shmsync).
package lightmu
