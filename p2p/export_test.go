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
