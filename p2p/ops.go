package p2p

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/verbs"
)

// Channel is a matching context of an endpoint: messages sent on a channel
// match only receives posted on a channel with the same id at the
// receiver, so libraries (the collectives, a Dup'ed communicator) keep their
// traffic apart from the program's by using their own ids. Channel 0 is the
// endpoint's own methods. Ids at and above FirstReservedContext belong to
// this package.
//
// All methods are safe for concurrent use.
type Channel struct {
	ep *Endpoint
	id uint32
}

// Channel returns the channel with context id.
func (ep *Endpoint) Channel(id uint32) (*Channel, error) {
	if id >= FirstReservedContext {
		return nil, &Error{Op: "Channel", Rank: ep.rank, Peer: NoPeer, Tag: NoTag,
			Err: fmt.Errorf("%w: context id %#x is reserved (ids from %#x belong to p2p)", ErrInvalidArgument, id, FirstReservedContext)}
	}
	return &Channel{ep: ep, id: id}, nil
}

// ID is the channel's context id.
func (c *Channel) ID() uint32 { return c.id }

// Endpoint is the channel's endpoint.
func (c *Channel) Endpoint() *Endpoint { return c.ep }

func (c *Channel) argErr(op string, peer, tag int, err error) error {
	return &Error{Op: op, Rank: c.ep.rank, Peer: peer, Tag: tag, Err: err}
}

func (c *Channel) checkPeer(op string, peer, tag int, wildcard bool) error {
	if uint(peer) < uint(c.ep.size) || wildcard && peer == AnySource {
		return nil
	}
	return c.rankErr(op, peer, tag)
}

// rankErr is checkPeer's error, made apart so that the check inlines into
// every call that sends or receives.
func (c *Channel) rankErr(op string, peer, tag int) error {
	return c.argErr(op, peer, tag, fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, peer, c.ep.size))
}

func (c *Channel) checkTag(op string, peer, tag int, wildcard bool) error {
	if tag >= 0 && tag <= MaxTag || wildcard && tag == AnyTag {
		return nil
	}
	return c.tagErr(op, peer, tag)
}

// tagErr is checkTag's error (see rankErr).
func (c *Channel) tagErr(op string, peer, tag int) error {
	return c.argErr(op, peer, tag, fmt.Errorf("%w: tag %d is not in [0, %d]", ErrInvalidTag, tag, MaxTag))
}

// Isend starts sending buf to peer with tag. Messages up to EagerLimit
// bytes are copied out at once (the request usually completes before Isend
// returns); larger ones are read by the receiver straight from buf, which
// must stay untouched until the request completes.
func (c *Channel) Isend(peer, tag int, buf []byte) (*Request, error) {
	return c.isendParts("Isend", peer, tag, nil, buf)
}

// Send sends buf to peer with tag and returns when buf may be reused: at
// once for an eager message, after the receiver has taken the data for a
// rendezvous one. When ctx ends before the receiver matched the message,
// the send is canceled and the error names the receiver; when the
// receiver has not answered the cancel yet, the error says the send is
// still in progress, and the receiver may still read buf until it does.
func (c *Channel) Send(ctx context.Context, peer, tag int, buf []byte) error {
	if done, err := c.SendNow(peer, tag, buf); done {
		return err
	}
	r, err := c.isendParts("Send", peer, tag, nil, buf)
	if err != nil {
		return err
	}
	if !r.done.Load() {
		if err := r.ep.wait(ctx, r); err != nil {
			return err // r may still be referenced: let the GC have it
		}
	}
	err = r.err
	c.ep.putReq(r)
	return err
}

// IsendParts is Isend of one message made of two buffers, head and then
// body, as a send with a gather list of two entries (writev): a layer
// that frames its messages with a header of its own sends the header and
// the payload from where they are, rather than copying both into one
// buffer first. The receiver sees one message of len(head)+len(body)
// bytes. Both buffers belong to the request until it completes. A message
// sent eagerly goes from the two buffers straight into the peer's ring or
// the frame; a larger one, one to this rank, or a head longer than a
// ring's first line (48 bytes) is joined into one buffer first.
func (c *Channel) IsendParts(peer, tag int, head, body []byte) (*Request, error) {
	return c.isendParts("IsendParts", peer, tag, head, body)
}

// isendParts sends the message head, then buf (nil head: buf alone).
func (c *Channel) isendParts(op string, peer, tag int, head, buf []byte) (*Request, error) {
	ep := c.ep
	if err := c.checkPeer(op, peer, tag, false); err != nil {
		return nil, err
	}
	if err := c.checkTag(op, peer, tag, c.id >= FirstReservedContext); err != nil {
		return nil, err
	}
	if head != nil && (peer == ep.rank || !ep.peers[peer].sendsParts(len(head), len(head)+len(buf))) {
		buf = append(append(make([]byte, 0, len(head)+len(buf)), head...), buf...)
		head = nil
	}
	if peer == ep.rank {
		r := ep.getReq()
		c.initSend(r, peer, tag, buf)
		return r, c.sendSelf(r)
	}
	p := ep.peers[peer]
	n := len(head) + len(buf)
	large := n > p.pipedMax()
	var reg *regEntry
	if large {
		var err error
		if reg, err = p.dev.cache.get(buf); err != nil {
			return nil, c.argErr(op, peer, tag, fmt.Errorf("registering the send buffer: %w", err))
		}
	}
	ep.mu.Lock()
	if !large && n <= p.eager && len(p.queue) == 0 && !p.departed && ep.checkLocked() == nil {
		// The ring: written after the lock is let go (ringClaim).
		var slot ringSlot
		if ep.ringClaim(p, c.id, n, &slot) {
			r := ep.newReqLocked()
			c.initSend(r, peer, tag, buf)
			if head != nil {
				p.initParts(r, head, n)
			}
			r.done.setUnshared() // no waiter: isendParts returns r after the write
			ep.mu.Unlock()
			ep.ringWrite(p, &slot, c.id, int32(tag), head, buf)
			return r, nil
		}
	}
	defer ep.mu.Unlock()
	if err := ep.checkLocked(); err == nil && p.departed {
		err = &PeerClosedError{Rank: peer}
		if reg != nil {
			p.dev.cache.put(reg)
		}
		return nil, c.argErr(op, peer, tag, err)
	} else if err != nil {
		if reg != nil {
			p.dev.cache.put(reg)
		}
		return nil, c.argErr(op, peer, tag, err)
	}
	// A message of two parts stays eager: an RTS carries no head, and
	// joining them would copy the body the rendezvous spares.
	if !large && head == nil && ep.rndvInsteadLocked(p, c.id, peer, len(buf)) {
		if rg, err := p.dev.cache.get(buf); err == nil { // else the pipeline
			large, reg = true, rg
		}
	}
	r := ep.newReqLocked()
	c.initSend(r, peer, tag, buf)
	if head != nil {
		p.initParts(r, head, n) // an eager or PIPE message (sendsParts): its (first) item posts the head first
	}
	switch {
	case (len(buf) > p.eager || p.steersWhole(n)) && !large:
		if err := p.sendPipe(ep, r, c.id, tag, buf); err != nil {
			return nil, c.argErr(op, peer, tag, err)
		}
		return r, nil
	case !large:
		r.item = outItem{h: header{kind: kEager, ctx: c.id, tag: int32(tag), size: uint64(n)},
			payload: buf, req: r, complete: true}
		p.stats.eagerSent(c.id, n, false)
	default:
		ep.nextID++
		r.id, r.reg, r.dev = ep.nextID, reg, p.dev
		ep.rndvSends[r.id] = r
		r.item = outItem{h: header{kind: kRTS, ctx: c.id, tag: int32(tag), size: uint64(len(buf)),
			addr: reg.addr(buf), rkey: reg.mr.RKey(), id: r.id}, req: r}
		if _, ok := p.qp.(verbs.PeerWriter); ok && !p.noWrite && len(buf) >= rndvSplitMin {
			r.item.h.flags = flagCanWrite
		}
	}
	if err := p.send(ep, &r.item); err != nil {
		return nil, c.argErr(op, peer, tag, err)
	}
	return r, nil
}

// rndvInsteadLocked reports whether a message of n bytes to p on context
// ctxID, one the eager protocol or the pipeline would send, takes the
// rendezvous's single copy instead; the caller holds ep.mu.
func (ep *Endpoint) rndvInsteadLocked(p *peer, ctxID uint32, peer, n int) bool {
	if p.singleCopy(n) {
		return true
	}
	if p.dev.traits.SharesMemory {
		// Traffic both ways: both cores copy already, and the pipeline's
		// two copies a message (the sender's in, the receiver's out) cost
		// more than the rendezvous's one (the receiver's READ). Not where
		// ranks outnumber CPUs: a rendezvous there waits for the
		// receiver's turn on a CPU and then the sender's (crowdedShmPipe).
		return n >= bothWaysMin && !p.dev.crowded && ep.m.expects(ctxID, peer, bothWaysScan)
	}
	// A window of large messages: earlier ones' frames wait for credits.
	// Then the pipeline's copies (into a receive buffer and out of it)
	// bound the stream, where the rendezvous's READ response goes from the
	// sender's buffer into place: over tcp at 256 KiB 1.09-1.16x the bw
	// and 1.16-1.17x the bibw. A message sent alone keeps the pipeline's
	// single trip (see pipe.go). Not at two fragments or less: a 128 KiB
	// window that mixed the two read bibw 0.69-0.74 of the pipeline's.
	// Where the eager limit is large (tcp's), the same holds for eager
	// messages above windowRndvMin: a backed-up link copies each into a
	// staging slot before the kernel copies it again.
	return n > min(2*p.eager, windowRndvMin) && len(p.queue) > 0
}

// windowRndvMin caps the size above which a message sent in a backed-up
// window takes the rendezvous (rndvInsteadLocked): twice the 64 KiB eager
// limit tcp had when the rule was measured.
const windowRndvMin = 128 << 10

// initParts makes send r, initSend's, one of head and then its buf, n
// bytes in all, and counts it.
func (p *peer) initParts(r *Request, head []byte, n int) {
	r.head, r.status.Count = head, n
	p.stats.PartsSent.add(n)
}

// initSend fills in a new send request's envelope.
func (c *Channel) initSend(r *Request, peer, tag int, buf []byte) {
	r.op, r.peer, r.pattern, r.buf = opSend, peer, envelope{ctx: c.id, src: c.ep.rank, tag: int32(tag)}, buf
	r.status = Status{Source: c.ep.rank, Tag: tag, Count: len(buf)}
}

// SendNow sends buf to peer now if the message can go at once without a
// Request: an eager message to another rank with nothing queued before it,
// a credit and a staging slot free. It reports true then, and buf may be
// reused as soon as it returns; an error names a failed post. false means
// nothing was done: the caller sends the usual way (Isend or Send), which
// also reports bad arguments. It never blocks. It is Send's fast path: a
// blocking call would only take a Request from the pool, wait on it and
// give it back, a round trip through the pool and the lock that was a
// sixth of an 8-byte shm ping-pong's software time.
func (c *Channel) SendNow(peer, tag int, buf []byte) (bool, error) {
	return c.sendNow(peer, tag, nil, buf)
}

// SendPartsNow is SendNow for a message of head and then body, as
// IsendParts sends it: both buffers may be reused as soon as it returns
// true. It also does nothing, and says false, where IsendParts would join
// the two into one buffer first (a head longer than a ring line's room, a
// message that does not go eagerly from two buffers).
func (c *Channel) SendPartsNow(peer, tag int, head, body []byte) (bool, error) {
	return c.sendNow(peer, tag, head, body)
}

// sendNow is SendNow and SendPartsNow (head nil: buf alone).
func (c *Channel) sendNow(peer, tag int, head, buf []byte) (bool, error) {
	ep := c.ep
	if peer < 0 || peer >= ep.size || peer == ep.rank || tag < 0 || tag > MaxTag {
		return false, nil
	}
	p := ep.peers[peer]
	n := len(head) + len(buf)
	if n > p.eager || head != nil && !p.sendsParts(len(head), n) || p.steersWhole(n) {
		return false, nil
	}
	ep.mu.Lock()
	if ep.checkLocked() != nil || p.departed || len(p.queue) > 0 || head == nil && p.singleCopy(n) {
		ep.mu.Unlock()
		return false, nil
	}
	var s ringSlot
	if ep.ringClaim(p, c.id, n, &s) {
		if head != nil {
			p.stats.PartsSent.add(n)
		}
		ep.mu.Unlock()
		ep.ringWrite(p, &s, c.id, int32(tag), head, buf)
		return true, nil
	}
	defer ep.mu.Unlock()
	if !p.frameRoom(true) {
		return false, nil
	}
	h := header{kind: kEager, ctx: c.id, tag: int32(tag), size: uint64(n)}
	if err := p.postFrame(ep, &h, head, buf, true); err != nil {
		err = fmt.Errorf("posting EAGER: %w", err)
		ep.linkErrorLocked(p, err)
		if ep.failErr != nil {
			err = ep.failErr
		}
		return true, c.argErr("Send", peer, tag, err)
	}
	p.stats.eagerSent(c.id, n, false)
	if head != nil {
		p.stats.PartsSent.add(n)
	}
	return true, nil
}

// sendSelf delivers a message to this rank: it is copied, so the send
// completes at once whatever its size.
func (c *Channel) sendSelf(r *Request) error {
	ep := c.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if err := ep.checkLocked(); err != nil {
		return c.argErr("Isend", r.peer, int(r.pattern.tag), err)
	}
	ep.selfStats.EagerSent.add(len(r.buf))
	ep.selfStats.EagerRecv.add(len(r.buf))
	ep.arriveEagerLocked(r.pattern, r.buf)
	ep.completeLocked(r, nil)
	return nil
}

// Irecv starts receiving a message from src (or AnySource) with tag (or
// AnyTag) into buf. A message larger than buf completes the request with
// an error matching ErrTruncated (a *TruncatedError with both sizes);
// buf's contents are then unspecified.
func (c *Channel) Irecv(src, tag int, buf []byte) (*Request, error) {
	return c.irecv("Irecv", src, tag, buf)
}

// Recv receives a message from src (or AnySource) with tag (or AnyTag) into
// buf and returns its status. When ctx ends first, the error wraps a
// *DeadlineError naming src; if the message had already begun to arrive,
// the error says it is still in progress, and buf may be written until
// the transfer ends (see Request.Wait).
func (c *Channel) Recv(ctx context.Context, src, tag int, buf []byte) (Status, error) {
	// Post, poll once and, when that completed the receive, recycle the
	// request, all in one hold of the endpoint's mutex: taking it for each
	// step was most of the locking of an 8-byte shm ping-pong.
	ep := c.ep
	if !c.recvArgsOK(src, tag) {
		return Status{}, c.recvArgsErr("Recv", src, tag)
	}
	ep.mu.Lock()
	r, err := c.irecvLocked("Recv", src, tag, buf)
	if err != nil {
		ep.mu.Unlock()
		return Status{}, err
	}
	if !r.done.Load() {
		ep.cleanLocked() // the previous receive's request, while this one waits
		ep.progressHeldLocked()
	}
	if r.done.Load() {
		st, err := r.status, r.err
		ep.putReqLaterLocked(r)
		ep.mu.Unlock()
		return st, err
	}
	ep.mu.Unlock()
	done, held := ep.pollHeld(ctx, r)
	if held { // the poll that completed r still holds the mutex
		st, err := r.status, r.err
		ep.putReqLaterLocked(r)
		ep.mu.Unlock()
		return st, err
	}
	if !done {
		if err := ep.block(ctx, r); err != nil {
			return Status{}, err
		}
	}
	st, err := r.status, r.err
	ep.putReq(r)
	return st, err
}

// checkRecvArgs checks a receive's source (a rank or AnySource) and tag (a
// user tag or AnyTag).
func (c *Channel) checkRecvArgs(op string, src, tag int) error {
	if c.recvArgsOK(src, tag) {
		return nil
	}
	return c.recvArgsErr(op, src, tag)
}

// recvArgsOK is checkRecvArgs's check alone, which inlines into the
// receives: both wildcards are -1, so one comparison each.
func (c *Channel) recvArgsOK(src, tag int) bool {
	return uint(src+1) <= uint(c.ep.size) && uint(tag+1) <= MaxTag+1
}

// recvArgsErr is checkRecvArgs's error (see rankErr).
func (c *Channel) recvArgsErr(op string, src, tag int) error {
	if err := c.checkPeer(op, src, tag, true); err != nil {
		return err
	}
	return c.checkTag(op, src, tag, true)
}

func (c *Channel) irecv(op string, src, tag int, buf []byte) (*Request, error) {
	ep := c.ep
	if !c.recvArgsOK(src, tag) {
		return nil, c.recvArgsErr(op, src, tag)
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return c.irecvLocked(op, src, tag, buf)
}

// IrecvFold is Irecv for a reduction: instead of copying the message into
// buf it calls fold(buf[off:off+len(piece)], piece) for each piece of the
// message as it arrives, in order, so that the reduction overlaps the
// transfer and the message is not copied first. unit is the size in bytes
// of fold's elements: pieces start at multiples of it and, but for the
// last, are whole elements (a message in pieces that split elements, from
// a peer with another eager limit, fails the request with
// ErrInvalidArgument). fold must treat each element on its own (an
// element-wise reduction); it runs with the endpoint's lock held, on
// whichever goroutine makes progress, and must not call the endpoint. A
// message shorter than buf folds into buf's prefix; a longer one
// completes the request with ErrTruncated, buf's contents unspecified. A
// message sent by rendezvous lands in memory of the endpoint's first and
// is folded once complete.
func (c *Channel) IrecvFold(src, tag int, buf []byte, unit int, fold func(dst, src []byte)) (*Request, error) {
	ep := c.ep
	if err := c.checkRecvArgs("IrecvFold", src, tag); err != nil {
		return nil, err
	}
	if fold == nil || unit < 1 {
		return nil, c.argErr("IrecvFold", src, tag, fmt.Errorf("%w: fold needs a function and an element size of at least 1 (got %d)", ErrInvalidArgument, unit))
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return c.irecvPlacedLocked("IrecvFold", src, tag, nil, buf, unit, fold)
}

// IrecvParts is Irecv into two buffers, as a receive with a scatter list
// of two entries (readv): the message's first len(head) bytes land in
// head, the rest in body, each straight from where the message arrived.
// A layer that frames its messages with a header of its own receives the
// header apart from the payload and the payload in its place, rather
// than all of it into staging memory and the payload copied again from
// there. The message may be as long as both together; Status.Count is
// its whole length. A longer one completes the request with ErrTruncated
// and, if it came eagerly, with as much of it placed as fits (so head
// holds its head). A message sent by rendezvous lands in memory of the
// endpoint's first and is placed once complete.
func (c *Channel) IrecvParts(src, tag int, head, body []byte) (*Request, error) {
	ep := c.ep
	if err := c.checkRecvArgs("IrecvParts", src, tag); err != nil {
		return nil, err
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return c.irecvPlacedLocked("IrecvParts", src, tag, head, body, 0, nil)
}

// irecvLocked is irecv after the argument checks; the caller holds ep.mu.
func (c *Channel) irecvLocked(op string, src, tag int, buf []byte) (*Request, error) {
	return c.irecvPlacedLocked(op, src, tag, nil, buf, 0, nil)
}

// irecvPlacedLocked is irecvLocked with head (IrecvParts) or fold and unit
// (IrecvFold); nil for a plain receive.
func (c *Channel) irecvPlacedLocked(op string, src, tag int, head, buf []byte, unit int, fold func(dst, src []byte)) (*Request, error) {
	ep := c.ep
	if err := ep.checkLocked(); err != nil {
		return nil, c.argErr(op, src, tag, err)
	}
	r := ep.newReqLocked()
	r.op, r.peer, r.pattern, r.buf = opRecv, src, envelope{ctx: c.id, src: src, tag: int32(tag)}, buf
	if fold != nil || head != nil {
		// (A request comes from the pool cleared: a plain receive, most
		// of them, has nothing to store here.)
		r.fold, r.unit, r.head = fold, int32(unit), head
	}
	if in := ep.m.find(r.pattern, true); in != nil {
		ep.deliverLocked(r, in)
		ep.flushDirtyLocked()
		return r, nil
	}
	if src >= 0 && src != ep.rank && ep.peers[src].departed {
		return nil, c.argErr(op, src, tag, &PeerClosedError{Rank: src})
	}
	ep.m.post(r)
	return r, nil
}

// Iprobe reports whether a message from src (or AnySource) with tag (or
// AnyTag) has arrived and not been received, and its status, without
// receiving it. Another goroutine may receive it before this one does; use
// Improbe for a probe-then-receive that cannot race.
func (c *Channel) Iprobe(src, tag int) (Status, bool, error) {
	in, err := c.probe(context.Background(), "Iprobe", src, tag, false, false)
	if err != nil || in == nil {
		return Status{}, false, err
	}
	return Status{Source: in.env.src, Tag: int(in.env.tag), Count: in.size}, true, nil
}

// Probe waits until a message from src with tag has arrived and returns its
// status without receiving it.
func (c *Channel) Probe(ctx context.Context, src, tag int) (Status, error) {
	in, err := c.probe(ctx, "Probe", src, tag, false, true)
	if err != nil {
		return Status{}, err
	}
	return Status{Source: in.env.src, Tag: int(in.env.tag), Count: in.size}, nil
}

// Message is a message claimed by a matched probe: it is no longer visible
// to other receives or probes, and only Message.Recv can receive it.
type Message struct {
	c      *Channel
	in     *inbound
	status Status
	taken  bool
}

// Status is the claimed message's source, tag and size.
func (m *Message) Status() Status { return m.status }

// Improbe is Iprobe that also claims the message (MPI_Improbe).
func (c *Channel) Improbe(src, tag int) (*Message, bool, error) {
	in, err := c.probe(context.Background(), "Improbe", src, tag, true, false)
	if err != nil || in == nil {
		return nil, false, err
	}
	return &Message{c: c, in: in, status: Status{Source: in.env.src, Tag: int(in.env.tag), Count: in.size}}, true, nil
}

// Mprobe waits for a message like Probe and claims it (MPI_Mprobe).
func (c *Channel) Mprobe(ctx context.Context, src, tag int) (*Message, error) {
	in, err := c.probe(ctx, "Mprobe", src, tag, true, true)
	if err != nil {
		return nil, err
	}
	return &Message{c: c, in: in, status: Status{Source: in.env.src, Tag: int(in.env.tag), Count: in.size}}, nil
}

// Irecv starts receiving the claimed message into buf (MPI_Imrecv). A
// message is received once; a second call fails.
func (m *Message) Irecv(buf []byte) (*Request, error) {
	c := m.c
	ep := c.ep
	r := &Request{ep: ep, op: opRecv, peer: m.status.Source,
		pattern: envelope{ctx: c.id, src: m.status.Source, tag: int32(m.status.Tag)}, buf: buf}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if m.taken {
		return nil, c.argErr("Mrecv", m.status.Source, m.status.Tag, fmt.Errorf("%w: message already received", ErrInvalidArgument))
	}
	if err := ep.checkLocked(); err != nil {
		return nil, c.argErr("Mrecv", m.status.Source, m.status.Tag, err)
	}
	m.taken = true
	ep.deliverLocked(r, m.in)
	ep.flushDirtyLocked()
	m.in = nil
	return r, nil
}

// Recv receives the claimed message into buf (MPI_Mrecv).
func (m *Message) Recv(ctx context.Context, buf []byte) (Status, error) {
	r, err := m.Irecv(buf)
	if err != nil {
		return Status{}, err
	}
	return r.Wait(ctx)
}

func (c *Channel) probe(ctx context.Context, op string, src, tag int, claim, block bool) (*inbound, error) {
	ep := c.ep
	if err := c.checkPeer(op, src, tag, true); err != nil {
		return nil, err
	}
	if err := c.checkTag(op, src, tag, true); err != nil {
		return nil, err
	}
	pattern := envelope{ctx: c.id, src: src, tag: int32(tag)}
	look := func() (*inbound, error) {
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if err := ep.checkLocked(); err != nil {
			return nil, c.argErr(op, src, tag, err)
		}
		if in := ep.m.find(pattern, claim); in != nil {
			return in, nil
		}
		if src >= 0 && src != ep.rank && ep.peers[src].departed {
			return nil, c.argErr(op, src, tag, &PeerClosedError{Rank: src})
		}
		return nil, nil
	}
	ep.progress()
	in, err := look()
	if in != nil || err != nil || !block {
		return in, err
	}
	var ch chan struct{}
	for {
		var found *inbound
		var ferr error
		if ep.poll(ctx, func() bool { found, ferr = look(); return found != nil || ferr != nil }) {
			return found, ferr
		}
		if ch == nil {
			ch = make(chan struct{}, 1)
		}
		ep.mu.Lock()
		ep.arrivals = append(ep.arrivals, ch)
		ep.mu.Unlock()
		if in, err := look(); in != nil || err != nil {
			return in, err
		}
		ep.handOff()
		select {
		case <-ch:
		case <-ctx.Done():
			de := &DeadlineError{Any: src == AnySource, What: "no matching message", Cause: ctx.Err()}
			if src >= 0 {
				de.Ranks = []int{src}
			}
			return nil, c.argErr(op, src, tag, de)
		}
	}
}

// The endpoint's own point-to-point methods use matching context 0.

// Isend is Channel.Isend on context 0.
func (ep *Endpoint) Isend(peer, tag int, buf []byte) (*Request, error) {
	return ep.ch0.Isend(peer, tag, buf)
}

// Send is Channel.Send on context 0.
func (ep *Endpoint) Send(ctx context.Context, peer, tag int, buf []byte) error {
	return ep.ch0.Send(ctx, peer, tag, buf)
}

// SendNow is Channel.SendNow on context 0.
func (ep *Endpoint) SendNow(peer, tag int, buf []byte) (bool, error) {
	return ep.ch0.SendNow(peer, tag, buf)
}

// SendPartsNow is Channel.SendPartsNow on context 0.
func (ep *Endpoint) SendPartsNow(peer, tag int, head, body []byte) (bool, error) {
	return ep.ch0.SendPartsNow(peer, tag, head, body)
}

// Irecv is Channel.Irecv on context 0.
func (ep *Endpoint) Irecv(src, tag int, buf []byte) (*Request, error) {
	return ep.ch0.Irecv(src, tag, buf)
}

// IrecvFold is Channel.IrecvFold on context 0.
func (ep *Endpoint) IrecvFold(src, tag int, buf []byte, unit int, fold func(dst, src []byte)) (*Request, error) {
	return ep.ch0.IrecvFold(src, tag, buf, unit, fold)
}

// IsendParts is Channel.IsendParts on context 0.
func (ep *Endpoint) IsendParts(peer, tag int, head, body []byte) (*Request, error) {
	return ep.ch0.IsendParts(peer, tag, head, body)
}

// IrecvParts is Channel.IrecvParts on context 0.
func (ep *Endpoint) IrecvParts(src, tag int, head, body []byte) (*Request, error) {
	return ep.ch0.IrecvParts(src, tag, head, body)
}

// Recv is Channel.Recv on context 0.
func (ep *Endpoint) Recv(ctx context.Context, src, tag int, buf []byte) (Status, error) {
	return ep.ch0.Recv(ctx, src, tag, buf)
}

// Iprobe is Channel.Iprobe on context 0.
func (ep *Endpoint) Iprobe(src, tag int) (Status, bool, error) { return ep.ch0.Iprobe(src, tag) }

// Probe is Channel.Probe on context 0.
func (ep *Endpoint) Probe(ctx context.Context, src, tag int) (Status, error) {
	return ep.ch0.Probe(ctx, src, tag)
}

// Improbe is Channel.Improbe on context 0.
func (ep *Endpoint) Improbe(src, tag int) (*Message, bool, error) { return ep.ch0.Improbe(src, tag) }

// Mprobe is Channel.Mprobe on context 0.
func (ep *Endpoint) Mprobe(ctx context.Context, src, tag int) (*Message, error) {
	return ep.ch0.Mprobe(ctx, src, tag)
}
