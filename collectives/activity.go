package collectives

import (
	"sync/atomic"
	"time"
)

// activity is the Engine's record of the call it runs, for tools that
// ask a stuck job where each rank waits (see Engine.Activity). Every
// atomic store costs a locked instruction, a good part of a small call's
// software, so the hot path pays two stores and a monotonic clock reading
// per call, one when it ends, and one when a call starts waiting for
// another peer than the one it waited for last. Readers may see a record
// mid-update and retry (call is stored last by begin).
type activity struct {
	call  atomic.Uint64 // seq | Collective<<32 | Algorithm<<40 of the latest call begun; 0: none yet
	done  atomic.Uint32 // the latest call ended
	peer  atomic.Uint64 // seq | group rank<<32: whom call seq waits for (a record of an older seq: not known)
	since atomic.Int64  // when call seq began, as time since epoch
}

// epoch anchors the record's times: time.Since reads the monotonic clock
// alone, half the cost of time.Now.
var epoch = time.Now()

func (a *activity) begin(seq uint32, coll Collective, alg Algorithm) {
	a.since.Store(int64(time.Since(epoch)))
	a.call.Store(uint64(seq) | uint64(coll)<<32 | uint64(alg)<<40)
}

func (a *activity) end(seq uint32) { a.done.Store(seq) }

// waiting records that call seq now waits for group rank peer.
func (a *activity) waiting(seq uint32, peer int) {
	a.peer.Store(uint64(seq) | uint64(uint32(int32(peer)))<<32)
}

// noteWait is activity.waiting for this call, skipped when the call
// waited for peer last already (an exchange waits for its receive and
// its send, from and to the same peer).
func (c *call) noteWait(peer int) {
	if c.waitPeer != peer+1 {
		c.waitPeer = peer + 1
		c.e.act.waiting(c.seq, peer)
	}
}

// Activity is what an Engine is doing, as Engine.Activity reports it.
type Activity struct {
	Running   bool      // a call runs (the fields describe it); else the latest call, which ended
	Op        string    // "allreduce", ...; empty before the first call
	Seq       uint32    // the call's sequence number on this Engine (1 for the first)
	Algorithm string    // the algorithm chosen ("auto" before it is)
	Peer      int       // the group rank the call waits for now; -1 when not known
	Since     time.Time // when the call began
}

// Activity reports the call this Engine runs now, or the latest one. It
// takes no lock and may be called from any goroutine at any time.
func (e *Engine) Activity() Activity {
	a := &e.act
	for range 8 {
		w := a.call.Load()
		since, pw := a.since.Load(), a.peer.Load()
		done := a.done.Load()
		if a.call.Load() != w {
			continue // a call began meanwhile
		}
		seq := uint32(w)
		if seq == 0 {
			return Activity{Peer: -1}
		}
		peer := -1
		if uint32(pw) == seq {
			peer = int(int32(uint32(pw >> 32)))
		}
		return Activity{
			Running:   done != seq,
			Op:        Collective(w >> 32 & 0xff).String(),
			Seq:       seq,
			Algorithm: Algorithm(w >> 40 & 0xff).String(),
			Peer:      peer,
			Since:     epoch.Add(time.Duration(since)),
		}
	}
	return Activity{Peer: -1, Running: true, Op: "?"} // calls follow each other too fast to read: not stuck
}
