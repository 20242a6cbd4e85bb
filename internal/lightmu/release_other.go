//go:build !amd64 || race

package lightmu

import "sync/atomic"

// release is an atomic store: elsewhere Go's is a release store already
// (arm64 STLR), and under the race detector it is the synchronisation the
// detector must see between an Unlock and the next Lock.
func release(p *uint32) { atomic.StoreUint32(p, 0) }
