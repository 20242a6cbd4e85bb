package collectives

import (
	"sync/atomic"
	"time"
)

// activity is the Engine's record of the call it runs, for tools that
// ask a stuck job where each rank waits (see Engine.Activity). The hot
// path pays three atomic stores and a monotonic clock reading per call,
// and one store per wait; readers may see a record mid-update and retry
// (seq is stored last by begin).
type activity struct {
	seq   atomic.Uint32 // the latest call begun; 0: none yet
	done  atomic.Uint32 // the latest call ended
	what  atomic.Uint64 // Collective | Algorithm<<8 of call seq, and <<32 the group rank it waits for (-1 unknown)
	since atomic.Int64  // when call seq began, as time since epoch
}

// epoch anchors the record's times: time.Since reads the monotonic clock
// alone, half the cost of time.Now.
var epoch = time.Now()

func (a *activity) begin(seq uint32, coll Collective, alg Algorithm) {
	a.what.Store(uint64(coll) | uint64(alg)<<8 | uint64(0xffffffff)<<32)
	a.since.Store(int64(time.Since(epoch)))
	a.seq.Store(seq)
}

func (a *activity) end(seq uint32) { a.done.Store(seq) }

// waiting records that the running call now waits for group rank peer.
func (a *activity) waiting(peer int) {
	a.what.Store(a.what.Load()&0xffffffff | uint64(uint32(int32(peer)))<<32)
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
		seq := a.seq.Load()
		what, since := a.what.Load(), a.since.Load()
		done := a.done.Load()
		if a.seq.Load() != seq {
			continue // a call began meanwhile
		}
		if seq == 0 {
			return Activity{Peer: -1}
		}
		return Activity{
			Running:   done != seq,
			Op:        Collective(what & 0xff).String(),
			Seq:       seq,
			Algorithm: Algorithm(what >> 8 & 0xff).String(),
			Peer:      int(int32(uint32(what >> 32))),
			Since:     epoch.Add(time.Duration(since)),
		}
	}
	return Activity{Peer: -1, Running: true, Op: "?"} // calls follow each other too fast to read: not stuck
}
