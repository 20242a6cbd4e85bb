// Package racesync tells the race detector about happens-before edges that
// shared memory creates: atomics on mmap'ed segments lie outside the Go
// heap, so the detector sees neither side of them. Ranks that run as
// goroutines of one process and hand each other plain Go memory (a
// registered buffer a peer copies into, a buffer reused after a message)
// would otherwise be reported as racing.
//
//	racesync.Release() // before the store that publishes
//	atomic.StoreUint32(word, seq)
//	...
//	if atomic.LoadUint32(word) == seq {
//		racesync.Acquire() // after the load that observes
//	}
//
// Every shared-memory protocol (verbs/shm's queues, p2p's rings) uses the
// one sync object here, so edges compose across them. Without the race
// build tag both calls are empty and cost nothing. Safe for concurrent use.
package racesync
