// Package ntcopy copies with non-temporal stores: the written lines go
// to memory instead of into this core's cache.
//
//	n := ntcopy.Copy(slot, data) // like copy(slot, data)
//
// That is what a rank wants when it writes data that another core will
// read: shared-memory slots, rings, a peer's buffer. Rewriting memory
// that another core read the last time costs, with ordinary stores, a
// fetch of each line and the invalidation of the other core's copy, which
// non-temporal stores skip, while the reader's copy out costs about the
// same either way (BenchmarkCrossCoreRewrite measures both). When the two
// cores share a cache the difference is small, and non-temporal data costs
// the reader a little more.
//
// Copy falls back to the built-in copy below MinBytes (4 KiB, where the
// reader would rather find the few lines in a cache) and on
// architectures without an assembly loop. It is safe for concurrent use
// on disjoint memory; dst and src must not overlap. The stores are fenced
// (SFENCE) before Copy returns, so a release store after it (an atomic
// round id) publishes the data.
//
// Plain is the copy for everything else of some size: 64-byte AVX-512
// moves from 256 bytes to 32 KiB where the CPU has them (Go's copy moves
// 32 bytes an instruction and took 1.5-1.7 times as long there), REP
// MOVSB from 32 KiB up where the CPU has ERMS (Go's copy took 1.3-1.6
// times as long up to 512 KiB, and from 1 MiB streams past the caches),
// the built-in copy otherwise. Bulk is Plain without the 64-byte moves,
// for a collective's copies of a rank's own data and for data another
// core wrote past the caches, which below 32 KiB Go's copy, prefetching
// further ahead, reads faster.
//
// Chooser copies what another core will read by whichever of Copy and
// Bulk has lately been the faster: which one wins changes with where the
// VM's cores run (see there).
//
// Prefetch is the reader's side for small data: it starts the transfer
// of lines another core wrote, so that they arrive while the reader does
// other work before copying them.
//
// Touch maps the pages of memory that will soon be used (shared-memory
// slots, receive buffers) into this process now, without changing what
// they hold, so that their first use does not take a page fault each;
// Pages does it once per page for memory handed out again and again, within
// a Budget; Present reports which pages are mapped (for tests).
package ntcopy
