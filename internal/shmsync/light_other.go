//go:build !amd64 || race

package shmsync

import "sync/atomic"

// storeLight is an atomic store: on the other architectures Go's is
// already a release store without a full fence (arm64 STLR), and under the
// race detector every store stays the one the package doc reasons about.
func storeLight(p *uint32, v uint32) { atomic.StoreUint32(p, v) }

func storeLight64(p *uint64, v uint64) { atomic.StoreUint64(p, v) }

// lightStores: storeLight is Go's atomic store, and a light publisher
// needs no heavy fence from its waiters.
const lightStores = false
