package collectives

import "fmt"

// outMsg is a send in flight: the header (with the payload when small) and,
// for a large payload, the payload itself as a second message.
type outMsg struct {
	c      *call
	peer   int
	hr, pr *pendingReq
	reqs   [2]pendingReq // storage for hr and pr (one allocation per message)
	own    []byte        // the record's staging buffer for small messages, kept across calls
}

// Staging buffers of small messages belong to the message records, which
// the Engine recycles from call to call, instead of coming from the
// scratch pools: a pool's Get and Put cost more than the copy they stage.
// The records outlive every request that touches them (end waits for all
// of a call's requests). A receive stage must hold any inline message
// (hdrLen + InlineBytes; see recv), so only the first ownRecvRecords
// receive records of a call keep one.
const (
	ownSendBytes   = 256
	ownRecvRecords = 8
)

// send starts sending payload to view rank peer, announcing count (the
// element count the receiver must agree with).
func (c *call) send(peer int, payload []byte, count int64) (*outMsg, error) {
	wp := c.world(peer)
	h := *c.h
	h.count = count
	h.payload = int64(len(payload))
	h.split = len(payload) > c.e.inlineTo(wp)
	n := dataHdrLen
	if !h.split {
		n += len(payload)
	}
	m := c.newOut()
	m.c, m.peer = c, peer
	parts := c.e.partsOut != nil && !h.split && len(payload) >= partsMin
	if parts {
		n = dataHdrLen // the header alone in the stage: the payload goes from where it is
	}
	var stage, pooled []byte
	if n <= ownSendBytes {
		if m.own == nil {
			m.own = make([]byte, ownSendBytes)
		}
		stage = m.own[:n]
	} else {
		stage = scratch.get(n)
		pooled = stage
	}
	h.encode(stage)
	if !h.split && !parts {
		copy(stage[dataHdrLen:], payload)
	}
	if !h.split && c.e.sendNow != nil {
		// A message the group can post at once takes no request: the
		// call then neither tracks one under e.mu nor waits for nor
		// releases it, software that after a system call, with the caches
		// cold, is a good part of a small send's.
		head, body := []byte(nil), stage
		if parts {
			head, body = stage, payload
		}
		sent, err := c.e.sendNow.SendNow(wp, c.tag, head, body)
		if sent || err != nil {
			scratch.put(pooled)
			if err != nil {
				return nil, c.fail(peer, err)
			}
			return m, nil // m.hr nil: done
		}
	}
	var r Request
	var err error
	if parts {
		r, err = c.e.partsOut.IsendParts(wp, c.tag, stage, payload)
	} else {
		r, err = c.e.g.Isend(wp, c.tag, stage)
	}
	if err != nil {
		scratch.put(pooled)
		return nil, c.fail(peer, err)
	}
	m.hr = c.trackIn(&m.reqs[0], r, pooled)
	if h.split {
		r, err := c.e.g.Isend(wp, c.tag|1, payload)
		if err != nil {
			return nil, c.fail(peer, err)
		}
		m.pr = c.trackIn(&m.reqs[1], r, nil)
	}
	return m, nil
}

// outRange is the message records outs[from:to] of a call's sends.
type outRange struct{ from, to int }

// waitOuts waits for the sends whose records are outs[r.from:r.to].
func (c *call) waitOuts(r outRange) error {
	for _, m := range c.outs[r.from:r.to] {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return nil
}

// newOut returns a message record of this call, zeroed but for its own
// staging buffer.
func (st *callState) newOut() *outMsg {
	if st.nout == len(st.outs) {
		st.outs = append(st.outs, new(outMsg))
	}
	m := st.outs[st.nout]
	st.nout++
	m.c, m.peer, m.hr, m.pr = nil, 0, nil, nil
	m.reqs[0], m.reqs[1] = pendingReq{}, pendingReq{}
	return m
}

// newIn is newOut for receives.
func (st *callState) newIn() *inMsg {
	if st.nin == len(st.ins) {
		st.ins = append(st.ins, new(inMsg))
	}
	m := st.ins[st.nin]
	st.nin++
	m.c, m.peer, m.dst, m.count, m.stage, m.hr, m.pr = nil, 0, nil, 0, nil, nil, nil
	m.req, m.preq = pendingReq{}, pendingReq{}
	m.fold, m.tmp, m.parts = false, nil, false
	return m
}

func (c *call) track(r Request, buf []byte) *pendingReq {
	return c.trackIn(new(pendingReq), r, buf)
}

// trackIn is track with caller-provided storage.
func (c *call) trackIn(p *pendingReq, r Request, buf []byte) *pendingReq {
	// Field by field: a composite literal is built on the stack and copied,
	// which stalls on the copy's load (the same in newOut and newIn).
	p.r, p.done, p.buf = r, false, buf
	if c.batching {
		c.batch = append(c.batch, p)
		return p
	}
	// Under e.mu, so that an abort either sees the request in pending
	// (and cancels it) or has already stopped the call (and we cancel it).
	c.e.mu.LockFavoured()
	c.pending = append(c.pending, p)
	stopped := c.stopped
	c.e.mu.UnlockFavoured()
	if stopped {
		r.Cancel()
	}
	return p
}

// beginBatch defers the tracking of the requests the call posts next to
// endBatch, which tracks them all under one lock: each lock is a locked
// instruction or two, a good part of a small call's software. Nothing may
// wait for a request between the two.
func (c *call) beginBatch() { c.batching = true }

// endBatch tracks the requests posted since beginBatch (see trackIn).
func (c *call) endBatch() {
	c.batching = false
	if len(c.batch) == 0 {
		return
	}
	c.e.mu.LockFavoured()
	c.pending = append(c.pending, c.batch...)
	stopped := c.stopped
	c.e.mu.UnlockFavoured()
	if stopped {
		for _, p := range c.batch {
			p.r.Cancel()
		}
	}
	clear(c.batch)
	c.batch = c.batch[:0]
}

// wait waits for a tracked request and recycles its staging buffer.
func (p *pendingReq) wait(c *call) (int, error) {
	if p.done {
		return 0, nil
	}
	n, err := c.waitReq(p.r)
	// A Wait that failed because the call's context ended may leave the
	// request in flight: end waits for it again before its buffer is reused.
	p.done = err == nil || c.ctx.Err() == nil
	if err == nil {
		scratch.put(p.buf)
		p.buf = nil
	}
	return n, err
}

func (m *outMsg) wait() error {
	if m == nil {
		return nil
	}
	if m.hr == nil {
		return nil // sent at once (NowSender)
	}
	m.c.noteWait(m.c.world(m.peer))
	if _, err := m.hr.wait(m.c); err != nil {
		return m.c.fail(m.peer, err)
	}
	if m.pr != nil {
		if _, err := m.pr.wait(m.c); err != nil {
			return m.c.fail(m.peer, err)
		}
	}
	return nil
}

// inMsg is a receive in flight into dst.
type inMsg struct {
	c     *call
	peer  int
	dst   []byte
	count int64
	stage []byte
	own   []byte // the record's staging buffer, kept across calls (see ownRecvRecords)
	hr    *pendingReq
	req   pendingReq  // storage for hr
	pr    *pendingReq // the payload's receive, posted with the header's (split)
	preq  pendingReq  // storage for pr
	fold  bool        // the message is folded into dst (recvFold)
	tmp   []byte      // a split payload to fold, where the group cannot fold (FoldReceiver)
	parts bool        // an inline message received in parts: stage[:hdrLen], then dst[dataHdrLen:]
}

// partsMin is the smallest inline payload sent or received in parts
// (PartsSender, PartsReceiver): the copy it saves is the payload (on the
// way in less a header's worth, which lands in the stage and is copied
// into place), against a second copy call where the message is put or
// taken.
const partsMin = 256

// recv starts receiving from view rank peer into dst; the sender must
// announce count elements and len(dst) bytes.
func (c *call) recv(peer int, dst []byte, count int64) (*inMsg, error) {
	return c.recvInto(peer, dst, count, false)
}

// recvFold is recv that folds the message into acc (acc = acc ⊕ message,
// by the call's kernel) instead of copying it there: a split payload as it
// arrives where the group can (FoldReceiver), else from scratch memory
// once it is in; an inline one straight from the staging buffer. acc must
// not be read or written until the wait, and its contents are unspecified
// if the wait fails.
func (c *call) recvFold(peer int, acc []byte, count int64) (*inMsg, error) {
	return c.recvInto(peer, acc, count, true)
}

// recvInto is recv, or recvFold with fold.
func (c *call) recvInto(peer int, dst []byte, count int64, fold bool) (*inMsg, error) {
	// Room for any payload the peer sends inline, whatever its count, and
	// for a peer's 64-byte fingerprint (Debug on that rank only), so that
	// a disagreement is reported as what it is rather than truncated.
	wp := c.world(peer)
	inline := c.e.inlineTo(wp)
	n := hdrLen + inline
	parts := c.e.partsIn != nil && !fold && len(dst) >= partsMin && len(dst) <= inline
	if parts {
		n = hdrLen // the header, and a fingerprint or abort whole
	}
	m := c.newIn()
	var stage, pooled []byte
	switch {
	case cap(m.own) >= n:
		// Kept at its largest (up to 256 KiB a record over tcp, so 2 MiB
		// an Engine), so that calls mixing peers of both limits do not
		// allocate.
		stage = m.own[:n]
	case c.nin <= ownRecvRecords:
		m.own = make([]byte, n)
		stage = m.own
	default:
		stage = scratch.get(n)
		pooled = stage
	}
	var r Request
	var err error
	if parts {
		r, err = c.e.partsIn.IrecvParts(wp, c.tag, stage, dst[hdrLen-dataHdrLen:])
	} else {
		r, err = c.e.g.Irecv(wp, c.tag, stage)
	}
	if err != nil {
		scratch.put(pooled)
		return nil, c.fail(peer, err)
	}
	m.c, m.peer, m.dst, m.count, m.stage, m.fold, m.parts = c, peer, dst, count, stage, fold, parts
	m.hr = c.trackIn(&m.req, r, pooled)
	if len(dst) > inline {
		// The sender splits a payload this large (both ranks of a pair
		// have the same inline limit; a sender that disagrees on the size is caught by
		// the header's check, and end cancels this receive). Posted now,
		// the payload lands in dst as it arrives, where a receive posted
		// once the header is in found it arrived already: an unexpected
		// message, copied twice, and for a rendezvous one a wait for the
		// receiver's next turn before the transfer could start.
		r, err := c.recvPayload(m)
		if err != nil {
			return nil, c.fail(peer, err)
		}
		m.pr = c.trackIn(&m.preq, r, nil)
	}
	return m, nil
}

// recvPayload posts the receive of m's payload, which its sender split
// from the header: into m.dst, or folded into it, by the group as it
// arrives up to the group's FoldLimit, else from scratch memory once it is
// in (wait).
func (c *call) recvPayload(m *inMsg) (Request, error) {
	wp := c.world(m.peer)
	switch fr := c.e.foldIn; {
	case !m.fold:
		return c.e.g.Irecv(wp, c.tag|1, m.dst)
	case fr != nil && len(m.dst) <= fr.FoldLimit(wp):
		return fr.IrecvFold(wp, c.tag|1, m.dst, c.esize, c.kern.Combine)
	default:
		m.tmp = c.get(len(m.dst))
		return c.e.g.Irecv(wp, c.tag|1, m.tmp)
	}
}

// wait completes the receive: header, checks, then the payload.
func (m *inMsg) wait() error {
	if m == nil {
		return nil
	}
	c := m.c
	if m.hr.done {
		return nil
	}
	c.noteWait(c.world(m.peer))
	n, err := c.waitReq(m.hr.r)
	m.hr.done = err == nil || c.ctx.Err() == nil
	if err != nil {
		if m.parts && c.ctx.Err() == nil {
			// Longer than this rank's payload: a peer that disagrees,
			// which the header in the stage names if the group placed it.
			var h header
			if h.decode(m.stage[:min(n, len(m.stage))]) && h.kind == kindData {
				if mm := c.check(m.peer, &h, m.count, len(m.dst)); mm != nil {
					return c.mismatch(mm)
				}
			}
		}
		return c.fail(m.peer, err)
	}
	defer func() { scratch.put(m.hr.buf); m.hr.buf = nil }() // a pooled stage (nil: the record's own)
	var h header
	if !h.decode(m.stage[:min(n, len(m.stage))]) || h.kind != kindData {
		return c.fail(m.peer, fmt.Errorf("%w: malformed header (%d bytes)", ErrProtocol, n))
	}
	if mm := c.check(m.peer, &h, m.count, len(m.dst)); mm != nil {
		return c.mismatch(mm)
	}
	if !h.split {
		if int64(n-dataHdrLen) != h.payload {
			return c.fail(m.peer, fmt.Errorf("%w: header announces %d payload bytes, message has %d", ErrProtocol, h.payload, n-dataHdrLen))
		}
		if m.parts {
			// The payload's first bytes came in the stage after the
			// header; the rest is in place already.
			copy(m.dst, m.stage[dataHdrLen:min(n, hdrLen)])
			return nil
		}
		if m.fold {
			c.kern.Combine(m.dst, m.stage[dataHdrLen:n])
		} else {
			copy(m.dst, m.stage[dataHdrLen:n])
		}
		return nil
	}
	pr := m.pr
	if pr == nil {
		r, err := c.recvPayload(m)
		if err != nil {
			return c.fail(m.peer, err)
		}
		pr = c.track(r, nil)
	}
	n, err = pr.wait(c)
	if err != nil {
		return c.fail(m.peer, err)
	}
	if n != len(m.dst) {
		return c.fail(m.peer, fmt.Errorf("%w: payload of %d bytes, header announced %d", ErrProtocol, n, len(m.dst)))
	}
	if m.tmp != nil {
		c.kern.Combine(m.dst, m.tmp)
	}
	return nil
}

// check compares a peer's header with this rank's view of the call.
func (c *call) check(peer int, h *header, count int64, nbytes int) *MismatchError {
	me, wp := c.e.rank, c.world(peer)
	switch {
	case h.seq != c.seq:
		return newMismatch("sequence", me, int64(c.seq), wp, int64(h.seq))
	case h.coll != c.h.coll:
		return newMismatch("collective", me, int64(c.h.coll), wp, int64(h.coll))
	case h.op != c.h.op:
		return newMismatch("op", me, int64(c.h.op), wp, int64(h.op))
	case h.dtype != c.h.dtype:
		return newMismatch("type", me, int64(c.h.dtype), wp, int64(h.dtype))
	case h.root != c.h.root:
		return newMismatch("root", me, int64(c.h.root), wp, int64(h.root))
	case h.count != count:
		return newMismatch("count", me, count, wp, h.count)
	case h.alg != c.h.alg:
		return newMismatch("algorithm", me, int64(c.h.alg), wp, int64(h.alg))
	case h.payload != int64(nbytes):
		return newMismatch("bytes", me, int64(nbytes), wp, h.payload)
	}
	return nil
}

// postAll runs post, which posts messages of the call, as one batch (see
// beginBatch) and waits for every receive and then every send it posted.
func (c *call) postAll(post func() error) error {
	ins, outs := c.nin, c.nout
	c.beginBatch()
	err := post()
	c.endBatch()
	if err != nil {
		return err
	}
	return c.waitBatch(ins, outs)
}

// waitBatch waits for the receives and then the sends this call started
// since it had ins receive and outs send records.
func (c *call) waitBatch(ins, outs int) error {
	for _, m := range c.callState.ins[ins:c.nin] {
		if err := m.wait(); err != nil {
			return err
		}
	}
	return c.waitOuts(outRange{outs, c.nout})
}

// sendrecv sends sbuf to dst and receives rbuf from src at once.
func (c *call) sendrecv(dst int, sbuf []byte, scount int64, src int, rbuf []byte, rcount int64) error {
	return c.sendrecvInto(dst, sbuf, scount, src, rbuf, rcount, false)
}

// exchangeFold is exchange that folds what arrives into acc (recvFold);
// acc must not overlap sbuf.
func (c *call) exchangeFold(dst int, sbuf []byte, src int, acc []byte) error {
	return c.sendrecvInto(dst, sbuf, c.h.count, src, acc, c.h.count, true)
}

// sendrecvInto is sendrecv, folding into rbuf with fold (recvFold).
func (c *call) sendrecvInto(dst int, sbuf []byte, scount int64, src int, rbuf []byte, rcount int64, fold bool) error {
	c.beginBatch()
	r, err := c.recvInto(src, rbuf, rcount, fold)
	var s *outMsg
	if err == nil {
		s, err = c.send(dst, sbuf, scount)
	}
	c.endBatch()
	if err != nil {
		return err
	}
	if err := r.wait(); err != nil {
		return err
	}
	return s.wait()
}

// exchange is sendrecv with the call's own count on both sides.
func (c *call) exchange(dst int, sbuf []byte, src int, rbuf []byte) error {
	return c.sendrecv(dst, sbuf, c.h.count, src, rbuf, c.h.count)
}
