package p2p

// The matching engine: MPI's two queues.
//
// A receive names a pattern (context, source or AnySource, tag or AnyTag).
// An arriving message carries an envelope (context, source, tag). When a
// message arrives it goes to the oldest posted receive whose pattern it
// fits; if there is none it joins the unexpected queue. When a receive is
// posted it takes the oldest unexpected message that fits; if there is none
// it joins the posted queue. Because messages from one source arrive in
// sending order (one RC queue pair per peer, and a rendezvous message is
// matched when its RTS arrives, not when its data does) and both queues
// are searched oldest first, two messages from the same source that both
// fit a receive are matched in the order they were sent: MPI's
// non-overtaking rule. Messages from different sources have no order.
//
// The matcher is a plain data structure with no locking and no I/O; the
// endpoint calls it with its mutex held. Both queues are slices searched
// linearly, oldest first: they are short in practice (MPI implementations
// do the same), and a slice of pointers costs no allocation per message
// once it has grown. The oldest entry, the one a stream of messages from
// one peer takes, leaves without moving the others (fifo): with a
// window of 64 receives posted, moving the rest down on every match was
// 63 pointers copied per message.

// envelope is what a message carries and what a receive asks for.
type envelope struct {
	src int    // AnySource in a pattern
	ctx uint32 // (after src: 16 bytes, where the request keeps one)
	tag int32  // AnyTag in a pattern
}

func (p envelope) fits(e envelope) bool {
	return p.ctx == e.ctx && (p.src == AnySource || p.src == e.src) && (p.tag == AnyTag || p.tag == e.tag)
}

// inbound is a message that arrived before a receive for it was posted
// (or was claimed by Mprobe).
type inbound struct {
	env  envelope
	size int
	// Eager messages: the payload, copied out of the receive slot.
	data []byte
	// Rendezvous messages: where the sender's buffer is.
	rts  bool
	addr uint64
	rkey uint32
	id   uint64
	// canWrite: the sender offered to write part of it (flagCanWrite).
	canWrite bool
	// A pipelined message still arriving (nil once it is whole).
	pipe *pipeIn
}

type matcher struct {
	posted fifo[Request] // receives waiting for a message, oldest first
	unexp  fifo[inbound] // messages waiting for a receive, oldest first
}

// arrive finds, removes and returns the oldest posted receive that env fits,
// or nil when there is none (the caller then queues the message with
// addUnexpected).
func (m *matcher) arrive(env envelope) *Request {
	r, i := m.peek(env)
	if r != nil {
		m.posted.removeAt(i)
	}
	return r
}

// peek is arrive without the removal: the receive and its place in the
// posted queue.
func (m *matcher) peek(env envelope) (*Request, int) {
	for i, r := range m.posted.items() {
		if r.pattern.fits(env) {
			return r, i
		}
	}
	return nil, -1
}

func (m *matcher) addUnexpected(in *inbound) { m.unexp.push(in) }

// find returns the oldest unexpected message that fits pattern, removing it
// when remove is set. It inlines the look at an empty queue, the case of
// receives posted before their messages arrive (a window of Irecvs).
func (m *matcher) find(pattern envelope, remove bool) *inbound {
	if m.unexp.len() == 0 {
		return nil
	}
	return m.findIn(pattern, remove)
}

// findIn is find over a queue that holds messages.
func (m *matcher) findIn(pattern envelope, remove bool) *inbound {
	for i, in := range m.unexp.items() {
		if pattern.fits(in.env) {
			if remove {
				m.unexp.removeAt(i)
			}
			return in
		}
	}
	return nil
}

// expects reports whether one of the first scan posted receives waits for
// a message from src in context ctx (or from any source there): src is
// sending to this rank too.
func (m *matcher) expects(ctx uint32, src, scan int) bool {
	for i, r := range m.posted.items() {
		if i == scan {
			break
		}
		if r.pattern.ctx == ctx && (r.pattern.src == src || r.pattern.src == AnySource) {
			return true
		}
	}
	return false
}

// bothWaysMin is the smallest message in the pipelined range that goes by
// rendezvous when its receiver is sending to this rank too (isendParts). Over
// shm, 64 KiB messages each way (OSU bibw) ran at 1.30-1.91 times the
// pipeline's rate, 32 KiB ones at 0.85 (osu-compare, 5-11 rounds); one
// way, where the receiver's core is free for the second copy, the
// rendezvous did not win at 64 KiB (bw 0.75-1.06, latency 0.85-1.14).
const bothWaysMin = 48 << 10

// bothWaysScan bounds the posted receives a send in the pipelined range
// looks through for one from its receiver (matcher.expects): a window of
// OSU's 64 fits.
const bothWaysScan = 64

// post queues a receive that find did not satisfy.
func (m *matcher) post(r *Request) { m.posted.push(r) }

// unpost removes a posted receive (cancellation); it reports whether r was
// still waiting.
func (m *matcher) unpost(r *Request) bool {
	for i, p := range m.posted.items() {
		if p == r {
			m.posted.removeAt(i)
			return true
		}
	}
	return false
}

// removeUnexpected removes in (a canceled RTS); it reports whether in was queued.
func (m *matcher) removeUnexpected(pred func(*inbound) bool) *inbound {
	for i, in := range m.unexp.items() {
		if pred(in) {
			m.unexp.removeAt(i)
			return in
		}
	}
	return nil
}

// fifo is a queue of pointers, oldest first, whose oldest entry leaves
// by moving the start (s[head:] are the entries) instead of the entries.
// The zero fifo is empty.
type fifo[T any] struct {
	s    []*T
	head int
}

func (q *fifo[T]) items() []*T { return q.s[q.head:] }

func (q *fifo[T]) len() int { return len(q.s) - q.head }

// push appends x. A full backing array whose dead front is at least as
// long as the entries is reused by moving the entries down, which keeps
// the copying amortized O(1) per entry; otherwise append grows it.
func (q *fifo[T]) push(x *T) {
	if len(q.s) == cap(q.s) && q.head > 0 && q.head >= q.len() {
		n := copy(q.s, q.s[q.head:])
		clear(q.s[n:])
		q.s, q.head = q.s[:n], 0
	}
	q.s = append(q.s, x)
}

// removeAt removes items()[i], keeping the order of the rest, and clears
// the vacated slot so that the backing array keeps nothing alive. It
// moves the shorter side: comm keeps the collectives' any-source receive
// posted at the head of the queue, so a window of user receives matches
// at index 1, which would otherwise copy the whole window per message.
func (q *fifo[T]) removeAt(i int) {
	if i == 0 { // the head, the usual match: no copy's call, even of nothing
		q.s[q.head] = nil
		q.head++
	} else if i == 1 && q.len() > 2 { // that window's case, without copy's call
		q.s[q.head+1] = q.s[q.head]
		q.s[q.head] = nil
		q.head++
	} else if i < q.len()/2 {
		copy(q.s[q.head+1:q.head+i+1], q.s[q.head:q.head+i])
		q.s[q.head] = nil
		q.head++
	} else {
		q.s = removeAt(q.s, q.head+i)
	}
	if q.head == len(q.s) {
		q.s, q.head = q.s[:0], 0
	}
}

// reset empties q, keeping its backing array.
func (q *fifo[T]) reset() {
	clear(q.s)
	q.s, q.head = q.s[:0], 0
}

// removeAt deletes s[i] keeping order and clears the vacated slot so the
// backing array does not keep the element alive.
func removeAt[T any](s []*T, i int) []*T {
	copy(s[i:], s[i+1:])
	s[len(s)-1] = nil
	return s[:len(s)-1]
}
