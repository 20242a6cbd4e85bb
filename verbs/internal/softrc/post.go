package softrc

import (
	"fmt"
	"slices"
	"sync"

	"github.com/rdmago/rdmago/verbs"
)

// resolve checks an SGE against the MR table (this PD, in range, local
// write where data lands locally) and takes a reference on its region.
func (q *QP) resolve(s verbs.SGE, needWrite bool) ([]byte, *MR, error) {
	m := q.dev.lookupLKey(s.LKey)
	if m == nil || !m.valid() {
		return nil, nil, fmt.Errorf("%w: lkey %#x names no registered region", verbs.ErrBadKey, s.LKey)
	}
	if m.pd != q.pd {
		return nil, nil, fmt.Errorf("%w: lkey %#x belongs to another protection domain", verbs.ErrBadKey, s.LKey)
	}
	b, ok := m.span(s.Addr, uint64(s.Length))
	if !ok {
		return nil, nil, fmt.Errorf("%w: [%#x, +%d) is outside region lkey %#x [%#x, +%d)", verbs.ErrBadKey, s.Addr, s.Length, s.LKey, m.addr, len(m.buf))
	}
	if needWrite && m.access&verbs.AccessLocalWrite == 0 {
		return nil, nil, fmt.Errorf("%w: region lkey %#x lacks LocalWrite, which a local destination needs", verbs.ErrBadKey, s.LKey)
	}
	if !m.acquire() {
		return nil, nil, fmt.Errorf("%w: lkey %#x was deregistered", verbs.ErrBadKey, s.LKey)
	}
	return b, m, nil
}

// PostSend queues send requests; see verbs.QP.
func (q *QP) PostSend(wrs ...verbs.SendWR) error {
	q.mu.Lock()
	err := q.postSendLocked(wrs)
	l, k := q.takeKicksLocked()
	q.mu.Unlock()
	q.kickPosted(l, k)
	return err
}

// kickPosted makes the kicks owed for posted requests: the link's
// KickPost when it has one (the poster writes them itself if it can).
func (q *QP) kickPosted(l Link, k int) {
	if pk, ok := l.(PostKicker); ok && k > 0 {
		pk.KickPost()
	} else {
		q.doKicks(l, k)
	}
}

// HoldPosts implements verbs.PostBatcher: the kicks of the requests posted
// from now on wait for the matching ReleasePosts, so that the link writes
// them together.
func (q *QP) HoldPosts() {
	q.mu.Lock()
	q.holds++
	q.mu.Unlock()
}

// ReleasePosts implements verbs.PostBatcher: the last release makes the
// kicks the holds kept back.
func (q *QP) ReleasePosts() {
	q.mu.Lock()
	if q.holds > 0 {
		q.holds--
	}
	l, k := q.takeKicksLocked()
	q.mu.Unlock()
	q.kickPosted(l, k)
}

func (q *QP) postSendLocked(wrs []verbs.SendWR) error {
	if q.closed {
		return q.dev.err("PostSend", q.num, 0, verbs.ErrClosed)
	}
	if q.state != verbs.QPRTS && q.state != verbs.QPErr {
		return q.dev.err("PostSend", q.num, 0, fmt.Errorf("%w: PostSend in state %v (needs RTS)", verbs.ErrInvalidState, q.state))
	}
	for i := range wrs {
		wr := &wrs[i]
		if err := verbs.ValidateSendWR(wr, q.cap, q.dev.cfg.Caps); err != nil {
			return q.dev.err("PostSend", q.num, i, err)
		}
		var tmp swqe
		e, err := q.claimTailLocked("PostSend", i, &tmp)
		if err != nil {
			return err
		}
		needWrite := wr.Opcode == verbs.OpRDMARead || wr.Opcode.IsAtomic()
		if wr.Flags&verbs.SendInline != 0 {
			e.inline = append(e.inline[:0], wr.Inline...)
			e.segs = append(e.segs, e.inline)
		} else {
			for _, s := range wr.SGL {
				b, m, err := q.resolve(s, needWrite)
				if err != nil {
					e.releaseRefs()
					return q.dev.err("PostSend", q.num, i, err)
				}
				e.segs = append(e.segs, b)
				e.mrs = append(e.mrs, m)
			}
		}
		e.id, e.op, e.flags = wr.ID, wr.Opcode, wr.Flags
		e.signaled = q.sigAll || wr.Flags&verbs.SendSignaled != 0
		e.length = uint32(wr.Len())
		e.raddr, e.rkey, e.imm, e.cmp, e.swap = wr.RemoteAddr, wr.RKey, wr.Imm, wr.CompareAdd, wr.Swap
		q.enqueueLocked(e, 1)
	}
	return nil
}

// claimTailLocked returns the entry a new request is to fill, emptied:
// the send queue's tail, or tmp in ERR, where the request completes at
// once (enqueueLocked); ErrQueueFull, naming op and the request's index
// i, when the queue has no room.
func (q *QP) claimTailLocked(op string, i int, tmp *swqe) (*swqe, error) {
	n := uint64(len(q.sq))
	if q.state != verbs.QPErr && q.tail-q.head >= n {
		return nil, q.dev.err(op, q.num, i, fmt.Errorf("%w: %d send requests outstanding (max %d; unsignaled ones hold their slot until a later signaled completion)", verbs.ErrQueueFull, q.tail-q.head, n))
	}
	e := tmp
	if q.state != verbs.QPErr {
		e = &q.sq[q.tail%n]
	}
	e.releaseRefs()
	e.tail, e.lent, e.gone = nil, false, false
	return e, nil
}

// enqueueLocked takes e, filled in at the tail, into the send queue with
// seqs sequence numbers (a run takes one per write); in ERR, where e is
// scratch, it completes e at once with a flush error instead.
func (q *QP) enqueueLocked(e *swqe, seqs uint32) {
	e.sent, e.localErr = false, 0
	e.rnrLeft = q.rnrRetry
	if q.state == verbs.QPErr {
		st := verbs.StatusWRFlushErr
		if q.lost {
			st, q.lost = verbs.StatusRetryExcErr, false
		}
		q.pushSendWC(e, st)
		e.releaseRefs()
		return
	}
	e.seq = q.nextSeq
	q.nextSeq += seqs
	q.tail++
	q.kicks++
}

// RunBytesMax bounds a run's body (descriptors and bytes), so that one
// post copies and one frame carries a bounded amount.
const RunBytesMax = 64 << 10

// RunLimits implements verbs.RunWriter: the bytes are what RunBytesMax
// leaves beside the descriptors of the most writes a run takes.
func (q *QP) RunLimits() (writes, bytes int) {
	return RunMax, int(min(uint64(RunBytesMax), q.dev.cfg.Caps.MaxMsgSize)) - RunMax*RunDescLen
}

// PostWriteRun implements verbs.RunWriter: the run takes one send queue
// entry, whose body is the WRITE_RUN frame's (descriptors, then bytes),
// and whose sequence numbers are its writes', one each as the responder
// counts them. It asks for no ACK (a WRITE_RUN cannot), so a QP that
// signals every request refuses runs.
func (q *QP) PostWriteRun(id uint64, run *verbs.WriteRun) error {
	k := len(run.Writes)
	wmax, bmax := q.RunLimits()
	sum := 0
	for i := range run.Writes {
		if run.Writes[i].Len == 0 {
			return q.dev.err("PostWriteRun", q.num, 0, fmt.Errorf("%w: write %d of the run has no bytes", verbs.ErrInvalidArgument, i))
		}
		sum += int(run.Writes[i].Len)
	}
	switch {
	case k == 0 || k > wmax:
		return q.dev.err("PostWriteRun", q.num, 0, fmt.Errorf("%w: a run of %d writes (1 to %d)", verbs.ErrInvalidArgument, k, wmax))
	case sum != len(run.Data):
		return q.dev.err("PostWriteRun", q.num, 0, fmt.Errorf("%w: the run's %d writes add up to %d bytes, its Data has %d", verbs.ErrInvalidArgument, k, sum, len(run.Data)))
	case sum > bmax:
		return q.dev.err("PostWriteRun", q.num, 0, fmt.Errorf("%w: a run of %d bytes (max %d)", verbs.ErrInvalidArgument, sum, bmax))
	}
	q.mu.Lock()
	err := q.postRunLocked(id, run, k*RunDescLen+sum)
	l, n := q.takeKicksLocked()
	q.mu.Unlock()
	q.kickPosted(l, n)
	return err
}

func (q *QP) postRunLocked(id uint64, run *verbs.WriteRun, body int) error {
	switch {
	case q.closed:
		return q.dev.err("PostWriteRun", q.num, 0, verbs.ErrClosed)
	case q.state != verbs.QPRTS && q.state != verbs.QPErr:
		return q.dev.err("PostWriteRun", q.num, 0, fmt.Errorf("%w: PostWriteRun in state %v (needs RTS)", verbs.ErrInvalidState, q.state))
	case q.sigAll:
		return q.dev.err("PostWriteRun", q.num, 0, fmt.Errorf("%w: a run asks for no ACK, and this QP signals every request", verbs.ErrInvalidArgument))
	}
	var tmp swqe
	e, err := q.claimTailLocked("PostWriteRun", 0, &tmp)
	if err != nil {
		return err
	}
	var b []byte
	if k := len(q.runBufs); k > 0 {
		b, q.runBufs = q.runBufs[k-1], q.runBufs[:k-1]
	}
	b = slices.Grow(b[:0], body)[:len(run.Writes)*RunDescLen]
	for i, w := range run.Writes {
		putRunDesc(b[i*RunDescLen:], w.RemoteAddr, w.RKey, w.Len)
	}
	e.inline = append(b, run.Data...)
	e.segs = append(e.segs, e.inline)
	e.id, e.op, e.flags, e.signaled = id, verbs.OpRDMAWrite, verbs.SendInline, false
	e.run, e.imm, e.length = uint32(len(run.Writes)), uint32(len(run.Writes)), uint32(body)
	e.raddr, e.rkey, e.cmp, e.swap = 0, 0, 0, 0
	q.enqueueLocked(e, e.run)
	return nil
}

// runBufsKeep is how many run bodies a QP keeps for reuse.
const runBufsKeep = 4

// keepRunBuf gives the body of e, a run about to be released, to the
// next run.
func (q *QP) keepRunBuf(e *swqe) {
	if len(q.runBufs) < runBufsKeep {
		q.runBufs = append(q.runBufs, e.inline[:0])
	}
	e.inline = nil
}

// SteerSends implements verbs.SendSteerer: HandleRequest asks s where
// the body of each SEND longer than prefix goes.
func (q *QP) SteerSends(prefix int, s verbs.SendSteer) {
	q.mu.Lock()
	q.steer, q.steerPrefix = s, max(prefix, 0)
	if s == nil {
		q.steerPrefix = 0
	}
	q.mu.Unlock()
}

// PostSendLentPair implements verbs.LentPairPoster: over a link that can
// write in the posting goroutine (LentWriter) and is free, the request is
// written in this call, tail straight from the caller's memory, and what
// the link could not take at once is copied before this returns (the
// link's copy of a partial write, or the entry's own when it could not be
// sent yet). Otherwise (another link, the write side busy or backed up,
// posts on hold) nothing is posted.
func (q *QP) PostSendLentPair(wr verbs.SendWR, tail []byte) (bool, error) {
	if wr.Flags&verbs.SendInline == 0 || wr.Opcode != verbs.OpSend && wr.Opcode != verbs.OpSendWithImm {
		return false, q.dev.err("PostSend", q.num, 0, fmt.Errorf("%w: a lent pair is an inline SEND (opcode %v)", verbs.ErrInvalidArgument, wr.Opcode))
	}
	if n := wr.Len() + uint64(len(tail)); n > q.dev.cfg.Caps.MaxMsgSize {
		return false, q.dev.err("PostSend", q.num, 0, fmt.Errorf("%w: message of %d bytes exceeds the device's max %d", verbs.ErrInvalidArgument, n, q.dev.cfg.Caps.MaxMsgSize))
	}
	q.mu.Lock()
	lw, _ := q.link.(LentWriter)
	held := q.holds > 0
	q.mu.Unlock()
	if lw == nil || held {
		return false, nil
	}
	lp := lentPosts.Get().(*lentPost)
	lp.q, lp.wr, lp.tail = q, wr, tail
	posted := lw.WriteLent(lp.postFn, lp.settleFn)
	err := lp.err
	*lp = lentPost{postFn: lp.postFn, settleFn: lp.settleFn}
	lentPosts.Put(lp)
	return posted, err
}

// lentPost is one PostSendLentPair's state for the link's callbacks
// (LentWriter.WriteLent), recycled with its method values so that a post
// allocates nothing.
type lentPost struct {
	q                *QP
	wr               verbs.SendWR
	tail             []byte
	e                *swqe
	seq              uint32
	err              error
	postFn, settleFn func()
}

var lentPosts = sync.Pool{New: func() any {
	lp := new(lentPost)
	lp.postFn, lp.settleFn = lp.post, lp.settle
	return lp
}}

// post queues the request, its tail lent (WriteLent's post).
func (lp *lentPost) post() {
	q := lp.q
	q.mu.Lock()
	lp.e, lp.err = q.postPairLocked(lp.wr, lp.tail)
	if lp.e != nil {
		lp.seq = lp.e.seq
	}
	q.kicks = 0 // the link writes what is queued now
	q.mu.Unlock()
}

// settle ends the loan (WriteLent's settle).
func (lp *lentPost) settle() {
	q := lp.q
	q.mu.Lock()
	q.settleLentLocked(lp.e, lp.seq)
	q.mu.Unlock()
}

// postPairLocked posts the inline SEND wr followed by tail, lent (the
// caller's memory, until settleLentLocked). It returns the entry, nil if
// the QP flushed it at once.
func (q *QP) postPairLocked(wr verbs.SendWR, tail []byte) (*swqe, error) {
	t0 := q.tail
	wrs := [1]verbs.SendWR{wr}
	if err := q.postSendLocked(wrs[:]); err != nil {
		return nil, err
	}
	if q.tail == t0 {
		return nil, nil // flushed: the QP is in the error state
	}
	e := &q.sq[t0%uint64(len(q.sq))]
	e.length += uint32(len(tail))
	e.tail, e.lent = tail, true
	return e, nil
}

// settleLentLocked ends the loan of entry e's tail (posted as seq), with
// the link's write side still held: a tail not taken yet is copied into
// the entry's own memory; one taken is written or in the link's own copy,
// and is not kept.
func (q *QP) settleLentLocked(e *swqe, seq uint32) {
	if e == nil || !e.lent || e.seq != seq {
		return // flushed, or completed and reused since
	}
	e.lent = false
	if !e.sent {
		e.own = append(e.own[:0], e.tail...)
		e.tail = e.own
		return
	}
	e.tail, e.gone = nil, true
}

// PostRecv queues receive requests; see verbs.QP.
func (q *QP) PostRecv(wrs ...verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.dev.err("PostRecv", q.num, 0, verbs.ErrClosed)
	}
	if q.state == verbs.QPReset {
		return q.dev.err("PostRecv", q.num, 0, fmt.Errorf("%w: PostRecv in state RESET", verbs.ErrInvalidState))
	}
	n := uint64(len(q.rq))
	for i := range wrs {
		wr := &wrs[i]
		if err := verbs.ValidateRecvWR(wr, q.cap); err != nil {
			return q.dev.err("PostRecv", q.num, i, err)
		}
		if q.state != verbs.QPErr && q.rqTail-q.rqHead >= n {
			return q.dev.err("PostRecv", q.num, i, fmt.Errorf("%w: %d receive requests outstanding (max %d)", verbs.ErrQueueFull, q.rqTail-q.rqHead, n))
		}
		var tmp rwqe
		e := &tmp
		if q.state != verbs.QPErr {
			e = &q.rq[q.rqTail%n]
		}
		e.releaseRefs()
		for _, s := range wr.SGL {
			b, m, err := q.resolve(s, true)
			if err != nil {
				e.releaseRefs()
				return q.dev.err("PostRecv", q.num, i, err)
			}
			// Provider memory is mapped at first access: a buffer posted
			// for the first time has its pages mapped now rather than at
			// its first receive (see ntcopy.Touch).
			m.pages.TouchOnce(b, true)
			e.segs = append(e.segs, b)
			e.mrs = append(e.mrs, m)
		}
		e.id, e.length = wr.ID, wr.Len()
		if q.state == verbs.QPErr {
			q.recvCQ.push(verbs.WC{ID: e.id, Status: verbs.StatusWRFlushErr, QPNum: q.num})
			e.releaseRefs()
			continue
		}
		q.rqTail++
	}
	return nil
}
