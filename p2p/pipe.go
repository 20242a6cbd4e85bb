package p2p

import (
	"fmt"
	"math"
	"runtime"
	"sync/atomic"

	"github.com/rdmago/rdmago/internal/ntcopy"
)

// The pipelined eager protocol (Options.PipelineLimit).
//
// Over tcp a rendezvous costs three trips through both kernels (RTS, READ
// request, READ response) where the data alone needs one, and from
// 128 KiB to 512 KiB the two extra trips cost more than the two copies
// that eager buffers take. A message in that range therefore goes as a
// train of PIPE frames, each filling one receive buffer, sent back to back
// under the usual credits: the receiver matches the message on its first
// fragment and copies each fragment into the receive's buffer as it
// arrives, while the sender is still copying out the next. The sender's
// request completes when its last fragment is posted, as an eager send
// does. A message that arrives before its receive is gathered into memory
// of its own, as an eager one is.
//
// The fragments of one message leave in order on the pair's queue pair
// (they enter the peer's queue together, under the endpoint's lock), but
// each carries the message id and its offset so the receiver never
// assumes it: a fragment of an unknown message, or out of order, is a
// protocol error.

// maxPipe caps PipelineLimit. A receiver refuses a larger PIPE message
// (a protocol error) rather than allocate what a corrupt header asks for.
const maxPipe = 64 << 20

// pipeIn is a pipelined message whose fragments are still arriving.
type pipeIn struct {
	size, got int
	id        uint64   // the sender's message id
	r         *Request // the receive it matched; nil while unexpected or when it is discarded
	in        *inbound // while unmatched: in.data gathers the fragments
	err       error    // the sender is gone: the rest will never come
	// steer is the peer's, armed for this message: its fragments from
	// steer.from on are in r's buffer already (see pipeSteer).
	steer *pipeSteer
	early bool // its steer started it; onPipe has yet to see its first fragment
}

// Steering. Over a provider that reads SEND payloads itself (tcp, loop:
// verbs.SendSteerer), a fragment's body would be copied twice in this
// process, from the socket's read buffer into a receive slot and from the
// slot into the receive's buffer. Instead the peer's pipeSteer, which the
// provider asks where each SEND's body goes once it has read the 40-byte
// header into the slot, is armed for a pipelined message that has matched
// a plain or parts receive (not a fold receive, which folds what comes)
// with the message's id and the receive's buffers, and the provider reads
// the body of each fragment of it straight there, at the offset its header
// names (a parts receive's head and body in two pieces).
//
// A message matches on its first fragment, and the provider may read that
// one and more before the endpoint handles the first (a reader goroutine,
// or a waiter that finds several frames queued, reads on). So the steer
// matches a first fragment itself (early), under ep.mu if it can take it
// at once, when every frame the peer sent before it has been handled:
// receives are taken in the order they were posted, and a receive's WR id
// carries its sequence number (recvWR), which must be the count of the
// peer's receive completions handled so far (doneSeq). Otherwise a
// fragment the provider read before the match comes through its slot and
// is copied as before; since one peer's fragments arrive in order, the
// steered ones are those from the first steered offset on (from), and
// onPipe skips their copies. One message per peer is steered at a time.
//
// The receive completes when its last fragment's completion is handled,
// after the provider is done with its buffer. A receive that fails while
// the provider may be reading into its buffer (the link broke under a
// fragment) is parked instead (ep.steerParked): it completes, with its
// error, once the provider has let go of the buffer (a later poll sees the
// steer no longer busy) or its queue pair is gone (Close), as a rendezvous
// READ in flight does.

// Steer states. The provider moves armed to busy while it reads a
// fragment's body into the buffer, or checks whether it may; the endpoint
// arms an off steer and disarms an armed one.
const (
	steerOff uint32 = iota
	steerArmed
	steerBusy
)

// pipeSteer is a peer's verbs.SendSteer.
type pipeSteer struct {
	ep    *Endpoint
	p     *peer
	state atomic.Uint32
	// The message steered and where it goes, head and then dst (a parts
	// receive's head and body, or a plain receive's buffer with head
	// empty; its size bytes together): the endpoint sets them while the
	// steer is off, the provider reads them while it holds it busy, and
	// segs holds what Steer returns.
	id        uint64
	head, dst []byte
	segs      [2][]byte
	// from is the offset of the first fragment the provider steered into
	// dst (math.MaxInt64 until one is): set by the provider before that
	// fragment's completion, read by onPipe after it.
	from atomic.Int64
}

// Steer implements verbs.SendSteer: a fragment of the armed message goes
// into its place in dst; a first fragment may match (and arm) first.
func (s *pipeSteer) Steer(id uint64, head []byte, rest int) [][]byte {
	if len(head) < pipeLen || head[0] != byte(kPipe) {
		return nil
	}
	mid, off := peekPipe(head)
	if off == 0 && s.state.Load() == steerOff && !s.early(id, rest) {
		return nil
	}
	if !s.state.CompareAndSwap(steerArmed, steerBusy) {
		return nil
	}
	size := uint64(len(s.head) + len(s.dst))
	if mid != s.id || off > size || uint64(rest) > size-off {
		s.state.Store(steerArmed)
		return nil
	}
	if s.from.Load() == math.MaxInt64 {
		s.from.Store(int64(off))
	}
	segs, o, n := s.segs[:0], int(off), rest
	if o < len(s.head) {
		k := min(n, len(s.head)-o)
		segs = append(segs, s.head[o:o+k])
		o, n = o+k, n-k
	}
	if n > 0 {
		o -= len(s.head)
		segs = append(segs, s.dst[o:o+n])
	}
	return segs
}

// Steered implements verbs.SendSteer. A failed read leaves part of a
// fragment in dst: the link is broken then, and so is the message.
func (s *pipeSteer) Steered(bool) { s.state.Store(steerArmed) }

// early handles the first fragment of a pipelined message as onPipe would,
// from the provider's goroutine, where that cannot change what any
// message matches: it reports whether the message matched a receive the
// steer is armed for now. It needs ep.mu at once, and the frames the peer
// sent before this one that the endpoint has not handled yet (the
// receive's WR id says how many) must all be such that the match would be
// the same after them: none that will match, or wait, as a message (see
// pendingMayMatch). Anything else is left to onPipe.
func (s *pipeSteer) early(wrid uint64, rest int) bool {
	ep, p := s.ep, s.p
	if !ep.mu.TryLock() {
		return false
	}
	defer ep.mu.Unlock()
	_, _, idx := splitWRID(wrid)
	if p.broken || p.departed || ep.failErr != nil || pipeLen+rest > p.slot {
		return false
	}
	// The provider read the header into the start of the receive's slot:
	// parseFrame reads it there and checks it against the frame's length.
	var h header
	if parseFrame(p.recvBuf(p.recvSlot(idx), uint32(pipeLen+rest)), &h) != nil ||
		h.flags&flagMarked != 0 || h.size > maxPipe {
		return false
	}
	key := splitKey{p.rank, h.id}
	if ep.pipes[key] != nil {
		return false
	}
	// Only for a receive the steer takes (see matchPipeLocked): any other
	// message, one nobody waits for yet or one a fold receive takes, is
	// onPipe's, which handles one that came whole in this fragment as an
	// EAGER message, without a pipeline's bookkeeping.
	r, _ := ep.m.peek(envelope{ctx: h.ctx, src: p.rank, tag: h.tag})
	if !r.steerable() || ep.pendingMayMatch(p, seqOf(idx), r) {
		return false
	}
	pi := ep.startPipeLocked(p, &h, key)
	pi.early = true
	return pi.steer != nil
}

// earlyLookMax bounds the unhandled frames early looks through.
const earlyLookMax = 16

// pendingMayMatch reports whether a frame p sent before the one with
// receive sequence number seq, read into its slot and not yet handled,
// may be a message that matches r (a message whose receive is not posted
// yet when r is nil: it would wait among the unexpected, ahead of this
// one). Such a frame is EAGER, RTS or the first PIPE fragment of a
// message not started early; BYE counts too. The frames are in their
// slots (the provider reads a connection's frames in order), and a frame
// whose receive the peer consumed without writing it (a WRITE with
// immediate) shows an older frame's bytes, which at worst says yes. The
// caller holds ep.mu.
func (ep *Endpoint) pendingMayMatch(p *peer, seq uint16, r *Request) bool {
	n := seq - p.doneSeq
	if n == 0 {
		return false
	}
	if n > earlyLookMax || int(n) > len(p.seqSlot) {
		return true
	}
	for q := p.doneSeq; q != seq; q++ {
		b := p.recvBuf(p.seqSlot[int(q)&(len(p.seqSlot)-1)], pipeLen)
		switch frameKind(b[0]) {
		case kEager, kRTS:
		case kPipe:
			id, off := peekPipe(b)
			if off != 0 {
				continue
			}
			if pi := ep.pipes[splitKey{p.rank, id}]; pi != nil && pi.early {
				continue
			}
		case kBye:
			return true
		default:
			continue
		}
		if r == nil {
			return true
		}
		if ctx, tag := peekEnv(b); r.pattern.fits(envelope{ctx: ctx, src: p.rank, tag: tag}) {
			return true
		}
	}
	return false
}

// arm steers the fragments of message id into head and then dst, if the
// steer is free. The caller holds ep.mu.
func (s *pipeSteer) arm(id uint64, head, dst []byte) bool {
	if s.state.Load() != steerOff {
		return false
	}
	s.id, s.head, s.dst = id, head, dst
	s.from.Store(math.MaxInt64)
	s.state.Store(steerArmed)
	return true
}

// steered reports whether the fragment at offset off is in place already.
func (s *pipeSteer) steered(off uint64) bool { return int64(off) >= s.from.Load() }

// disarm frees the steer once the provider is not busy with it, trying
// for at most spins looks (spins < 0: until it is); it reports whether
// it did. The caller holds ep.mu.
func (s *pipeSteer) disarm(spins int) bool {
	for i := 0; ; i++ {
		if s.state.CompareAndSwap(steerArmed, steerOff) {
			s.head, s.dst, s.segs = nil, nil, [2][]byte{}
			return true
		}
		if spins >= 0 && i >= spins {
			return false
		}
		runtime.Gosched()
	}
}

// steerParked is a receive that failed while the provider might still be
// reading into its buffer (see Steering).
type steerParked struct {
	r   *Request
	s   *pipeSteer
	err error
}

// unparkLocked completes the parked receives whose provider has let go of
// their buffers (all of them when force: their queue pairs are gone). The
// caller holds ep.mu.
func (ep *Endpoint) unparkLocked(force bool) {
	kept := ep.steerParked[:0]
	for _, pk := range ep.steerParked {
		if pk.s.disarm(0) || force {
			ep.completeLocked(pk.r, ep.opErr(pk.r, pk.err))
			continue
		}
		kept = append(kept, pk)
	}
	clear(ep.steerParked[len(kept):])
	ep.steerParked = kept
}

// steersWhole reports whether a message of n bytes to p within its eager
// limit (in one buffer, or of two parts, head and body: IsendParts) goes
// as PIPE fragments anyway: a provider that steers a SEND's body
// (verbs.SendSteerer) reads a matched fragment's straight into the
// receive's buffers, where an EAGER frame's lands in a receive slot and
// is copied out of it. It goes as one fragment (sendPipe), which a
// receive slot holds up to the eager limit.
func (p *peer) steersWhole(n int) bool {
	return p.steer != nil && n > steerWholeMin
}

// steerWholeMin is the least steersWhole sends as PIPE fragments: above it
// the slot's copies cost more than a pipeline's bookkeeping where slots are
// cold (many messages in flight); at 16 KiB a 2-host bcast, one message at
// a time, took 1.02-1.04 of the time (docs/p2p.md).
const steerWholeMin = 32 << 10

// sendPipe queues r's message (r.head, a parts message's, and then buf) to
// p as PIPE fragments; r completes when the last one is posted. The first
// fragment carries the head (post). One within the eager limit goes as
// one fragment, which its slot holds: cut at the pipeline's fragment
// size, one a few bytes over it took a second frame for them (a 2-host
// bcast of 256 KiB and its header took 1.16 of the time). Called with
// ep.mu held.
func (p *peer) sendPipe(ep *Endpoint, r *Request, ctxID uint32, tag int, buf []byte) error {
	frag, hl := p.frag, len(r.head)
	size := hl + len(buf)
	if size <= p.eager {
		frag = max(frag, size)
	}
	n := (size + frag - 1) / frag
	items := make([]outItem, n)
	ep.nextID++
	id := ep.nextID
	for i := range items {
		off := i * frag
		items[i] = outItem{h: header{kind: kPipe, ctx: ctxID, tag: int32(tag), size: uint64(size),
			id: id, addr: uint64(off)}, payload: buf[max(off-hl, 0) : min(off+frag, size)-hl], req: r}
	}
	items[n-1].complete = true
	r.pipeFirst = &items[0]
	p.stats.PipeSent.add(size)
	for i := range items {
		if err := p.send(ep, &items[i]); err != nil {
			return err
		}
	}
	return nil
}

// onPipe handles one PIPE fragment from p.
func (ep *Endpoint) onPipe(p *peer, h *header, data []byte) {
	key := splitKey{p.rank, h.id}
	pi := ep.pipes[key]
	if h.addr == 0 {
		switch {
		case pi != nil && pi.early && pi.got == 0:
			pi.early = false // its steer matched it when the provider read it
		case pi != nil:
			ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("PIPE message %d started twice", h.id)})
			return
		case h.size > maxPipe:
			ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("PIPE message of %d bytes exceeds %d", h.size, maxPipe)})
			return
		case h.size == uint64(len(data)):
			// Whole in this one fragment, and not steered (its steer left
			// it): what an EAGER frame would have been.
			p.stats.PipeRecv.add(len(data))
			ep.arriveEagerLocked(envelope{ctx: h.ctx, src: p.rank, tag: h.tag}, data)
			return
		default:
			pi = ep.startPipeLocked(p, h, key)
		}
	} else if pi == nil || h.addr != uint64(pi.got) {
		ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("PIPE fragment at offset %d of message %d out of order", h.addr, h.id)})
		return
	} else if h.size != uint64(pi.size) {
		// Its steer measured it against the size the first fragment gave,
		// and may have left it in its slot.
		ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("PIPE fragment of message %d says %d bytes, its first said %d", h.id, h.size, pi.size)})
		return
	}
	switch {
	case pi.r != nil && pi.r.foldSplits(pi.got, len(data), pi.size):
		r := pi.r
		pi.r = nil // the rest is discarded
		ep.completeLocked(r, ep.opErr(r, foldSplitError(pi.got, len(data), int(r.unit))))
	case pi.r != nil && pi.steer != nil && pi.steer.steered(h.addr):
		p.stats.SteeredRecv.add(len(data))
	case pi.r != nil:
		pi.r.place(pi.got, data)
	case pi.in != nil:
		ntcopy.Bulk(pi.in.data[pi.got:], data)
	}
	pi.got += len(data)
	if pi.got < pi.size {
		return
	}
	delete(ep.pipes, key)
	if pi.in != nil {
		pi.in.pipe = nil // complete: an ordinary unexpected eager message now
	}
	if pi.steer != nil {
		// Every fragment is read: the provider can only be looking at
		// another message's header.
		pi.steer.disarm(-1)
		pi.steer = nil
	}
	if pi.r != nil {
		ep.completeLocked(pi.r, nil)
	}
}

// startPipeLocked starts pipelined message h from p, whose first fragment
// has come: it matches a posted receive or waits among the unexpected.
func (ep *Endpoint) startPipeLocked(p *peer, h *header, key splitKey) *pipeIn {
	env := envelope{ctx: h.ctx, src: p.rank, tag: h.tag}
	p.stats.PipeRecv.add(int(h.size))
	pi := &pipeIn{size: int(h.size), id: h.id}
	ep.pipes[key] = pi
	if r := ep.m.arrive(env); r != nil {
		ep.matchPipeLocked(r, env, pi)
	} else {
		pi.in = &inbound{env: env, size: pi.size, data: ep.spare.take(pi.size), pipe: pi}
		ep.m.addUnexpected(pi.in)
		ep.wakeArrivalsLocked()
	}
	return pi
}

// matchPipeLocked makes r the receive of pipelined message pi (env): it
// takes the fragments from now on; what has arrived already is in pi.in.
func (ep *Endpoint) matchPipeLocked(r *Request, env envelope, pi *pipeIn) {
	r.status = Status{Source: env.src, Tag: int(env.tag), Count: pi.size}
	in := pi.in
	pi.in = nil
	switch {
	case pi.err != nil:
		ep.completeLocked(r, ep.opErr(r, pi.err))
	case pi.size > r.capacity():
		r.status.Count = 0
		ep.completeLocked(r, ep.opErr(r, &TruncatedError{Size: pi.size, Cap: r.capacity()}))
	default:
		if in != nil {
			// What arrived so far: whole fragments, so whole elements
			// for a fold receive (see foldSplits).
			r.place(0, in.data[:pi.got])
			ep.spare.put(in.data) // the rest is placed as it comes
			in.data = nil
		}
		if pi.got == pi.size {
			ep.completeLocked(r, nil)
			return
		}
		pi.r = r
		if s := ep.peers[env.src].steer; s != nil && r.steerable() {
			h := r.head[:min(len(r.head), pi.size)]
			if s.arm(pi.id, h, r.buf[:pi.size-len(h)]) {
				pi.steer = s
			}
		}
	}
}

// steerable reports whether the steer may take receive r's message: a
// plain or parts receive, whose buffers take the fragments as they are
// (not a fold receive, which folds them; nor a staged one). False for nil.
func (r *Request) steerable() bool { return r != nil && r.fold == nil && !r.staged() }

// fail ends pi because its sender is gone (or the endpoint failed).
func (pi *pipeIn) fail(ep *Endpoint, err error) {
	pi.err = err
	if pi.r != nil {
		if s := pi.steer; s != nil && !s.disarm(steerFailSpins) {
			ep.steerParked = append(ep.steerParked, steerParked{r: pi.r, s: s, err: err})
		} else {
			ep.completeLocked(pi.r, ep.opErr(pi.r, err))
		}
		pi.r, pi.steer = nil, nil
	}
}

// steerFailSpins bounds how long a failing pipelined receive waits for the
// provider to leave its steer before it is parked: long enough for a look
// at a header, not for a read that waits for the network.
const steerFailSpins = 64

// dropPipesLocked fails the pipelined messages still arriving from p,
// which can send no more. One not matched yet leaves the unexpected queue:
// a receive must not match half a message.
func (ep *Endpoint) dropPipesLocked(p *peer, cause error) {
	for k, pi := range ep.pipes {
		if k.peer != p.rank {
			continue
		}
		delete(ep.pipes, k)
		if pi.in != nil {
			in := pi.in
			ep.m.removeUnexpected(func(x *inbound) bool { return x == in })
		}
		pi.fail(ep, cause)
	}
}
