// Package ntcopy copies with non-temporal stores: the written lines go
// to memory instead of into this core's cache.
//
//	n := ntcopy.Copy(slot, data) // like copy(slot, data)
//
// That is what a rank wants when it writes data that another core will
// read: shared-memory slots, rings, a peer's buffer. On this kind of
// machine (a VM whose two vCPUs the host moves around), rewriting memory
// that the other core read the last time costs, with ordinary stores, up
// to 7 times what it costs with non-temporal ones (each line is first
// fetched and the other core's copy invalidated): 16 KiB 2.9 against
// 0.44 µs, 512 KiB 89 against 12 µs, while the reader's copy out costs
// about the same either way (BenchmarkCrossCoreRewrite, 11:18). When the
// host places the vCPUs close together the two are within 25% of each
// other, and non-temporal data costs the reader a little more.
//
// Copy falls back to the built-in copy below MinBytes (4 KiB, where the
// reader would rather find the few lines in a cache) and on
// architectures without an assembly loop. It is safe for concurrent use
// on disjoint memory; dst and src must not overlap. The stores are fenced
// (SFENCE) before Copy returns, so a release store after it (an atomic
// round id) publishes the data.
package ntcopy
