package p2p

import (
	"sync/atomic"

	"github.com/rdmago/rdmago/internal/shmsync"
)

// Counter counts messages and their bytes.
type Counter struct {
	Msgs  uint64
	Bytes uint64
}

func (c *Counter) add(n int) {
	c.Msgs++
	c.Bytes += uint64(n)
}

// PeerStats are this rank's counters for traffic with one peer, per protocol.
type PeerStats struct {
	Rank      int
	Transport string // provider name, or "self"
	QPNum     uint32 // number of the queue pair to this peer (0 for self)

	EagerSent, EagerRecv Counter // messages up to EagerLimit
	// Of those, the ones that went through the shared-memory ring (shm,
	// up to 4144 bytes, see Options.RingLines) rather than the queue pair.
	RingSent, RingRecv Counter
	PipeSent, PipeRecv Counter // messages sent as eager fragments: above EagerLimit (PipelineLimit), or steered whole within it
	// Eager frames (and pipelined fragments) whose payload the provider
	// took straight from the sender's buffer (verbs.LentPairPoster: over
	// tcp, written into the socket without a staging copy).
	LentSent Counter
	// Pipelined fragments whose body the provider read straight into the
	// matched receive's buffer (verbs.SendSteerer: over tcp, from the
	// socket), rather than into a receive slot and then out of it.
	SteeredRecv Counter
	// Eager (or steered whole: PipeSent too) messages sent from two
	// buffers (IsendParts: a header and its payload, each from where it
	// was).
	PartsSent          Counter
	RndvSent, RndvRecv Counter // rendezvous messages (counted when the data has moved)
	// Of RndvSent, those completed when the provider had written the READ
	// response out (verbs.Caps.ReadServed: tcp, loop) rather than on the
	// receiver's FIN.
	RndvServed Counter
	// One-sided window writes completed. Writes that several goroutines
	// make to one peer at the same time over shared memory may be
	// undercounted (see countFastWrite); those made one at a time are
	// all counted.
	WriteSent  Counter
	NotifyRecv Counter // window notifications received (Bytes is 0)
	// Runs of small window writes posted as one request each
	// (verbs.RunWriter: over tcp), and their bytes; their writes are in
	// WriteSent too.
	WriteRuns Counter
}

// Stats is a snapshot of an endpoint's counters.
type Stats struct {
	Peers []PeerStats // indexed by rank; this rank's entry counts messages to itself
	// Registration cache of rendezvous buffers, summed over devices.
	RegEntries         int
	RegBytes           int64
	RegHits, RegMisses uint64
}

// Stats returns a snapshot of the endpoint's counters. Receives are counted
// when the frame arrives, sends when they are handed to the transport
// (eager and pipelined) or when the receiver has read the data (rendezvous).
func (ep *Endpoint) Stats() Stats {
	var s Stats
	ep.mu.Lock()
	s.Peers = make([]PeerStats, ep.size)
	for r, p := range ep.peers {
		if p == nil {
			s.Peers[r] = ep.selfStats
		} else {
			s.Peers[r] = p.stats
			s.Peers[r].WriteSent = p.writeSent()
		}
	}
	ep.mu.Unlock()
	for _, d := range ep.devs {
		e, b, h, m := d.cache.stats()
		s.RegEntries += e
		s.RegBytes += b
		s.RegHits += h
		s.RegMisses += m
	}
	return s
}

// eagerSent and eagerRecv count an eager message, unless it is one of the
// window key exchanges (the endpoint makes a window of its own in New,
// and a program counts the messages it sent, not those).
func (s *PeerStats) eagerSent(ctx uint32, n int, ring bool) {
	if ctx != ctxWindow {
		s.EagerSent.add(n)
		if ring {
			s.RingSent.add(n)
		}
	}
}

func (s *PeerStats) eagerRecv(ctx uint32, n int, ring bool) {
	if ctx != ctxWindow {
		s.EagerRecv.add(n)
		if ring {
			s.RingRecv.add(n)
		}
	}
}

// countFastWrite counts a write of n bytes that writeFast made without
// ep.mu. Each count is a load and a plain store (shmsync.PublishLight64),
// not an atomic add: an add is a locked instruction, which waits until the
// previous write's stores into the peer's memory have left the store
// buffer, and that wait was a third of put_bw's time at 8 bytes. So
// goroutines writing to one peer at the same time may overwrite each
// other's counts (PeerStats.WriteSent says so).
func (p *peer) countFastWrite(n int) {
	shmsync.PublishLight64(&p.fastMsgs, atomic.LoadUint64(&p.fastMsgs)+1)
	shmsync.PublishLight64(&p.fastBytes, atomic.LoadUint64(&p.fastBytes)+uint64(n))
}

// writeSent is the peer's WriteSent: the writes counted under ep.mu and
// those writeFast counted without it. The caller holds ep.mu.
func (p *peer) writeSent() Counter {
	c := p.stats.WriteSent
	c.Msgs += atomic.LoadUint64(&p.fastMsgs)
	c.Bytes += atomic.LoadUint64(&p.fastBytes)
	return c
}
