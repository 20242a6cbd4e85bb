package p2p

// ForgeLen makes this rank believe that peer's window is n bytes long, so
// that a test can post an access past its end and see the provider refuse
// it (as a NIC refuses an rkey's out-of-bounds access).
func (w *Window) ForgeLen(peer, n int) { w.remote[peer].len = n }

// DirectWriteMax is the largest window write that is a plain copy into a
// peer's mapped window.
const DirectWriteMax = directWriteMax

// DirectPiece is the most a direct write copies under one hold of the
// endpoint's lock.
const DirectPiece = directPiece

// SetBetweenPieces has f run between the pieces of every direct write
// (nil: nothing), as another goroutine's operation might.
func SetBetweenPieces(f func()) { betweenPieces = f }

// HoldWindowOps makes this endpoint's direct writes see a window operation
// in flight, as one another goroutine posted and nobody has polled the
// completion of yet, until release is called.
func (ep *Endpoint) HoldWindowOps() (release func()) {
	ep.mu.Lock()
	ep.opSeq++
	id := ep.opSeq
	ep.addWriteLocked(id, &Request{})
	ep.mu.Unlock()
	return func() {
		ep.mu.Lock()
		ep.dropWriteLocked(id)
		ep.mu.Unlock()
	}
}

// HoldLock holds the endpoint's mutex until release is called, as a
// goroutine in the middle of an operation would.
func (ep *Endpoint) HoldLock() (release func()) {
	ep.mu.Lock()
	return ep.mu.Unlock
}
