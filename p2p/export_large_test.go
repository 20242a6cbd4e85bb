package p2p

// ProtocolLimits reports the protocol limits of messages to peer: the
// largest eager and pipelined messages (0: none), the size above which a
// message in one buffer goes pipelined within the eager limit (steered
// whole; 0: none), and the sizes at which a
// message's handling changes shape inside its protocol (the shm ring's
// largest inline message, the rendezvous READ's chunk, whole reads, the
// split copy), for TestLargeP2P, whose sizes follow them.
func (ep *Endpoint) ProtocolLimits(peer int) (eager, pipe, whole int, shapes []int) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	p := ep.peers[peer]
	if p.steer != nil {
		whole = steerWholeMin
	}
	return p.eager, p.pipe, whole, []int{ringMaxBytes, readChunk(p.dev), readWholeMin, rndvSplitMin}
}
