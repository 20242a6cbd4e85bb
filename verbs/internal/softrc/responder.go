package softrc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rdmago/rdmago/verbs"
)

// HandleRequest is the responder: it runs the checks rxe's responder runs,
// in its order (state and sequence, opcode against the QP's access flags,
// resources: responder resources and a posted receive, length, rkey), then
// executes the request against this device's memory, reading the payload
// straight from p into the registered region, and fills resp with the answer
// (Op 0: nothing to send). The transport sends resp and calls resp.Done
// after.
//
// A request that fails a class C check (invalid request, remote access) is
// NAKed and moves this QP to ERR, flushing its queues, as real RC does.
// A returned error means the payload could not be read: the transport must
// drop the connection.
func (q *QP) HandleRequest(h *Header, p Payload, resp *Response) error {
	*resp = Response{}
	if h.Op == FrameWriteRun {
		return q.handleWriteRun(h, p, resp)
	}
	n := h.PayloadLen()
	q.mu.Lock()
	if !q.inSequenceLocked(h, resp) {
		q.mu.Unlock()
		return p.Skip(n)
	}
	// Opcode against the QP's inbound access flags.
	var need verbs.Access
	switch h.Op {
	case FrameWrite, FrameWriteImm:
		need = verbs.AccessRemoteWrite
	case FrameReadReq:
		need = verbs.AccessRemoteRead
	case FrameCmpSwap, FrameFetchAdd:
		need = verbs.AccessRemoteAtomic
	}
	if q.access&need != need {
		return q.nakLocked(resp, SynInvReq, 0, p, n)
	}
	readLike := h.Op == FrameReadReq || h.Op == FrameCmpSwap || h.Op == FrameFetchAdd
	if readLike && q.maxDestRdAtomic == 0 {
		return q.nakLocked(resp, SynInvReq, 0, p, n)
	}
	consumes := h.Op == FrameSend || h.Op == FrameSendImm || h.Op == FrameWriteImm
	if consumes {
		if q.rqHead == q.rqTail {
			// Receiver not ready: the requester waits min_rnr_timer and
			// resends from this message.
			resp.Op, resp.Syndrome, resp.RNRTimer = FrameNak, SynRNR, q.minRNRTimer
			q.mu.Unlock()
			return p.Skip(n)
		}
		slot := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.rin, *slot = *slot, q.rin
		q.rqHead++
		q.rinBusy, q.rinFlushed = true, false
	}
	if uint64(h.Len) > q.dev.cfg.Caps.MaxMsgSize {
		return q.nakLocked(resp, SynInvReq, verbs.StatusRemInvReqErr, p, n)
	}
	if (h.Op == FrameSend || h.Op == FrameSendImm) && uint64(h.Len) > q.rin.length {
		// IBTA: the receive completes with LOC_LEN_ERR, the requester gets
		// NAK-InvalidRequest.
		return q.nakLocked(resp, SynInvReq, verbs.StatusLocLenErr, p, n)
	}
	var mr *MR
	var dst []byte
	atomicOp := h.Op == FrameCmpSwap || h.Op == FrameFetchAdd
	// IBTA: a zero-length WRITE or READ validates no rkey.
	if h.Op != FrameSend && h.Op != FrameSendImm && (h.Len > 0 || atomicOp) {
		ln := uint64(h.Len)
		if atomicOp {
			if h.RAddr&7 != 0 {
				return q.nakLocked(resp, SynInvReq, 0, p, n)
			}
			ln = 8
		}
		m, span, ok := q.targetLocked(h.RKey, h.RAddr, ln, need)
		if !ok || !m.acquire() {
			return q.nakLocked(resp, SynRemAccess, verbs.StatusLocAccessErr, p, n)
		}
		mr, dst = m, span
	}
	q.epsn++
	steer, pre := q.steer, q.steerPrefix
	q.mu.Unlock()

	// Execute, without the lock: the payload goes straight into place.
	var err error
	switch h.Op {
	case FrameWrite, FrameWriteImm:
		if dst != nil {
			err = p.ReadFull(dst)
		}
	case FrameSend, FrameSendImm:
		q.fill.start(&q.rin, int(h.Len), steer, pre)
		if err = q.fill.run(p); err == ErrSuspended {
			// A streaming reader must return mid-payload: whoever reads
			// next finishes the SEND (Resume), its completion and answer.
			q.mu.Lock()
			q.suspSend = suspendedSend{active: true, h: *h, qpn: resp.QPN}
			q.mu.Unlock()
			return ErrSuspended
		}
	case FrameReadReq:
		resp.Op, resp.Len, resp.Data, resp.ref = FrameReadResp, h.Len, dst, mr
		mr = nil
		if h.Flags&FlagServed != 0 {
			resp.served, resp.tag = q, h.CmpAdd
		}
	case FrameCmpSwap:
		w := mr.word(h.RAddr)
		for {
			old := atomic.LoadUint64(w)
			if old != h.CmpAdd || atomic.CompareAndSwapUint64(w, old, h.Swap) {
				resp.CmpAdd = old
				break
			}
		}
		resp.Op = FrameAtomicAck
	case FrameFetchAdd:
		resp.CmpAdd = atomic.AddUint64(mr.word(h.RAddr), h.CmpAdd) - h.CmpAdd
		resp.Op = FrameAtomicAck
	}
	if mr != nil {
		mr.release()
	}
	return q.endRequest(h, err, consumes, resp)
}

// endRequest finishes request h once its payload is read (err: the read
// failed), with resp its answer so far: the ACK it asks for, and the
// completion of the receive it consumed.
func (q *QP) endRequest(h *Header, err error, consumes bool, resp *Response) error {
	status := verbs.StatusSuccess
	if err != nil {
		// The connection broke under the payload; the transport drops it and
		// the link loss fails the QP.
		status = verbs.StatusWRFlushErr
	}
	if resp.Op == 0 && h.Flags&FlagAckReq != 0 {
		resp.Op = FrameAck
	}
	if consumes {
		q.mu.Lock()
		switch {
		case q.rinFlushed:
		case status == verbs.StatusSuccess:
			wc := verbs.WC{ID: q.rin.id, Status: verbs.StatusSuccess, Opcode: verbs.WCRecv, ByteLen: h.Len,
				QPNum: q.num, SrcQP: q.remote.QPNum}
			if h.Op == FrameWriteImm {
				wc.Opcode = verbs.WCRecvRDMAWithImm
			}
			if h.Op != FrameSend {
				wc.Imm, wc.Flags = h.Imm, verbs.WCWithImm
			}
			q.recvCQ.push(wc)
		default:
			// The connection broke under the payload. The QP's flush, when
			// the link loss fails it, takes the receives still queued and
			// one being filled (rinBusy), not this one any more: it
			// completes here.
			q.recvCQ.push(verbs.WC{ID: q.rin.id, Status: verbs.StatusWRFlushErr, QPNum: q.num})
		}
		q.rinBusy = false
		q.mu.Unlock()
		q.rin.releaseRefs()
	}
	if err != nil {
		resp.Done()
		resp.Op = 0
	}
	return err
}

// nakLocked answers a class C error: the requester gets a NAK, this QP goes
// to ERR. recvStatus, when set and a receive was consumed for the request,
// is the status that receive completes with. It unlocks q.mu.
func (q *QP) nakLocked(resp *Response, syn uint8, recvStatus verbs.Status, p Payload, n int) error {
	resp.Op, resp.Syndrome = FrameNak, syn
	if q.rinBusy {
		st := recvStatus
		if st == 0 {
			st = verbs.StatusRemInvReqErr
		}
		q.recvCQ.push(verbs.WC{ID: q.rin.id, Status: st, QPNum: q.num})
		q.rinBusy = false
		q.rin.releaseRefs()
	}
	q.enterErrLocked()
	q.mu.Unlock()
	return p.Skip(n)
}

// inSequenceLocked reports whether the responder takes request h now, and
// then addresses resp to its requester: not while the QP is not ready or
// in ERR, nor a request after one NAKed for RNR (the requester goes back
// and resends it), which are dropped silently, as RC drops out-of-sequence
// packets.
func (q *QP) inSequenceLocked(h *Header, resp *Response) bool {
	if (q.state != verbs.QPRTR && q.state != verbs.QPRTS) || h.Seq != q.epsn {
		return false
	}
	resp.QPN = q.remote.QPNum
	resp.Seq = h.Seq
	return true
}

// targetLocked checks a request's target, rkey and [addr, addr+n), as the
// responder does (the region registered, of this QP's PD, with the access
// need, the span inside it), and returns the region and the span; ok is
// false when a check fails (REMOTE_ACCESS). The region is the one the last
// request named (rkMR) while it is still registered, else the device's.
// It takes no in-flight reference.
func (q *QP) targetLocked(rkey uint32, addr, n uint64, need verbs.Access) (m *MR, span []byte, ok bool) {
	m = q.rkMR
	if m == nil || m.rkey != rkey || !m.valid() {
		m = q.dev.lookupRKey(rkey)
		q.rkMR = m
	}
	if m == nil || !m.valid() || m.pd != q.pd || m.access&need != need {
		return m, nil, false
	}
	span, ok = m.span(addr, n)
	return m, span, ok
}

// handleWriteRun executes a WRITE_RUN (FrameWriteRun): the WRITEs h.Seq to
// h.Seq+h.Imm−1, checked as HandleRequest checks a WRITE, all under one
// hold of the lock, before any payload is read. Writes before the first
// that fails the checks land; that one gets the NAK (REMOTE_ACCESS, or
// INVALID_REQUEST when the QP takes no remote writes, for the run's first)
// and moves the QP to ERR; the rest are not executed, as a responder that
// drops what follows a NAK would not. A run whose lengths do not add up to
// its body is a protocol error.
func (q *QP) handleWriteRun(h *Header, p Payload, resp *Response) error {
	k := int(h.Imm)
	dl := k * RunDescLen
	if err := h.Check(q.dev.cfg.Caps.MaxMsgSize); err != nil {
		return err // 1 <= k <= RunMax and dl <= h.Len, whoever decoded h
	}
	if cap(q.runDesc) < dl {
		q.runDesc = make([]byte, RunMax*RunDescLen)
	}
	desc := q.runDesc[:dl]
	if err := p.ReadFull(desc); err != nil {
		return err
	}
	left := h.PayloadLen() - dl
	q.mu.Lock()
	if !q.inSequenceLocked(h, resp) {
		q.mu.Unlock()
		return p.Skip(left)
	}
	if q.access&verbs.AccessRemoteWrite == 0 {
		return q.nakLocked(resp, SynInvReq, 0, p, left)
	}
	dsts, mrs := q.runDst[:0], q.runMRs[:0]
	var held *MR // the region of the last reference taken: consecutive writes into it share one
	bad, sum := k, 0
	for i := range k {
		d := desc[i*RunDescLen:]
		raddr, rkey, ln := binary.BigEndian.Uint64(d), binary.BigEndian.Uint32(d[8:]), binary.BigEndian.Uint32(d[12:])
		if uint64(ln) > uint64(left-sum) {
			q.mu.Unlock()
			q.dropRun(dsts, mrs)
			return fmt.Errorf("%w: WRITE_RUN's write %d of %d bytes overruns its body (%d bytes of payload)", ErrProtocol, i, ln, left)
		}
		sum += int(ln)
		if ln == 0 {
			dsts = append(dsts, nil) // IBTA: a zero-length WRITE validates no rkey
			continue
		}
		m, dst, ok := q.targetLocked(rkey, raddr, uint64(ln), verbs.AccessRemoteWrite)
		if ok && m != held {
			if ok = m.acquire(); ok {
				held = m
				mrs = append(mrs, m)
			}
		}
		if !ok {
			bad = i
			break
		}
		dsts = append(dsts, dst)
	}
	if bad == k && sum != left {
		q.mu.Unlock()
		q.dropRun(dsts, mrs)
		return fmt.Errorf("%w: WRITE_RUN's writes add up to %d bytes, its body has %d", ErrProtocol, sum, left)
	}
	q.epsn += uint32(bad)
	q.mu.Unlock()

	var err error
	for _, dst := range dsts {
		if dst != nil {
			if err = p.ReadFull(dst); err != nil {
				break
			}
		}
		left -= len(dst)
	}
	q.dropRun(dsts, mrs)
	if err != nil || bad == k {
		return err // a broken connection drops the link, which fails the QP
	}
	q.mu.Lock()
	resp.Seq = h.Seq + uint32(bad)
	return q.nakLocked(resp, SynRemAccess, 0, p, left)
}

// dropRun releases a run's in-flight references and keeps its scratch
// slices, cleared, for the next run.
func (q *QP) dropRun(dsts [][]byte, mrs []*MR) {
	for _, m := range mrs {
		m.release()
	}
	clear(mrs)
	clear(dsts)
	q.runDst, q.runMRs = dsts[:0], mrs[:0]
}

// sendFill reads a SEND's payload into the receive's buffers (rwqe w).
// With a steer (verbs.SendSteerer) and a payload longer than pre that the
// first buffer holds the first pre bytes of, those bytes go there first
// and the steer may take the rest into a buffer of its own. A read that
// stops part way (*SuspendError) leaves the fill where it stopped: run
// again, it goes on from there.
type sendFill struct {
	w      *rwqe
	segs   [][]byte        // what is left to read, in order (in own)
	own    [][]byte        // segs' backing array, kept for the next SEND
	steer  verbs.SendSteer // to ask once segs (the prefix) is read; nil once asked
	pre    int             // the prefix's length
	rest   int             // the bytes after the prefix
	lender verbs.SendSteer // the steer whose buffer segs fills: Steered is owed
}

// start sets f up for a SEND of n bytes into w.
func (f *sendFill) start(w *rwqe, n int, steer verbs.SendSteer, pre int) {
	*f = sendFill{w: w, own: f.own[:0]}
	if steer != nil && pre > 0 && n > pre && len(w.segs) > 0 && len(w.segs[0]) >= pre {
		f.steer, f.pre, f.rest = steer, pre, n-pre
		f.segs = append(f.own, w.segs[0][:pre])
	} else {
		f.segs = appendSegs(f.own, w.segs, 0, n)
	}
	f.own = f.segs[:0] // the array, grown or not, for the next SEND
}

// run reads on from p: nil once the payload is all in place, ErrSuspended
// if p stopped part way, or the error that broke the read.
func (f *sendFill) run(p Payload) error {
	for {
		for len(f.segs) > 0 {
			if err := p.ReadFull(f.segs[0]); err != nil {
				var se *SuspendError
				if errors.As(err, &se) && se.Filled >= 0 && se.Filled < len(f.segs[0]) {
					f.segs[0] = f.segs[0][se.Filled:]
					return ErrSuspended
				}
				f.done(false)
				return err
			}
			f.segs = f.segs[1:]
		}
		if f.steer == nil {
			f.done(true)
			return nil
		}
		s := f.steer
		f.steer = nil
		prefix := f.w.segs[0][:f.pre]
		if dst := s.Steer(f.w.id, prefix, f.rest); dst != nil {
			if n := lenSegs(dst); n != f.rest {
				s.Steered(false)
				f.done(false)
				return fmt.Errorf("%w: a steer gave %d bytes for a SEND body of %d", ErrProtocol, n, f.rest)
			}
			f.segs, f.lender = append(f.own[:0], dst...), s
		} else {
			f.segs = appendSegs(f.own[:0], f.w.segs, f.pre, f.rest)
		}
		f.own = f.segs[:0]
	}
}

// done ends the fill: the steer whose buffer it filled learns whether all
// of the body is there.
func (f *sendFill) done(ok bool) {
	if f.lender != nil {
		f.lender.Steered(ok)
	}
	clear(f.own[:cap(f.own)]) // nothing keeps the buffers reachable
	*f = sendFill{own: f.own[:0]}
}

// lenSegs is the bytes of segs together.
func lenSegs(segs [][]byte) int {
	n := 0
	for _, b := range segs {
		n += len(b)
	}
	return n
}

// appendSegs appends to dst the spans of segs that hold n bytes from byte
// off of them on.
func appendSegs(dst, segs [][]byte, off, n int) [][]byte {
	for _, seg := range segs {
		if n == 0 {
			break
		}
		if off >= len(seg) {
			off -= len(seg)
			continue
		}
		k := min(n, len(seg)-off)
		dst = append(dst, seg[off:off+k])
		off, n = 0, n-k
	}
	return dst
}

// suspendedSend is a SEND whose payload read was suspended mid-frame
// (q.fill holds where): its header, and the QP its answer goes to.
type suspendedSend struct {
	active bool
	h      Header
	qpn    uint32
}

// resumeSendLocked goes on with the suspended SEND (q.suspSend), reading
// the rest of its payload from p; it may be suspended again. Once the
// payload is in, the receive completes and resp is the answer to send. It
// unlocks q.mu for the read and returns with it held.
func (q *QP) resumeSendLocked(p Payload, resp *Response) error {
	s := q.suspSend
	q.suspSend = suspendedSend{}
	q.mu.Unlock()
	err := q.fill.run(p)
	if err == ErrSuspended {
		q.mu.Lock()
		q.suspSend = s
		return ErrSuspended
	}
	resp.QPN, resp.Seq = s.qpn, s.h.Seq // Resume cleared resp
	err = q.endRequest(&s.h, err, true, resp)
	q.mu.Lock()
	return err
}

// dropSuspendedSendLocked forgets a suspended SEND (its connection is
// gone): its receive completes with WR_FLUSH_ERR unless a flush did that
// already, and the memory it held is released.
func (q *QP) dropSuspendedSendLocked() {
	if !q.suspSend.active {
		return
	}
	q.suspSend = suspendedSend{}
	q.fill.done(false)
	if q.rinBusy && !q.rinFlushed {
		q.recvCQ.push(verbs.WC{ID: q.rin.id, Status: verbs.StatusWRFlushErr, QPNum: q.num})
	}
	q.rinBusy = false
	q.rin.releaseRefs()
}
