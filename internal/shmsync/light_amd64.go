//go:build !race

package shmsync

import "unsafe"

// storeLight is a plain store: on x86 every store has release order
// already (TSO), and the Go compiler keeps stores in program order, so
// what the caller stored before is visible before it, and no fence
// follows (sync/atomic's store is an XCHG, a full fence).
func storeLight(p *uint32, v uint32) { *(*uint32)(unsafe.Pointer(p)) = v }

func storeLight64(p *uint64, v uint64) { *(*uint64)(unsafe.Pointer(p)) = v }

// lightStores: storeLight is not sequentially consistent here, so light
// publishing needs the waiters' heavy fence (FenceHeavy).
const lightStores = true
