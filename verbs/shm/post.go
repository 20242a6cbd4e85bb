//go:build linux

package shm

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/verbs"
)

type outcome uint8

const (
	outDone     outcome = iota // the request finished (with its status)
	outRNR                     // no receive posted at the peer
	outNotReady                // the peer QP is not in RTR/RTS yet
)

// PostSend checks and executes requests in order. A request that can run
// now runs in this call (the data is in place and its completion queued
// when PostSend returns); one that must wait for the peer is queued with
// everything after it.
func (q *QP) PostSend(wrs ...verbs.SendWR) error {
	return q.postSend(wrs, nil)
}

// PostSendInlinePair is verbs.InlinePairPoster: the inline request wr
// with tail after wr.Inline. The payload goes from the two buffers
// straight into the peer's receive, without being joined first.
func (q *QP) PostSendInlinePair(wr verbs.SendWR, tail []byte) error {
	if wr.Flags&verbs.SendInline == 0 {
		return q.opErr("PostSend", 0, fmt.Errorf("%w: an inline pair without the SendInline flag", verbs.ErrInvalidArgument))
	}
	if n := len(wr.Inline) + len(tail); n > q.cap.MaxInline {
		return q.opErr("PostSend", 0, fmt.Errorf("%w: %d bytes inline exceed the QP's max inline %d", verbs.ErrInvalidArgument, n, q.cap.MaxInline))
	}
	wrs := [1]verbs.SendWR{wr}
	return q.postSend(wrs[:], tail)
}

// postSend is PostSend; tail, when not nil, follows the inline payload of
// the only request in wrs (PostSendInlinePair).
func (q *QP) postSend(wrs []verbs.SendWR, tail []byte) error {
	q.checkRemoteErr()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return q.opErr("PostSend", 0, verbs.ErrClosed)
	}
	switch q.st() {
	case verbs.QPRTS, verbs.QPErr:
	default:
		return q.opErr("PostSend", 0, fmt.Errorf("%w: PostSend in %v (needs RTS)", verbs.ErrInvalidState, q.st()))
	}
	racesync.Acquire()
	defer racesync.Release()
	dc := &q.d.caps
	for i := range wrs {
		wr := &wrs[i]
		if err := verbs.ValidateSendWR(wr, q.cap, *dc); err != nil {
			return q.opErr("PostSend", i, err)
		}
		if wr.Flags&verbs.SendInline == 0 {
			for j, s := range wr.SGL {
				m := q.d.localMR(s.LKey)
				if m == nil || m.pd != q.pd {
					return q.opErr("PostSend", i, fmt.Errorf("%w: SGE %d lkey %#x names no memory region of this PD", verbs.ErrBadKey, j, s.LKey))
				}
				if !m.contains(s.Addr, uint64(s.Length)) {
					return q.opErr("PostSend", i, fmt.Errorf("%w: SGE %d [%#x, +%d) is outside region %#x [%#x, +%d)", verbs.ErrBadKey, j, s.Addr, s.Length, s.LKey, m.addr, len(m.buf)))
				}
			}
		}
		if q.st() == verbs.QPErr {
			st := verbs.StatusWRFlushErr
			if q.owedRetry {
				st, q.owedRetry = verbs.StatusRetryExcErr, false
			}
			q.scq.push(verbs.WC{ID: wr.ID, Status: st, QPNum: q.qpn, Opcode: verbs.WCOpcodeFor(wr.Opcode)})
			continue
		}
		if len(q.pending) > 0 {
			if len(q.pending) >= q.cap.MaxSendWR {
				return q.opErr("PostSend", i, fmt.Errorf("%w: %d requests wait for the peer", verbs.ErrQueueFull, len(q.pending)))
			}
			q.enqueue(wr, tail)
			continue
		}
		st, out := q.exec(wr, tail)
		if out != outDone {
			q.enqueue(wr, tail)
			q.waited(out)
			continue
		}
		q.complete(wr, st, len(tail))
	}
	return nil
}

// enqueue keeps a private copy of wr, with tail joined to its inline
// payload (the caller may reuse its SGL and buffers once PostSend returns).
func (q *QP) enqueue(wr *verbs.SendWR, tail []byte) {
	p := pendingWR{wr: *wr, rnrLeft: int(q.rnrRetry), retryLeft: int(q.retryCnt)}
	p.wr.SGL = append([]verbs.SGE(nil), wr.SGL...)
	p.wr.Inline = append(append([]byte(nil), wr.Inline...), tail...)
	q.pending = append(q.pending, p)
}

// waited accounts one RNR NAK or one unanswered attempt for the head
// request and schedules its retry, or fails it when the retries are spent.
func (q *QP) waited(out outcome) {
	p := &q.pending[0]
	var delay time.Duration
	switch out {
	case outRNR:
		if q.rnrRetry != 7 {
			if p.rnrLeft == 0 {
				q.fail(verbs.StatusRNRRetryExcErr, false)
				return
			}
			p.rnrLeft--
		}
		delay = verbs.RNRTimerDuration(q.peerMinRNR())
	case outNotReady:
		if q.timeout != 0 {
			if p.retryLeft == 0 {
				q.fail(verbs.StatusRetryExcErr, false)
				return
			}
			p.retryLeft--
		}
		delay = verbs.TimeoutDuration(q.timeout)
		if delay == 0 {
			delay = 10 * time.Millisecond
		}
	}
	if q.timer == nil {
		q.timer = time.AfterFunc(delay, q.retry)
	}
}

func (q *QP) peerMinRNR() uint8 {
	if l := q.lnk.Load(); l != nil {
		return uint8(atomic.LoadUint32(l.hdr(qsMinRNR)))
	}
	return q.minRNR
}

// retry runs queued requests when their timer fires.
func (q *QP) retry() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.timer = nil
	if q.destroyed || q.st() != verbs.QPRTS {
		return
	}
	racesync.Acquire()
	defer racesync.Release()
	for len(q.pending) > 0 && q.st() == verbs.QPRTS {
		st, out := q.exec(&q.pending[0].wr, nil)
		if out != outDone {
			q.waited(out)
			return
		}
		wr := q.pending[0].wr
		q.pending = q.pending[1:]
		q.complete(&wr, st, 0)
	}
}

// complete queues the requester's completion (extra: the bytes of an
// inline pair's tail); an error moves the QP to ERR.
func (q *QP) complete(wr *verbs.SendWR, st verbs.Status, extra int) {
	if st == verbs.StatusSuccess {
		if wr.Flags&verbs.SendSignaled != 0 || q.sigAll {
			q.scq.push(verbs.WC{ID: wr.ID, Status: st, Opcode: verbs.WCOpcodeFor(wr.Opcode), ByteLen: uint32(wr.Len()) + uint32(extra), QPNum: q.qpn})
		}
		return
	}
	q.scq.push(verbs.WC{ID: wr.ID, Status: st, QPNum: q.qpn, Opcode: verbs.WCOpcodeFor(wr.Opcode)})
	q.fail(verbs.StatusWRFlushErr, false)
}

// exec carries out one request as the initiator. q.mu is held.
func (q *QP) exec(wr *verbs.SendWR, tail []byte) (verbs.Status, outcome) {
	l := q.lnk.Load()
	if l == nil || l.dead.Load() {
		return verbs.StatusRetryExcErr, outDone
	}
	switch ps := verbs.QPState(atomic.LoadUint32(l.hdr(qsState))); ps {
	case verbs.QPRTR, verbs.QPRTS, verbs.QPSQD, verbs.QPSQE:
	case verbs.QPErr:
		return verbs.StatusRetryExcErr, outDone
	default:
		return 0, outNotReady
	}
	op := wr.Opcode
	needLocal := op == verbs.OpRDMARead || op.IsAtomic()
	// The local side: inline data or the SGEs' memory.
	locals := q.locals[:0]
	var total uint64
	if wr.Flags&verbs.SendInline != 0 {
		if len(wr.Inline) > 0 {
			locals = append(locals, wr.Inline)
		}
		if len(tail) > 0 {
			locals = append(locals, tail)
		}
		total = uint64(len(wr.Inline) + len(tail))
	} else {
		for _, s := range wr.SGL {
			m := q.d.localMR(s.LKey)
			if m == nil || m.pd != q.pd || !m.contains(s.Addr, uint64(s.Length)) {
				return verbs.StatusLocProtErr, outDone
			}
			if needLocal && m.access&verbs.AccessLocalWrite == 0 {
				return verbs.StatusLocProtErr, outDone
			}
			if s.Length > 0 {
				locals = append(locals, m.slice(s.Addr, uint64(s.Length)))
			}
			total += uint64(s.Length)
		}
	}
	peerAccess := verbs.Access(atomic.LoadUint32(l.hdr(qsAccess)))
	switch op {
	case verbs.OpRDMAWrite, verbs.OpRDMAWriteWithImm:
		if peerAccess&verbs.AccessRemoteWrite == 0 {
			l.setPeerErr()
			return verbs.StatusRemInvReqErr, outDone
		}
		var e []byte
		var idx uint64
		if op == verbs.OpRDMAWriteWithImm {
			var st verbs.Status
			var out outcome
			idx, e, st, out = l.claim()
			if out != outDone || st != verbs.StatusSuccess {
				return st, out
			}
		}
		if total > 0 {
			sp, st := l.resolve(wr.RKey, wr.RemoteAddr, total, verbs.AccessRemoteWrite)
			if st == verbs.StatusSuccess {
				q.spans[0] = sp
				st = l.write(q.spans[:1], locals)
			}
			if st != verbs.StatusSuccess {
				if e != nil {
					// IBTA: the receive the WRITE_WITH_IMM took completes
					// with LOC_ACCESS_ERR.
					rs := verbs.StatusLocAccessErr
					if st == verbs.StatusRetryExcErr {
						rs = verbs.StatusWRFlushErr
					}
					l.publish(e, idx, rs, verbs.WCRecvRDMAWithImm, 0, 0, 0)
				}
				if st != verbs.StatusRetryExcErr {
					l.setPeerErr()
				}
				return st, outDone
			}
		}
		if e != nil {
			l.publish(e, idx, verbs.StatusSuccess, verbs.WCRecvRDMAWithImm, uint32(total), wr.Imm, verbs.WCWithImm)
		}
		return verbs.StatusSuccess, outDone

	case verbs.OpSend, verbs.OpSendWithImm:
		idx, e, st, out := l.claim()
		if out != outDone || st != verbs.StatusSuccess {
			return st, out
		}
		// Resolve the receive's SGEs in the peer's region table.
		rd := l.desc(idx)
		var imm uint32
		var flags verbs.WCFlags
		if op == verbs.OpSendWithImm {
			imm, flags = wr.Imm, verbs.WCWithImm
		}
		if total > 0 && total <= rcInlineMax {
			// The data goes in the completion (see layout.go); the owner
			// checked its receive's keys when it posted it and copies
			// the data out when it polls. Only the room is checked here,
			// from the descriptor unless every receive is large enough.
			room := uint64(atomic.LoadUint32(l.hdr(qsMinRecv)))
			if room < total {
				room = 0
				nsge := l.descSGEs(rd)
				for j := 0; j < nsge && room < total; j++ {
					_, n, _ := descSGE(rd, j)
					room += uint64(n)
				}
			}
			if room < total {
				l.publish(e, idx, verbs.StatusLocLenErr, verbs.WCRecv, 0, 0, 0)
				l.setPeerErr()
				return verbs.StatusRemInvReqErr, outDone
			}
			o := rcData
			for _, b := range locals {
				o += copy(e[o:], b)
			}
			l.publishInline(e, idx, uint32(total), imm, flags)
			return verbs.StatusSuccess, outDone
		}
		spans := q.spans[:0]
		var room uint64
		bad := false
		nsge := l.descSGEs(rd)
		for j := 0; j < nsge && room < total; j++ {
			addr, n32, key := descSGE(rd, j)
			if n32 == 0 {
				continue
			}
			n := min(uint64(n32), total-room)
			sp, st := l.resolve(key, addr, n, verbs.AccessLocalWrite)
			if st != verbs.StatusSuccess {
				bad = true
				break
			}
			spans = append(spans, sp)
			room += n
		}
		switch {
		case bad:
			l.publish(e, idx, verbs.StatusLocProtErr, verbs.WCRecv, 0, 0, 0)
			l.setPeerErr()
			return verbs.StatusRemOpErr, outDone
		case room < total:
			l.publish(e, idx, verbs.StatusLocLenErr, verbs.WCRecv, 0, 0, 0)
			l.setPeerErr()
			return verbs.StatusRemInvReqErr, outDone
		}
		if total > 0 {
			if st := l.write(spans, locals); st != verbs.StatusSuccess {
				l.publish(e, idx, verbs.StatusWRFlushErr, verbs.WCRecv, 0, 0, 0)
				if st != verbs.StatusRetryExcErr {
					l.setPeerErr()
				}
				return st, outDone
			}
		}
		l.publish(e, idx, verbs.StatusSuccess, verbs.WCRecv, uint32(total), imm, flags)
		return verbs.StatusSuccess, outDone

	case verbs.OpRDMARead:
		if peerAccess&verbs.AccessRemoteRead == 0 || atomic.LoadUint32(l.hdr(qsMaxDestRd)) == 0 {
			l.setPeerErr()
			return verbs.StatusRemInvReqErr, outDone
		}
		if total == 0 {
			return verbs.StatusSuccess, outDone
		}
		sp, st := l.resolve(wr.RKey, wr.RemoteAddr, total, verbs.AccessRemoteRead)
		if st == verbs.StatusSuccess {
			st = l.read(sp, locals)
		}
		if st != verbs.StatusSuccess && st != verbs.StatusRetryExcErr {
			l.setPeerErr()
		}
		return st, outDone

	case verbs.OpAtomicCmpAndSwp, verbs.OpAtomicFetchAdd:
		if peerAccess&verbs.AccessRemoteAtomic == 0 || atomic.LoadUint32(l.hdr(qsMaxDestRd)) == 0 {
			l.setPeerErr()
			return verbs.StatusRemInvReqErr, outDone
		}
		sp, st := l.resolve(wr.RKey, wr.RemoteAddr, 8, verbs.AccessRemoteAtomic)
		if st == verbs.StatusSuccess && (sp.direct == nil || sp.kind != kindProvider) {
			st = verbs.StatusRemAccessErr // registered Go memory takes no remote atomics
		}
		if st != verbs.StatusSuccess {
			l.setPeerErr()
			return st, outDone
		}
		w := (*uint64)(unsafe.Pointer(&sp.direct[0]))
		var old uint64
		if op == verbs.OpAtomicFetchAdd {
			old = atomic.AddUint64(w, wr.CompareAdd) - wr.CompareAdd
		} else {
			for {
				old = atomic.LoadUint64(w)
				if old != wr.CompareAdd || atomic.CompareAndSwapUint64(w, old, wr.Swap) {
					break
				}
			}
		}
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], old)
		scatter(locals, b[:])
		return verbs.StatusSuccess, outDone
	}
	return verbs.StatusLocQPOpErr, outDone
}

// scatter copies src across dst in order.
func scatter(dst [][]byte, src []byte) {
	for _, d := range dst {
		n := copy(d, src)
		src = src[n:]
		if len(src) == 0 {
			return
		}
	}
}

// rspan is a resolved remote range: direct when this process can address
// it (the peer's heap through our mapping, or a same-process peer's Go
// memory), else the owner's virtual address for CMA or the copy path.
type rspan struct {
	direct []byte
	key    uint32
	addr   uint64
	n      uint64
	kind   uint32
}

// write copies the local pieces, in order, across the remote spans.
func (l *link) write(spans []rspan, locals [][]byte) verbs.Status {
	li, lo := 0, 0 // current local piece and offset in it
	for _, sp := range spans {
		if sp.direct != nil {
			dst := sp.direct
			for len(dst) > 0 && li < len(locals) {
				// The peer reads what lands here from its core: see ntcopy.
				n := ntcopy.Copy(dst, locals[li][lo:])
				dst = dst[n:]
				lo += n
				if lo == len(locals[li]) {
					li, lo = li+1, 0
				}
			}
			continue
		}
		// Collect the local sub-slices that land in this span.
		var pieces [maxSGE + 1][]byte
		ps := pieces[:0]
		need := sp.n
		for need > 0 && li < len(locals) {
			n := min(uint64(len(locals[li])-lo), need)
			ps = append(ps, locals[li][lo:lo+int(n)])
			need -= n
			lo += int(n)
			if lo == len(locals[li]) {
				li, lo = li+1, 0
			}
		}
		if st := l.remoteIO(sp, ps, true); st != verbs.StatusSuccess {
			return st
		}
	}
	return verbs.StatusSuccess
}

// read copies the remote span across the local pieces.
func (l *link) read(sp rspan, locals [][]byte) verbs.Status {
	if sp.direct != nil {
		src := sp.direct
		for _, d := range locals {
			n := copy(d, src)
			src = src[n:]
		}
		return verbs.StatusSuccess
	}
	return l.remoteIO(sp, locals, false)
}

// remoteIO moves bytes to or from another process's registered Go memory.
func (l *link) remoteIO(sp rspan, local [][]byte, write bool) verbs.Status {
	if l.path == UserMemCMA {
		err := cmaCopy(l.pid, local, sp.addr, write)
		switch err {
		case nil:
			return verbs.StatusSuccess
		case syscall.ESRCH:
			l.dead.Store(true)
			return verbs.StatusRetryExcErr
		case syscall.EFAULT:
			return verbs.StatusRemAccessErr
		}
		return verbs.StatusRemOpErr
	}
	return l.copyIO(sp, local, write)
}
