// Package futex holds the few system calls that processes sharing memory
// use to wait for each other: sleeping on a 32-bit word of shared memory
// until another process changes it and wakes the sleepers, and giving the
// CPU away. internal/shmsync builds the wait/park/wake protocol on it,
// which the shm provider's completion queues and the collectives'
// shared-memory flags use.
//
//	var bell *uint32 = ... // in memory two processes map
//	old := atomic.LoadUint32(bell)
//	if !ready() {
//		futex.Wait(bell, old, time.Millisecond) // returns when *bell != old, on Wake, or after 1 ms
//	}
//	// the other process: atomic.AddUint32(bell, 1); futex.Wake(bell)
//
// The futexes are the shared (not private) kind: the words live in memory
// several processes map. On other systems Wait polls briefly and Wake does
// nothing, so callers must re-check their condition after Wait returns
// (they must anyway: Wait may return early).
package futex
