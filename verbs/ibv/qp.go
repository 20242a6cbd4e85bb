//go:build linux && cgo && rdma

package ibv

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// postBatch is how many work requests one cgo call posts.
const postBatch = 32

// recvBit marks the internal wr_id of a receive.
const recvBit = 1 << 63

// qp is an RC queue pair.
//
// Work-request ids: the device never sees the caller's ids. Each request
// gets an internal id, a per-queue sequence number (with recvBit for the
// receive queue), and a slot in a ring that remembers the caller's id, the
// opcode and whether it was signaled. A completion names its slot exactly,
// so the provider knows which queue an error completion belongs to (its
// opcode is undefined), fills in the opcode the software providers report,
// retires the unsignaled requests a later completion implies, and knows
// when a closing QP has flushed everything.
type qp struct {
	dev      *device
	pd       *pd
	scq, rcq *cq
	h        unsafe.Pointer // struct ibv_qp
	num, psn uint32
	cap      verbs.QPCap
	addr     []byte

	mu     sync.Mutex // guards everything below, and posting
	state  verbs.QPState
	closed bool
	sq     []sendSlot // ring; len = MaxSendWR + 1 (room for the close marker)
	sqHead uint64     // oldest outstanding sequence number
	sqTail uint64     // next sequence number
	rq     []uint64   // ring of caller ids; len = MaxRecvWR
	rqHead uint64
	rqTail uint64

	// C scratch for building chains: descriptors, SGEs, WR structs and
	// inline payloads of one batch.
	scratch    unsafe.Pointer
	sdesc      []sendDesc
	rdesc      []recvDesc
	sges       []sgeDesc
	swrs, rwrs unsafe.Pointer
	inline     []byte
	maxSGE     int
}

type sendSlot struct {
	id       uint64
	op       verbs.Opcode
	signaled bool
	marker   bool // the zero-length request Close posts to learn the flush is done
}

func (p *pd) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	fail := func(err error) (verbs.QP, error) { return nil, errorf("CreateQP", 0, err) }
	d := p.dev
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return fail(fmt.Errorf("%w: send and receive CQs must be ibv CQs", verbs.ErrInvalidArgument))
	}
	if scq.dev != d || rcq.dev != d {
		return fail(fmt.Errorf("%w: a CQ belongs to another device", verbs.ErrInvalidArgument))
	}
	c := attr.Cap
	switch {
	case c.MaxSendWR < 1 || c.MaxSendWR > d.caps.MaxQPWR || c.MaxRecvWR < 1 || c.MaxRecvWR > d.caps.MaxQPWR:
		return fail(fmt.Errorf("%w: queue depths send %d, recv %d, want 1..%d", verbs.ErrInvalidArgument, c.MaxSendWR, c.MaxRecvWR, d.caps.MaxQPWR))
	case c.MaxSendSGE < 0 || c.MaxSendSGE > d.caps.MaxSGE || c.MaxRecvSGE < 0 || c.MaxRecvSGE > d.caps.MaxSGE:
		return fail(fmt.Errorf("%w: SGEs send %d, recv %d, want 0..%d", verbs.ErrInvalidArgument, c.MaxSendSGE, c.MaxRecvSGE, d.caps.MaxSGE))
	case c.MaxInline < 0 || c.MaxInline > d.caps.MaxInline:
		return fail(fmt.Errorf("%w: max inline %d, want 0..%d", verbs.ErrInvalidArgument, c.MaxInline, d.caps.MaxInline))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || d.isClosed() {
		return fail(verbs.ErrClosed)
	}
	if scq.isClosed() || rcq.isClosed() {
		return fail(fmt.Errorf("%w: completion queue", verbs.ErrClosed))
	}
	cd := capDesc{maxSendWR: uint32(c.MaxSendWR), maxRecvWR: uint32(c.MaxRecvWR),
		maxSendSGE: uint32(max(c.MaxSendSGE, 1)), maxRecvSGE: uint32(max(c.MaxRecvSGE, 1)), maxInline: uint32(c.MaxInline)}
	h, num, err := cCreateQP(p.h, scq.h, rcq.h, &cd, attr.SigAll)
	if err != nil {
		return fail(errnoErr("ibv_create_qp", err))
	}
	q := &qp{dev: d, pd: p, scq: scq, rcq: rcq, h: h, num: num, psn: rand.Uint32() & 0xffffff,
		cap: verbs.QPCap{MaxSendWR: int(cd.maxSendWR), MaxRecvWR: int(cd.maxRecvWR),
			MaxSendSGE: int(cd.maxSendSGE), MaxRecvSGE: int(cd.maxRecvSGE), MaxInline: int(cd.maxInline)}}
	q.sq = make([]sendSlot, q.cap.MaxSendWR+1)
	q.rq = make([]uint64, q.cap.MaxRecvWR)
	q.addr, err = EncodeAddress(Endpoint{QPN: num, PSN: q.psn, LID: d.lid, GID: d.gid.GID, MTU: d.activeMTU, LinkLayer: d.linkLayer})
	if err == nil {
		err = q.allocScratch()
	}
	if err != nil {
		_ = cDestroyQP(h)
		return fail(err)
	}
	p.nQP++
	d.mu.Lock()
	d.qps[q] = struct{}{}
	scq.nQP++
	rcq.nQP++
	d.mu.Unlock()
	d.tabMu.Lock()
	d.byQPN[num] = q
	d.tabMu.Unlock()
	return q, nil
}

func (c *cq) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (q *qp) allocScratch() error {
	q.maxSGE = max(q.cap.MaxSendSGE, q.cap.MaxRecvSGE, 1)
	sz := []int{
		postBatch * int(unsafe.Sizeof(sendDesc{})),
		postBatch * int(unsafe.Sizeof(recvDesc{})),
		postBatch * q.maxSGE * int(unsafe.Sizeof(sgeDesc{})),
		postBatch * sizeofSendWR,
		postBatch * sizeofRecvWR,
		postBatch * max(q.cap.MaxInline, 1),
	}
	total := 0
	off := make([]int, len(sz))
	for i, s := range sz {
		off[i] = total
		total += (s + 63) &^ 63
	}
	q.scratch = cAlloc(total)
	if q.scratch == nil {
		return fmt.Errorf("%w: %d bytes of C memory for posting", verbs.ErrQueueFull, total)
	}
	at := func(i int) unsafe.Pointer { return unsafe.Add(q.scratch, off[i]) }
	q.sdesc = unsafe.Slice((*sendDesc)(at(0)), postBatch)
	q.rdesc = unsafe.Slice((*recvDesc)(at(1)), postBatch)
	q.sges = unsafe.Slice((*sgeDesc)(at(2)), postBatch*q.maxSGE)
	q.swrs, q.rwrs = at(3), at(4)
	q.inline = unsafe.Slice((*byte)(at(5)), postBatch*max(q.cap.MaxInline, 1))
	return nil
}

func (q *qp) Num() uint32                              { return q.num }
func (q *qp) PSN() uint32                              { return q.psn }
func (q *qp) Address() []byte                          { return append([]byte(nil), q.addr...) }
func (q *qp) Cap() verbs.QPCap                         { return q.cap }
func (q *qp) errorf(op string, err error) *verbs.Error { return errorf(op, q.num, err) }

// State asks the device, since it moves a QP to ERR by itself when work fails.
func (q *qp) State() verbs.QPState {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stateLocked()
}

func (q *qp) stateLocked() verbs.QPState {
	if q.closed {
		return q.state
	}
	if s, err := cQPState(q.h); err == nil && s >= 0 && s <= int(verbs.QPErr) {
		q.state = verbs.QPState(s)
	}
	return q.state
}

func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return q.errorf("Modify", verbs.ErrClosed)
	}
	cur := q.stateLocked()
	next, err := verbs.CheckModify(ProviderName, cur, attr, mask, q.dev.caps)
	if err != nil {
		return q.errorf("Modify", err)
	}
	d := q.dev
	a := qpAttrDesc{state: uint32(next), access: uint32(attr.AccessFlags), pkeyIndex: uint32(attr.PKeyIndex),
		port: uint32(d.port), minRNRTimer: attr.MinRNRTimer, maxDestRdAtomic: attr.MaxDestRdAtomic,
		maxRdAtomic: attr.MaxQPRdAtomic, timeout: attr.Timeout, retryCnt: attr.RetryCnt, rnrRetry: attr.RNRRetry,
		sqPSN: attr.SQPSN, pathMTU: uint32(min(attr.PathMTU, d.activeMTU))}
	if mask&verbs.AttrPort != 0 && int(attr.Port) != 1 && int(attr.Port) != d.port {
		return q.errorf("Modify", fmt.Errorf("%w: port %d: this device is bound to %s port %d (1 also means it)",
			verbs.ErrInvalidArgument, attr.Port, d.name, d.port))
	}
	if mask&verbs.AttrAV != 0 {
		e, err := DecodeAddress(attr.Remote)
		if err != nil {
			return q.errorf("Modify", err)
		}
		p, err := pathFor(e, d.linkLayer, d.activeMTU, attr.PathMTU, d.gid.Index)
		if err != nil {
			return q.errorf("Modify", err)
		}
		a.dlid, a.dgid, a.sgidIndex, a.hopLimit, a.pathMTU = p.dlid, p.dgid, p.sgidIndex, p.hopLimit, uint32(p.mtu)
		if p.isGlobal {
			a.isGlobal = 1
		}
		a.destQPN, a.rqPSN = e.QPN, e.PSN
	}
	if cur == verbs.QPReset && next == verbs.QPErr {
		// verbs allows any state to move to ERR; Linux's ib_modify_qp_is_ok
		// has no RESET→ERR, so go through INIT (nothing is queued in RESET).
		init := qpAttrDesc{state: uint32(verbs.QPInit), port: uint32(d.port)}
		if err := cModifyQP(q.h, &init, uint32(verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)); err != nil {
			return q.errorf("Modify", fmt.Errorf("%v→%v (via INIT): %w", cur, next, errnoErr("ibv_modify_qp", err)))
		}
	}
	if err := cModifyQP(q.h, &a, uint32(mask)); err != nil {
		return q.errorf("Modify", fmt.Errorf("%v→%v: %w", cur, next, errnoErr("ibv_modify_qp", err)))
	}
	q.state = next
	if next == verbs.QPReset {
		// RESET discards every queued request without a completion.
		q.sqHead, q.rqHead = q.sqTail, q.rqTail
	}
	return nil
}

func (q *qp) PostSend(wrs ...verbs.SendWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return &verbs.Error{Op: "PostSend", Provider: ProviderName, QPNum: q.num, Index: 0, Err: verbs.ErrClosed}
	}
	if q.state < verbs.QPRTS {
		return &verbs.Error{Op: "PostSend", Provider: ProviderName, QPNum: q.num, Index: 0,
			Err: fmt.Errorf("%w: send in %v (needs RTS)", verbs.ErrInvalidState, q.state)}
	}
	return q.postSendLocked(wrs, false)
}

func (q *qp) postSendLocked(wrs []verbs.SendWR, marker bool) error {
	caps := &q.dev.caps
	for done := 0; done < len(wrs); {
		var bad error
		n, nsge := 0, 0
		for done+n < len(wrs) && n < postBatch {
			wr := &wrs[done+n]
			if err := verbs.ValidateSendWR(wr, q.cap, *caps); err != nil {
				bad = err
				break
			}
			if wr.Flags&verbs.SendInline == 0 {
				if err := q.dev.checkSGL(q.pd, wr.SGL); err != nil {
					bad = err
					break
				}
			}
			limit := uint64(q.cap.MaxSendWR)
			if marker {
				limit++
			}
			if q.sqTail-q.sqHead >= limit {
				bad = fmt.Errorf("%w: %d send requests outstanding (max %d; signal at least once per %d)",
					verbs.ErrQueueFull, q.sqTail-q.sqHead, q.cap.MaxSendWR, q.cap.MaxSendWR)
				break
			}
			seq := q.sqTail
			q.sqTail++
			q.sq[seq%uint64(len(q.sq))] = sendSlot{id: wr.ID, op: wr.Opcode, marker: marker,
				signaled: wr.Flags&verbs.SendSignaled != 0}
			sd := &q.sdesc[n]
			*sd = sendDesc{wrID: seq, remoteAddr: wr.RemoteAddr, compareAdd: wr.CompareAdd, swap: wr.Swap,
				rkey: wr.RKey, sgeOff: uint32(nsge), opcode: uint32(wr.Opcode), flags: uint32(wr.Flags)}
			binary.BigEndian.PutUint32(sd.imm[:], wr.Imm)
			if wr.Flags&verbs.SendInline != 0 {
				if len(wr.Inline) > 0 {
					buf := q.inline[n*max(q.cap.MaxInline, 1):]
					copy(buf, wr.Inline)
					q.sges[nsge] = sgeDesc{addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), length: uint32(len(wr.Inline))}
					nsge++
					sd.numSGE = 1
				}
			} else {
				for _, s := range wr.SGL {
					q.sges[nsge] = sgeDesc{addr: s.Addr, length: s.Length, lkey: s.LKey}
					nsge++
				}
				sd.numSGE = uint32(len(wr.SGL))
			}
			n++
		}
		posted := n
		var err error
		if n > 0 {
			posted, err = cPostSend(q.h, unsafe.Pointer(&q.sdesc[0]), unsafe.Pointer(&q.sges[0]), q.swrs, n)
			q.sqTail -= uint64(n - posted) // the device did not take these
		}
		done += posted
		if err != nil {
			return &verbs.Error{Op: "PostSend", Provider: ProviderName, QPNum: q.num, Index: done, Err: errnoErr("ibv_post_send", err)}
		}
		if bad != nil {
			return &verbs.Error{Op: "PostSend", Provider: ProviderName, QPNum: q.num, Index: done, Err: bad}
		}
	}
	return nil
}

func (q *qp) PostRecv(wrs ...verbs.RecvWR) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return &verbs.Error{Op: "PostRecv", Provider: ProviderName, QPNum: q.num, Index: 0, Err: verbs.ErrClosed}
	}
	if q.state == verbs.QPReset {
		return &verbs.Error{Op: "PostRecv", Provider: ProviderName, QPNum: q.num, Index: 0,
			Err: fmt.Errorf("%w: receive in RESET (post from INIT on)", verbs.ErrInvalidState)}
	}
	for done := 0; done < len(wrs); {
		var bad error
		n, nsge := 0, 0
		for done+n < len(wrs) && n < postBatch {
			wr := &wrs[done+n]
			if err := verbs.ValidateRecvWR(wr, q.cap); err != nil {
				bad = err
				break
			}
			if err := q.dev.checkSGL(q.pd, wr.SGL); err != nil {
				bad = err
				break
			}
			if q.rqTail-q.rqHead >= uint64(len(q.rq)) {
				bad = fmt.Errorf("%w: %d receive requests outstanding (max %d)", verbs.ErrQueueFull, q.rqTail-q.rqHead, len(q.rq))
				break
			}
			seq := q.rqTail
			q.rqTail++
			q.rq[seq%uint64(len(q.rq))] = wr.ID
			q.rdesc[n] = recvDesc{wrID: seq | recvBit, sgeOff: uint32(nsge), numSGE: uint32(len(wr.SGL))}
			for _, s := range wr.SGL {
				q.sges[nsge] = sgeDesc{addr: s.Addr, length: s.Length, lkey: s.LKey}
				nsge++
			}
			n++
		}
		posted := n
		var err error
		if n > 0 {
			posted, err = cPostRecv(q.h, unsafe.Pointer(&q.rdesc[0]), unsafe.Pointer(&q.sges[0]), q.rwrs, n)
			q.rqTail -= uint64(n - posted)
		}
		done += posted
		if posted > 0 && q.state == verbs.QPErr {
			q.kickFlush()
		}
		if err != nil {
			return &verbs.Error{Op: "PostRecv", Provider: ProviderName, QPNum: q.num, Index: done, Err: errnoErr("ibv_post_recv", err)}
		}
		if bad != nil {
			return &verbs.Error{Op: "PostRecv", Provider: ProviderName, QPNum: q.num, Index: done, Err: bad}
		}
	}
	return nil
}

// kickFlush makes the device flush receives posted while the QP is in
// ERR. Hardware does that by itself; rxe (Linux 6.1) posts receives without
// entering the kernel, so its responder only flushes them when it next
// runs, which a move to ERR (legal from ERR) makes it do.
func (q *qp) kickFlush() {
	a := qpAttrDesc{state: uint32(verbs.QPErr)}
	_ = cModifyQP(q.h, &a, uint32(verbs.AttrState))
}

// translate turns a device completion into the caller's: it restores the
// caller's id, fills the opcode for error completions, converts the
// immediate from network order, and retires the request (and, for a send,
// the unsignaled ones before it, which the in-order rule says are done).
// It returns false for the internal close marker.
func (d *device) translate(w *wcDesc) (verbs.WC, bool) {
	wc := verbs.WC{ID: w.wrID, Status: statusOf(w.status), VendorErr: w.vendorErr, QPNum: w.qpNum}
	ok := wc.Status == verbs.StatusSuccess
	if ok {
		wc.Opcode = verbs.WCOpcode(w.opcode)
		wc.ByteLen = w.byteLen
		wc.SrcQP = w.srcQP
		if w.wcFlags&uint32(verbs.WCWithImm) != 0 {
			wc.Flags |= verbs.WCWithImm
			wc.Imm = binary.BigEndian.Uint32(w.imm[:])
		}
	}
	q := d.lookupQP(w.qpNum)
	if q == nil {
		return wc, true // a QP destroyed under the CQ: nothing to map
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if !ok && q.state != verbs.QPReset {
		q.state = verbs.QPErr // an error completion means the RC QP is in ERR
	}
	seq := w.wrID &^ recvBit
	if w.wrID&recvBit != 0 {
		if seq < q.rqHead || seq >= q.rqTail {
			return wc, true // discarded by a move to RESET
		}
		wc.ID = q.rq[seq%uint64(len(q.rq))]
		q.rqHead = seq + 1
		if !ok {
			wc.Opcode = verbs.WCRecv
		}
		return wc, true
	}
	if seq < q.sqHead || seq >= q.sqTail {
		return wc, true
	}
	s := q.sq[seq%uint64(len(q.sq))]
	q.sqHead = seq + 1
	wc.ID = s.id
	wc.Opcode = verbs.WCOpcodeFor(s.op)
	return wc, !s.marker
}

// drainTimeout bounds how long Close waits for the device to flush.
const drainTimeout = 2 * time.Second

// Close moves the QP to ERR, so the device completes everything outstanding
// with WR_FLUSH_ERR, posts one internal zero-length request behind it (its
// completion proves the send queue is flushed, unsignaled requests
// included), collects those completions into the CQs' buffers (the caller
// polls them as usual), and destroys the QP. Should the device not flush
// within drainTimeout, the missing completions are made up as WR_FLUSH_ERR,
// so the contract holds either way.
func (q *qp) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return q.errorf("QP.Close", verbs.ErrClosed)
	}
	st := q.stateLocked()
	q.closed = true
	if st != verbs.QPReset && (q.sqTail > q.sqHead || q.rqTail > q.rqHead) {
		// Also from ERR: that makes rxe flush receives posted in ERR.
		a := qpAttrDesc{state: uint32(verbs.QPErr)}
		if err := cModifyQP(q.h, &a, uint32(verbs.AttrState)); err == nil {
			q.state = verbs.QPErr
		}
		if q.sqTail > q.sqHead {
			_ = q.postSendLocked([]verbs.SendWR{{Opcode: verbs.OpSend, Flags: verbs.SendSignaled}}, true)
		}
	}
	q.mu.Unlock()

	drained := func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.sqHead == q.sqTail && q.rqHead == q.rqTail
	}
	deadline := time.Now().Add(drainTimeout)
	for sleep := 50 * time.Microsecond; !drained() && time.Now().Before(deadline); sleep = min(2*sleep, 5*time.Millisecond) {
		q.scq.fill()
		if q.rcq != q.scq {
			q.rcq.fill()
		}
		if !drained() {
			time.Sleep(sleep)
		}
	}
	err := cDestroyQP(q.h)
	q.scq.fill()
	q.rcq.fill()
	q.synthesizeFlush()

	d := q.dev
	d.tabMu.Lock()
	if d.byQPN[q.num] == q { // the number may already belong to a new QP
		delete(d.byQPN, q.num)
	}
	d.tabMu.Unlock()
	d.mu.Lock()
	delete(d.qps, q)
	q.scq.nQP--
	q.rcq.nQP--
	d.mu.Unlock()
	q.pd.mu.Lock()
	q.pd.nQP--
	q.pd.mu.Unlock()
	cFree(q.scratch)
	q.scratch = nil
	if err != nil {
		return q.errorf("QP.Close", errnoErr("ibv_destroy_qp", err))
	}
	return nil
}

// synthesizeFlush completes what the device left outstanding with WR_FLUSH_ERR.
func (q *qp) synthesizeFlush() {
	q.mu.Lock()
	var sends, recvs []verbs.WC
	for ; q.sqHead < q.sqTail; q.sqHead++ {
		s := q.sq[q.sqHead%uint64(len(q.sq))]
		if !s.marker {
			sends = append(sends, verbs.WC{ID: s.id, Status: verbs.StatusWRFlushErr, Opcode: verbs.WCOpcodeFor(s.op), QPNum: q.num})
		}
	}
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		recvs = append(recvs, verbs.WC{ID: q.rq[q.rqHead%uint64(len(q.rq))], Status: verbs.StatusWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.num})
	}
	q.mu.Unlock()
	if len(sends)+len(recvs) > 0 && q.dev.log != nil {
		q.dev.log.Warn("ibv: device did not flush a closing queue pair; completing the rest as WR_FLUSH_ERR",
			"qp", q.num, "sends", len(sends), "recvs", len(recvs))
	}
	for _, p := range []struct {
		c  *cq
		wc []verbs.WC
	}{{q.scq, sends}, {q.rcq, recvs}} {
		if len(p.wc) == 0 {
			continue
		}
		p.c.mu.Lock()
		if !p.c.closed {
			p.c.buf = append(p.c.buf, p.wc...)
		}
		p.c.mu.Unlock()
	}
}
