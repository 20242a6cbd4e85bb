package p2p

import (
	"sync/atomic"

	"github.com/rdmago/rdmago/verbs"
)

// Inline writes. Over a queue pair whose doorbell is a system call
// (verbs.PostBatcher), a small write from IwriteNow travels in its work
// request (verbs.SendInline: the provider copies src when it is posted),
// unsignaled like an inline frame (peer.signalInline), and gets no
// Request: the next Ifence to its peer posts one signaled write of no
// bytes, whose completion, on a reliable connection that completes in
// order, says every write before it was placed. A window of 64 small
// Puts and a Flush over tcp spent as much time making, tracking and
// completing a request per Put as in the system calls that carried them
// (put_bw at 1-512 B: 1.3-1.8x the rate with inline writes, together
// with batches of 128 requests in one write). Where the QP takes runs
// (verbs.RunWriter), the writes held for a later post go into the peer's
// run instead, posted as one request (postRunLocked) before any other
// post to that peer and with the held posts: the request per write had
// cost about 100 ns of bookkeeping on both sides. Over shm a
// small Put is a copy into the mapped window, and writes that take the
// queue pair there keep their requests.

// unfenced is the state of a window's inline writes: per rank, whether
// writes went to it since its last fence (under ep.mu), and how many
// ranks have (read without the lock by Unfenced).
type unfenced struct {
	to []bool
	n  atomic.Int32
}

// writeInline posts src for peer p's window at addr as an inline,
// unsignaled write and reports true, or reports false having done
// nothing where the write must take a request (something is queued
// before it, or the send queue has no room to spare).
func (w *Window) writeInline(p *peer, addr uint64, rkey uint32, src []byte) (bool, error) {
	ep := w.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err := ep.checkLocked(); err != nil {
		return false, err
	}
	if p.departed {
		return false, &PeerClosedError{Rank: p.rank}
	}
	if err := p.runErr; err != nil {
		p.runErr = nil
		return false, err
	}
	pending := 0 // the send queue entry the run waiting to be posted takes
	if p.run.Len() > 0 {
		pending = 1
	}
	runs := p.runs != nil && !ep.batching && p.unsig+2 < inlineSignal
	if len(p.queue) > 0 || p.sqOut+pending+1 >= p.sqCap || w.closed || len(src) > p.inline && !runs {
		return false, nil
	}
	lazy := ep.deferPostsLocked(p)
	if lazy && runs {
		// Into the peer's run, posted with the deferred posts. A run is
		// unsignaled: once inlineSignal-2 unsignaled entries wait for a
		// signaled one, the write takes the path below, which signals.
		if p.run.Len() == p.runWrites || len(p.run.Data)+len(src) > p.runBytes {
			ep.postRunLocked(p)
		}
		p.run.Add(addr, rkey, src)
		p.stats.WriteSent.add(len(src))
		w.noteInline(p.rank)
		if ep.deferred >= deferMaxInline {
			ep.releasePostsLocked()
		}
		return true, nil
	}
	ep.deferring = lazy
	ep.holdPosts(p) // the run first, if any: it counts among the unsignaled
	p.swr[0] = verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendInline, Inline: src, RemoteAddr: addr, RKey: rkey}
	p.signalInline(false)
	err := p.qp.PostSend(p.swr[:]...)
	ep.deferring = false
	p.swr[0].Inline = nil
	if err != nil {
		return false, err
	}
	p.postedInline()
	p.sqOut++
	p.stats.WriteSent.add(len(src))
	w.noteInline(p.rank)
	if lazy && ep.deferred >= deferMaxInline {
		ep.releasePostsLocked()
	}
	return true, nil
}

// noteInline marks rank as written to without a request since its last
// fence (under ep.mu).
func (w *Window) noteInline(rank int) {
	if !w.inl.to[rank] {
		w.inl.to[rank] = true
		w.inl.n.Add(1)
	}
}

// runWriteMax is the largest write a run takes (above the inline limit:
// runs copy their bytes anyway).
const runWriteMax = 4096

// postRunLocked posts p's run of deferred inline writes as one unsignaled
// request (verbs.RunWriter), counted like an inline write's; a failure
// stays in p.runErr for the next write or fence to p to report, as the
// writes' own posts would have.
func (ep *Endpoint) postRunLocked(p *peer) {
	err := p.runs.PostWriteRun(wrID(wrSend, p.rank, inlineMark), &p.run)
	n := len(p.run.Data)
	p.run.Reset()
	if err != nil {
		if p.runErr == nil {
			p.runErr = err
		}
		return
	}
	p.stats.WriteRuns.add(n)
	p.unsig++
	p.sqOut++
}

// Unfenced reports whether IwriteNow left writes of this window without a
// request since the last Ifence (see Ifence). It takes no lock.
func (w *Window) Unfenced() bool { return w.inl.n.Load() != 0 }

// Ifence appends to dst, for every rank this window's writes went to
// without a request (IwriteNow gave none: it posted them inline) since
// the last Ifence, a request that completes once those writes and every
// other write this rank started to that rank before it have been placed
// in its memory, and returns the extended dst. Once those requests
// complete, the writes are as complete as if each had had its own. An
// error (the endpoint failed, a rank left) comes with the requests made
// before it; the writes to that rank are then lost with its link.
func (w *Window) Ifence(dst []*Request) ([]*Request, error) {
	if w.inl.n.Load() == 0 {
		return dst, nil
	}
	ep := w.ep
	// One hold of the lock a fence (startWindowOp takes it to post), and
	// no list of the ranks to allocate.
	for rank := 0; ; rank++ {
		ep.mu.Lock()
		if w.closed {
			// Close's messages followed the writes on every link: nothing
			// is left to fence, and no window to write to.
			clear(w.inl.to)
			w.inl.n.Store(0)
			ep.mu.Unlock()
			return dst, nil
		}
		for rank < len(w.inl.to) && !w.inl.to[rank] {
			rank++
		}
		if rank == len(w.inl.to) {
			ep.mu.Unlock()
			return dst, nil
		}
		w.inl.to[rank] = false
		w.inl.n.Add(-1)
		ep.mu.Unlock()
		r := ep.newWinReq()
		r.ep, r.op, r.peer, r.pattern, r.fence = ep, opWrite, rank, envelope{tag: NoTag}, true
		r.status = Status{Source: ep.rank}
		rk := w.remote[rank]
		r.rts = inbound{addr: rk.addr, rkey: rk.rkey}
		if err := ep.startWindowOp(ep.peers[rank], r, true); err != nil {
			return dst, &Error{Op: "Flush", Rank: ep.rank, Peer: rank, Tag: NoTag, Err: err}
		}
		dst = append(dst, r)
	}
}
