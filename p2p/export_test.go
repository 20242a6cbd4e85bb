package p2p

// SetIgnoreCTS makes senders ignore the split rendezvous's CTS frames (a
// sender that stopped after its RTS), for TestSplitRendezvousSenderGone.
func SetIgnoreCTS(on bool) { testIgnoreCTS.Store(on) }

// Unposted reports how many consumed receive buffers from peer wait to be
// posted again, for TestIdleRepost.
func (ep *Endpoint) Unposted(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].nUnposted
}

// Posted reports how many receive buffers this endpoint has posted for
// peer (it grows when the peer runs out of credits), for TestSlotsGrow.
func (ep *Endpoint) Posted(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].nrecv
}

// SendOutstanding reports the send queue entries this endpoint counts as
// in use toward peer, for TestInlineAccounting.
func (ep *Endpoint) SendOutstanding(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].sqOut
}

// RingSent reports how many lines this endpoint has written into its ring
// to peer (-1: it has none), for the ring tests.
func (ep *Endpoint) RingSent(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if o := ep.peers[peer].rout; o != nil {
		return int(o.sent)
	}
	return -1
}
