package collectives

import (
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/shmsync"
)

// activity is the Engine's record of the call it runs, for tools that
// ask a stuck job where each rank waits (see Engine.Activity). Every
// atomic store costs a locked instruction and a clock reading costs as
// much as several (a paravirtual clock more), a good part of a small
// call's software, so the hot path pays one store when a call begins and
// one when it ends. The rest is written only by a call that waits: when
// it starts waiting for another peer than the one it waited for last,
// and, at its first such wait, the clock reading that stands for when it
// began (a call that has not waited yet has run only briefly, unless it
// computes). Readers may see a record mid-update and retry.
type activity struct {
	call uint64        // seq | Collective<<32 | Algorithm<<40 of the latest call begun; 0: none yet
	done uint32        // the latest call ended
	peer atomic.Uint64 // seq | group rank<<32: whom call seq waits for (a record of an older seq: not known)
	// since is when the call of the peer record began waiting, as time
	// since epoch: stored before the call's first peer record, so that a
	// reader who sees that record (and then reads since) reads its time.
	since atomic.Int64
}

// epoch anchors the record's times: time.Since reads the monotonic clock
// alone, half the cost of time.Now.
var epoch = time.Now()

// begin and end store call and done lightly (shmsync.PublishLight: words
// that are only loaded, never waited on): an atomic store is a full fence,
// which waits for every store before it, the call's publications in
// shared memory included, to leave this core.
func (a *activity) begin(seq uint32, coll Collective, alg Algorithm) {
	shmsync.PublishLight64(&a.call, uint64(seq)|uint64(coll)<<32|uint64(alg)<<40)
}

func (a *activity) end(seq uint32) { shmsync.PublishLight(&a.done, seq) }

// callColl and callAlg decode a call word as begin encodes it.
func callColl(w uint64) Collective { return Collective(w >> 32 & 0xff) }
func callAlg(w uint64) Algorithm   { return Algorithm(w >> 40 & 0xff) }

// ended is the latest call ended.
func (a *activity) ended() uint32 { return atomic.LoadUint32(&a.done) }

// waiting records that call seq now waits for group rank peer; first says
// that it is the call's first wait, which records the time too.
func (a *activity) waiting(seq uint32, peer int, first bool) {
	if first {
		a.since.Store(int64(time.Since(epoch)))
	}
	a.peer.Store(uint64(seq) | uint64(uint32(int32(peer)))<<32)
}

// noteWait is activity.waiting for this call, skipped when the call
// waited for peer last already (an exchange waits for its receive and
// its send, from and to the same peer).
func (c *call) noteWait(peer int) {
	if c.waitPeer != peer+1 {
		first := c.waitPeer == 0
		c.waitPeer = peer + 1
		c.e.act.waiting(c.seq, peer, first)
	}
}

// Activity is what an Engine is doing, as Engine.Activity reports it.
type Activity struct {
	Running   bool   // a call runs (the fields describe it); else the latest call, which ended
	Op        string // "allreduce", ...; empty before the first call
	Seq       uint32 // the call's sequence number on this Engine (1 for the first)
	Algorithm string // the algorithm chosen ("auto" before it is)
	Peer      int    // the group rank the call waits for now; -1 when not known
	// Since is when the call began waiting (its first wait that outlasted
	// a spin, or for a message): a stuck call's start, give or take a
	// spin. For a call that has not waited (yet) it is the report's time.
	Since time.Time
}

// Activity reports the call this Engine runs now, or the latest one. It
// takes no lock and may be called from any goroutine at any time.
func (e *Engine) Activity() Activity {
	a := &e.act
	for range 8 {
		w := atomic.LoadUint64(&a.call)
		pw := a.peer.Load()
		since := a.since.Load() // after pw (see activity.since)
		done := a.ended()
		if atomic.LoadUint64(&a.call) != w {
			continue // a call began meanwhile
		}
		seq := uint32(w)
		if seq == 0 {
			return Activity{Peer: -1}
		}
		at := time.Now() // the call has not waited yet: it began only just
		peer := -1
		if uint32(pw) == seq {
			peer = int(int32(uint32(pw >> 32)))
			at = epoch.Add(time.Duration(since))
		}
		return Activity{
			Running:   done != seq,
			Op:        callColl(w).String(),
			Seq:       seq,
			Algorithm: callAlg(w).String(),
			Peer:      peer,
			Since:     at,
		}
	}
	return Activity{Peer: -1, Running: true, Op: "?"} // calls follow each other too fast to read: not stuck
}
