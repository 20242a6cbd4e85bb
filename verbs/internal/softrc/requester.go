package softrc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// NextRequest is the requester: it produces the next request to send, in
// posting order, or reports false when nothing may be sent now (queue
// empty, RNR back-off running, a FENCE waiting for earlier requests, the
// READ/atomic budget max_rd_atomic used up, no link). The core calls
// Link.Kick when that changes. r.Done must be called once r.Data is written.
func (q *QP) NextRequest(r *Request) bool { return q.NextRequestMax(r, ^uint32(0)) }

// NextRequestMax is NextRequest for a caller that only wants a request whose
// payload is at most max bytes (the tcp provider writes small requests in
// the posting goroutine and leaves large ones to its writer goroutine).
func (q *QP) NextRequestMax(r *Request, max uint32) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.nextRequestLocked(r, max)
}

// NextRequests fills rs from the front with the next requests, as many
// NextRequestMax calls would until one reported false or rs is full, under
// one hold of the QP's lock: a window of small WRITEs costs a lock per
// batch rather than per request. It returns how many it filled; each needs
// its Done.
func (q *QP) NextRequests(rs []Request, max uint32) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := 0
	for n < len(rs) && q.nextRequestLocked(&rs[n], max) {
		n++
	}
	return n
}

func (q *QP) nextRequestLocked(r *Request, max uint32) bool {
	if !q.sendableLocked() {
		return false
	}
	e := &q.sq[q.next%uint64(len(q.sq))]
	if !e.readLike() && e.length > max {
		return false
	}
	ackReq := e.signaled || e.readLike()
	r.Header = Header{QPN: q.remote.QPNum, Seq: e.seq, Len: e.length,
		RAddr: e.raddr, RKey: e.rkey, Imm: e.imm, CmpAdd: e.cmp, Swap: e.swap}
	r.Data = r.Data[:0]
	r.refs = r.refs[:0]
	for _, m := range e.mrs {
		if !m.valid() {
			e.localErr = verbs.StatusLocProtErr
		}
	}
	if e.gone {
		// A lent tail, written once and not kept, wanted again (after an
		// RNR NAK): see verbs.LentPairPoster.
		e.localErr = verbs.StatusLocLenErr
	}
	if e.localErr == 0 && !e.readLike() {
		if e.flags&verbs.SendInline != 0 {
			r.inl = append(r.inl[:0], e.inline...)
			r.Data = append(r.Data, r.inl)
			if len(e.tail) > 0 {
				r.Data = append(r.Data, e.tail)
			}
		} else {
			for i, m := range e.mrs {
				if !m.acquire() {
					e.localErr = verbs.StatusLocProtErr
					break
				}
				r.refs = append(r.refs, m)
				r.Data = append(r.Data, e.segs[i])
			}
		}
	}
	if e.localErr != 0 {
		// A region was deregistered after the post: LOC_PROT_ERR, in order.
		// Earlier requests that asked for no ACK will never be answered on
		// success, so once no earlier one awaits an answer they count as done.
		for _, m := range r.refs {
			m.release()
		}
		r.refs, r.Data = r.refs[:0], r.Data[:0]
		if q.comp >= q.ackReqUpTo {
			for q.comp < q.next {
				q.completeLocked(verbs.StatusSuccess)
			}
			q.completeLocked(e.localErr)
		}
		return false
	}
	switch e.op {
	case verbs.OpSend:
		r.Op = FrameSend
	case verbs.OpSendWithImm:
		r.Op = FrameSendImm
	case verbs.OpRDMAWrite:
		r.Op = FrameWrite
		if e.run > 0 {
			r.Op = FrameWriteRun // Imm is the count, Len the body
		}
	case verbs.OpRDMAWriteWithImm:
		r.Op = FrameWriteImm
	case verbs.OpRDMARead:
		r.Op = FrameReadReq
	case verbs.OpAtomicCmpAndSwp:
		r.Op, r.Len = FrameCmpSwap, 0
	case verbs.OpAtomicFetchAdd:
		r.Op, r.Len = FrameFetchAdd, 0
	}
	if e.flags&verbs.SendSolicited != 0 {
		r.Flags |= FlagSolicited
	}
	if e.flags&verbs.SendFence != 0 {
		r.Flags |= FlagFence
	}
	if e.flags&verbs.SendReportServed != 0 {
		r.Flags |= FlagServed // CmpAdd is the tag
	}
	if ackReq {
		// Unsignaled WRITEs and SENDs ask for no ACK (a later signaled one's
		// ACK covers them, and a NAK is always sent), which halves the frames
		// of a ping-pong.
		r.Flags |= FlagAckReq
		if q.comp >= q.ackReqUpTo {
			q.armAckLocked()
		}
		q.ackReqUpTo = q.next + 1
	}
	e.sent = true
	q.next++
	if e.readLike() {
		q.rdOut++
	}
	return true
}

// ackTimeout is how long the requester waits for any response before it
// declares the peer lost: timeout × (retry_cnt+1), as an RC requester that
// retransmits retry_cnt times would; 0 waits forever.
func (q *QP) ackTimeout() time.Duration {
	if q.timeout == 0 {
		return 0
	}
	return max(verbs.TimeoutDuration(q.timeout)*time.Duration(int(q.retryCnt)+1), q.dev.cfg.MinAckTimeout)
}

// Executing brackets a transport's synchronous execution of this QP's
// request at its peer (loop runs the peer's responder in the requester's
// goroutine): while it runs, the peer is demonstrably alive, so the ACK
// timer does not fire however long a large copy or a descheduled goroutine
// takes.
func (q *QP) Executing(on bool) {
	if on {
		q.executing.Add(1)
	} else {
		q.executing.Add(-1)
	}
}

// The ACK timer is coarse: responses and new requests only note that
// traffic moved (ackMoved), and a timer that finds it moved since it was
// set starts over rather than fail. So a stall fails the QP between one
// and two timeouts after the last response, and no response reads the
// clock: time.Now was 6% of the CPU of a window of small WRITEs over tcp
// (one per ACK).
func (q *QP) armAckLocked() {
	t := q.ackTimeout()
	if t == 0 {
		return
	}
	if q.ackArmed {
		q.ackMoved = true
		return
	}
	q.ackArmed, q.ackMoved = true, false
	if q.ackTimer == nil {
		q.ackTimer = time.AfterFunc(t, q.onAckTimeout)
	} else {
		q.ackTimer.Reset(t)
	}
}

// Progress tells the requester that its traffic is moving (a transport
// calls it while it streams a large request or response), so the ACK timer
// restarts: like RC's per-packet timer, it measures a stall, not the time a
// large message takes.
func (q *QP) Progress() {
	q.mu.Lock()
	if q.state == verbs.QPRTS && q.comp < q.ackReqUpTo {
		q.ackMoved = true
	}
	q.mu.Unlock()
}

func (q *QP) onAckTimeout() {
	q.mu.Lock()
	q.ackArmed = false
	if q.state != verbs.QPRTS || q.comp >= q.ackReqUpTo {
		q.mu.Unlock()
		return
	}
	if q.executing.Load() > 0 || q.ackMoved {
		q.ackArmed, q.ackMoved = true, false
		q.ackTimer.Reset(q.ackTimeout())
		q.mu.Unlock()
		return
	}
	l := q.detachLocked()
	q.lost = true
	seq := q.sq[q.comp%uint64(len(q.sq))].seq
	q.enterErrLocked()
	q.mu.Unlock()
	q.dev.log.Warn("softrc: no response from peer, failing with RETRY_EXC_ERR", "provider", q.dev.cfg.Provider,
		"qp", q.num, "peer_qp", q.remote.QPNum, "seq", seq, "timeout", q.ackTimeout())
	if l != nil {
		l.Close()
	}
}

func (q *QP) onRNRTimer() {
	q.mu.Lock()
	q.rnrUntil = time.Time{}
	l := q.link
	q.mu.Unlock()
	if l != nil {
		l.Kick()
	}
}

// completeLocked completes the entry at comp with st. Success produces a
// completion only when signaled and retires every earlier unsignaled entry
// with it; an error always produces one and moves the QP to ERR.
func (q *QP) completeLocked(st verbs.Status) {
	n := uint64(len(q.sq))
	e := &q.sq[q.comp%n]
	if e.sent && e.readLike() {
		q.rdOut--
	}
	if e.run > 0 {
		q.keepRunBuf(e)
	}
	e.releaseRefs()
	if st != verbs.StatusSuccess {
		q.pushSendWC(e, st)
		q.comp++
		q.next = max(q.next, q.comp)
		q.head = q.comp
		q.enterErrLocked()
		return
	}
	if e.signaled {
		q.pushSendWC(e, st)
		q.head = q.comp + 1
	}
	q.comp++
	q.ackMoved = true // the peer answers (see armAckLocked)
	if q.sendableLocked() {
		q.kicks++
	}
}

func nakStatus(syn uint8) verbs.Status {
	switch syn {
	case SynInvReq:
		return verbs.StatusRemInvReqErr
	case SynRemAccess:
		return verbs.StatusRemAccessErr
	}
	return verbs.StatusRemOpErr
}

// HandleResponse is the completer: it matches a response to the oldest sent
// request (responses arrive in request order), places READ data and atomic
// results in local memory, and completes requests in order. A response for
// a later request implies the earlier ones succeeded. A returned error means
// the payload could not be read; the transport must drop the connection.
func (q *QP) HandleResponse(h *Header, p Payload) error {
	q.mu.Lock()
	err := q.handleResponseLocked(h, p)
	l, k := q.takeKicksLocked()
	q.mu.Unlock()
	q.doKicks(l, k)
	return err
}

func (q *QP) handleResponseLocked(h *Header, p Payload) error {
	n := uint64(len(q.sq))
	skip := func() error {
		if k := h.PayloadLen(); k > 0 {
			q.mu.Unlock()
			defer q.mu.Lock()
			return p.Skip(k)
		}
		return nil
	}
	if q.state != verbs.QPRTS {
		return skip()
	}
	for q.comp < q.next {
		e := &q.sq[q.comp%n]
		d := int32(h.Seq - e.seq)
		if d < 0 {
			return skip() // stale: that message already completed
		}
		if d < int32(e.seqs()) {
			break // e's response, or a NAK of one of its run's writes
		}
		if e.readLike() {
			// A READ or atomic must get its own response.
			q.completeLocked(verbs.StatusBadRespErr)
			return skip()
		}
		q.completeLocked(verbs.StatusSuccess)
	}
	if q.comp == q.next {
		return skip()
	}
	e := &q.sq[q.comp%n]
	switch h.Op {
	case FrameAck:
		if e.readLike() {
			q.completeLocked(verbs.StatusBadRespErr)
		} else {
			q.completeLocked(verbs.StatusSuccess)
		}
	case FrameNak:
		if h.Syndrome != SynRNR {
			q.completeLocked(nakStatus(h.Syndrome))
			return nil
		}
		if e.rnrLeft == 0 {
			q.completeLocked(verbs.StatusRNRRetryExcErr)
			return nil
		}
		if e.rnrLeft != 7 {
			e.rnrLeft--
		}
		// Go back: the responder dropped everything after this message, so
		// resend from it once the RNR timer runs out.
		for i := q.comp; i < q.next; i++ {
			s := &q.sq[i%n]
			if s.readLike() {
				q.rdOut--
			}
			s.sent = false
		}
		q.next = q.comp
		q.ackReqUpTo = q.comp
		d := verbs.RNRTimerDuration(h.RNRTimer)
		q.rnrUntil = time.Now().Add(d)
		if q.rnrTimer == nil {
			q.rnrTimer = time.AfterFunc(d, q.onRNRTimer)
		} else {
			q.rnrTimer.Reset(d)
		}
	case FrameAtomicAck:
		if !e.op.IsAtomic() || len(e.segs) != 1 || len(e.segs[0]) != 8 {
			q.completeLocked(verbs.StatusBadRespErr)
			return nil
		}
		binary.NativeEndian.PutUint64(e.segs[0], h.CmpAdd)
		q.completeLocked(verbs.StatusSuccess)
	case FrameReadResp:
		if e.op != verbs.OpRDMARead || h.Len != e.length {
			q.completeLocked(verbs.StatusBadRespErr)
			return skip()
		}
		// Read the data into the local buffers without the lock, holding
		// references so a concurrent flush or deregistration cannot pull
		// the memory away.
		q.respSegs = append(q.respSegs[:0], e.segs...)
		q.respRefs = q.respRefs[:0]
		for _, m := range e.mrs {
			if m.acquire() {
				q.respRefs = append(q.respRefs, m)
			}
		}
		if len(q.respRefs) != len(e.mrs) {
			for _, m := range q.respRefs {
				m.release()
			}
			q.completeLocked(verbs.StatusLocProtErr)
			return skip()
		}
		return q.readRespLocked(p, q.respSegs, q.respRefs, q.comp, q.epoch)
	default:
		q.completeLocked(verbs.StatusBadRespErr)
		return skip()
	}
	return nil
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// suspendedRead is a READ response's handling suspended mid-payload.
type suspendedRead struct {
	active      bool
	segs        [][]byte // the rest of the local buffers, in order
	refs        []*MR    // held until the payload is all read
	comp, epoch uint64   // the request it completes, as when it began
}

// readRespLocked reads a READ response's payload into segs without the
// lock (refs keep the memory registered meanwhile), then completes the
// request at comp unless the queues moved on (a flush, a reset). A read
// suspended part way (*SuspendError) keeps the rest for Resume and
// returns ErrSuspended.
func (q *QP) readRespLocked(p Payload, segs [][]byte, refs []*MR, comp, epoch uint64) error {
	q.mu.Unlock()
	var err error
	i := 0
	for ; i < len(segs); i++ {
		if err = p.ReadFull(segs[i]); err != nil {
			break
		}
	}
	var se *SuspendError
	if err != nil && errors.As(err, &se) && se.Filled >= 0 && se.Filled < len(segs[i]) {
		// Copies: segs and refs may be the QP's scratch, which the next
		// response reuses.
		rest := append([][]byte{segs[i][se.Filled:]}, segs[i+1:]...)
		q.mu.Lock()
		q.susp = suspendedRead{active: true, segs: rest, refs: append([]*MR(nil), refs...), comp: comp, epoch: epoch}
		return ErrSuspended
	}
	for _, m := range refs {
		m.release()
	}
	q.mu.Lock()
	if err != nil {
		return err
	}
	if q.epoch == epoch && q.comp == comp && q.state == verbs.QPRTS {
		q.completeLocked(verbs.StatusSuccess)
	}
	return nil
}

// Resume goes on with the frame whose payload read was suspended
// (ErrSuspended), a READ response or a SEND, reading the rest from p,
// which is positioned where the suspended read stopped; it may be
// suspended again. Once a SEND's payload is in, resp is its answer for
// the transport to send (Op 0: none), as HandleRequest's. A returned
// error other than ErrSuspended means the payload could not be read.
func (q *QP) Resume(p Payload, resp *Response) error {
	q.mu.Lock()
	*resp = Response{}
	var err error
	switch s := q.susp; {
	case q.suspSend.active:
		err = q.resumeSendLocked(p, resp)
	case s.active:
		q.susp = suspendedRead{}
		err = q.readRespLocked(p, s.segs, s.refs, s.comp, s.epoch)
	default:
		err = fmt.Errorf("%w: no suspended frame to resume", ErrProtocol)
	}
	l, k := q.takeKicksLocked()
	q.mu.Unlock()
	q.doKicks(l, k)
	return err
}

// Suspended reports whether a frame's handling, a READ response's or a
// SEND's, is suspended mid-payload (Resume finishes it).
func (q *QP) Suspended() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.susp.active || q.suspSend.active
}

// dropSuspendedLocked forgets a suspended READ response or SEND (its
// connection is gone), releasing the memory it held.
func (q *QP) dropSuspendedLocked() {
	for _, m := range q.susp.refs {
		m.release()
	}
	q.susp = suspendedRead{}
	q.dropSuspendedSendLocked()
}
