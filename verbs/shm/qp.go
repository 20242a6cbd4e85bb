//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/verbs"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/internal/racesync"
)

// QP is a reliable-connected queue pair of the shm provider. It implements
// verbs.QP and verbs.Disconnector.
//
// The requester runs in the caller of PostSend: it checks the peer's
// descriptors in the peer's mapped segment, copies the data itself
// (memcpy into or out of the peer's mapped memory, or cross-memory attach
// for the peer's registered Go memory), runs atomics as CPU atomics, and
// completes the request before PostSend returns. Only a request the peer
// cannot take yet (no receive posted: RNR; peer not yet in RTR) waits in a
// queue for a timer to retry it, and later requests queue behind it to keep
// RC order. The responder's CPU is not involved.
type QP struct {
	d      *Device
	pd     *pd
	qpn    uint32
	psn    uint32
	scq    *cq
	rcq    *cq
	cap    verbs.QPCap
	sigAll bool
	addr   []byte

	seg          []byte // this QP's segment in the device heap
	segOff, segN uint64
	depth        uint64 // RQ entries (power of two)
	dsz          uint64 // RQ descriptor size
	descWrites   uint64 // receive descriptors written (not found in place already); recvMu
	cqeOff       uint64 // where the RQ completions start

	state atomic.Uint32

	// mu serialises Modify and the requester (PostSend, retries, failure).
	mu        sync.Mutex
	access    verbs.Access
	maxDestRd uint8
	minRNR    uint8
	timeout   uint8
	retryCnt  uint8
	rnrRetry  uint8
	lnk       atomic.Pointer[link]
	pending   []pendingWR
	timer     *time.Timer
	owedRetry bool // a lost link owes the next request RETRY_EXC_ERR
	locals    [maxSGE][]byte
	spans     [maxSGE]rspan
	destroyed bool

	// Receive side: recvMu serialises PostRecv; rqPolled is advanced by the
	// recv CQ's Poll under the CQ's lock.
	recvMu    sync.Mutex
	minRecv   uint32 // the smallest receive posted so far, under recvMu
	minPosted bool   // minRecv is set
	rqPolled  atomic.Uint64
	flushFrom atomic.Uint64
}

type pendingWR struct {
	wr        verbs.SendWR
	rnrLeft   int
	retryLeft int
}

func (p *pd) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	d := p.d
	fail := func(err error) (verbs.QP, error) { return nil, d.opErr("CreateQP", 0, -1, err) }
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return fail(fmt.Errorf("%w: SendCQ and RecvCQ must be CQs of this shm device", verbs.ErrInvalidArgument))
	}
	if scq.d != d || rcq.d != d {
		return fail(fmt.Errorf("%w: a CQ belongs to another device", verbs.ErrInvalidArgument))
	}
	c := attr.Cap
	dc := d.Caps()
	if c.MaxSendWR < 0 || c.MaxRecvWR < 0 || c.MaxSendSGE < 0 || c.MaxRecvSGE < 0 || c.MaxInline < 0 {
		return fail(fmt.Errorf("%w: negative capability in %+v", verbs.ErrInvalidArgument, c))
	}
	if c.MaxSendWR > dc.MaxQPWR || c.MaxRecvWR > dc.MaxQPWR {
		return fail(fmt.Errorf("%w: queue depths %d/%d exceed the device max %d", verbs.ErrInvalidArgument, c.MaxSendWR, c.MaxRecvWR, dc.MaxQPWR))
	}
	if c.MaxSendSGE > dc.MaxSGE || c.MaxRecvSGE > dc.MaxSGE {
		return fail(fmt.Errorf("%w: SGE counts %d/%d exceed the device max %d", verbs.ErrInvalidArgument, c.MaxSendSGE, c.MaxRecvSGE, dc.MaxSGE))
	}
	if c.MaxInline > dc.MaxInline {
		return fail(fmt.Errorf("%w: max inline %d exceeds the device max %d", verbs.ErrInvalidArgument, c.MaxInline, dc.MaxInline))
	}
	c.MaxSendWR = max(c.MaxSendWR, 1)
	c.MaxSendSGE = max(c.MaxSendSGE, 1)
	c.MaxRecvSGE = max(c.MaxRecvSGE, 1)
	depth := uint64(1)
	for depth < uint64(max(c.MaxRecvWR, 1)) {
		depth <<= 1
	}
	c.MaxRecvWR = int(depth)
	q := &QP{d: d, pd: p, scq: scq, rcq: rcq, cap: c, sigAll: attr.SigAll, depth: depth, dsz: uint64(descSizeFor(c.MaxRecvSGE))}
	q.cqeOff = cqeOffset(depth, q.dsz)
	var rnd [4]byte
	rand.Read(rnd[:])
	q.psn = binary.LittleEndian.Uint32(rnd[:]) & 0xffffff

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || p.closed.Load() || scq.closed.Load() || rcq.closed.Load() {
		return fail(verbs.ErrClosed)
	}
	q.segN = roundPage(segSize(depth, q.dsz))
	off, err := d.allocMem(q.segN)
	if err != nil {
		return fail(err)
	}
	q.segOff = off
	q.seg = d.mem[off : off+q.segN : off+q.segN]
	for {
		d.qpnNext = (d.qpnNext + 1) & 0xffffff
		if _, dup := d.qps[d.qpnNext]; !dup && d.qpnNext != 0 {
			break
		}
	}
	q.qpn = d.qpnNext
	binary.LittleEndian.PutUint32(q.seg[qsQPN:], q.qpn)
	binary.LittleEndian.PutUint32(q.seg[qsPD:], p.id)
	binary.LittleEndian.PutUint32(q.seg[qsRecvCQ:], rcq.idx)
	binary.LittleEndian.PutUint32(q.seg[qsDepth:], uint32(depth))
	binary.LittleEndian.PutUint32(q.seg[qsNSGE:], uint32(c.MaxRecvSGE))
	binary.LittleEndian.PutUint32(q.seg[qsEntrySize:], uint32(q.dsz))
	binary.LittleEndian.PutUint64(q.seg[qsMagic:], segMagic^uint64(q.qpn))
	q.setState(verbs.QPReset)
	q.addr, err = q.encodeAddress()
	if err != nil {
		d.freeMem(off, q.segN)
		return fail(err)
	}
	d.qps[q.qpn] = q
	p.nQP.Add(1)
	scq.nQP.Add(1)
	rcq.nQP.Add(1)
	rcq.addRQ(q)
	return q, nil
}

func (q *QP) Num() uint32              { return q.qpn }
func (q *QP) PSN() uint32              { return q.psn }
func (q *QP) Address() []byte          { return append([]byte(nil), q.addr...) }
func (q *QP) Cap() verbs.QPCap         { return q.cap }
func (q *QP) st() verbs.QPState        { return verbs.QPState(q.state.Load()) }
func (q *QP) hdr32(off uint64) *uint32 { return word32(q.seg, off) }

func (q *QP) State() verbs.QPState {
	q.checkRemoteErr()
	return q.st()
}

// UserMemPath says how this queue pair reaches the peer's registered Go
// memory: direct (same process), cma or copy. It is UserMemAuto until the
// QP has connected (moved to RTR).
func (q *QP) UserMemPath() UserMemPath {
	if l := q.lnk.Load(); l != nil {
		return l.path
	}
	return UserMemAuto
}

func (q *QP) setState(s verbs.QPState) {
	q.state.Store(uint32(s))
	atomic.StoreUint32(q.hdr32(qsState), uint32(s))
}

func (q *QP) opErr(op string, idx int, err error) error { return q.d.opErr(op, q.qpn, idx, err) }

// Modify moves the queue pair through its states. Moving to RTR connects
// to the peer's device over its abstract socket (credentials and job
// secret checked both ways) and maps the peer's shared memory.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	q.checkRemoteErr()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.destroyed {
		return q.opErr("Modify", -1, verbs.ErrClosed)
	}
	cur := q.st()
	next, err := verbs.CheckModify(providerName, cur, attr, mask, q.d.Caps())
	if err != nil {
		return q.opErr("Modify", -1, err)
	}
	switch {
	case next == verbs.QPReset:
		q.reset()
		return nil
	case next == verbs.QPErr:
		if cur != verbs.QPErr {
			q.fail(verbs.StatusWRFlushErr, false)
		}
		return nil
	case cur == verbs.QPInit && next == verbs.QPRTR:
		l, err := q.connect(attr.Remote)
		if err != nil {
			return q.opErr("Modify", -1, err)
		}
		q.lnk.Store(l)
		q.maxDestRd = attr.MaxDestRdAtomic
		q.minRNR = attr.MinRNRTimer
		atomic.StoreUint32(q.hdr32(qsMaxDestRd), uint32(attr.MaxDestRdAtomic))
		atomic.StoreUint32(q.hdr32(qsMinRNR), uint32(attr.MinRNRTimer))
	case cur == verbs.QPRTR && next == verbs.QPRTS:
		q.timeout, q.retryCnt, q.rnrRetry = attr.Timeout, attr.RetryCnt, attr.RNRRetry
		if mask&verbs.AttrMinRNRTimer != 0 {
			q.minRNR = attr.MinRNRTimer
			atomic.StoreUint32(q.hdr32(qsMinRNR), uint32(attr.MinRNRTimer))
		}
	case next == verbs.QPRTS && mask&verbs.AttrMinRNRTimer != 0:
		q.minRNR = attr.MinRNRTimer
		atomic.StoreUint32(q.hdr32(qsMinRNR), uint32(attr.MinRNRTimer))
	}
	if mask&verbs.AttrAccessFlags != 0 {
		q.access = attr.AccessFlags
		atomic.StoreUint32(q.hdr32(qsAccess), uint32(attr.AccessFlags))
	}
	q.setState(next)
	return nil
}

// reset returns the QP to RESET: the link is dropped (the peer sees its
// work fail), queued work and the receive ring are discarded. q.mu is held.
func (q *QP) reset() {
	q.dropLink()
	q.stopTimer()
	q.pending = q.pending[:0]
	q.owedRetry = false
	q.recvMu.Lock()
	q.rcq.mu.Lock()
	atomic.StoreUint64(word64(q.seg, qsClaim), 0)
	atomic.StoreUint64(word64(q.seg, qsHead), 0)
	atomic.StoreUint32(q.hdr32(qsRemoteErr), 0)
	// Old completions must not be mistaken for new ones at the same index.
	clear(q.seg[qsEntries:])
	q.rqPolled.Store(0)
	q.flushFrom.Store(0)
	q.minRecv, q.minPosted = 0, false
	atomic.StoreUint32(q.hdr32(qsMinRecv), 0)
	q.access, q.maxDestRd, q.minRNR = 0, 0, 0
	atomic.StoreUint32(q.hdr32(qsAccess), 0)
	atomic.StoreUint32(q.hdr32(qsMaxDestRd), 0)
	q.setState(verbs.QPReset)
	q.rcq.mu.Unlock()
	q.recvMu.Unlock()
}

// closeRQ stops the peer from taking more receives and records where the
// flush starts: the receives the peer had already taken complete normally.
func (q *QP) closeRQ() {
	claim := word64(q.seg, qsClaim)
	for {
		c := atomic.LoadUint64(claim)
		if c&claimClosed != 0 {
			q.flushFrom.Store(c &^ claimClosed)
			return
		}
		if atomic.CompareAndSwapUint64(claim, c, c|claimClosed) {
			q.flushFrom.Store(c)
			return
		}
	}
}

// fail moves the QP to ERR: first the queued request gets status first (if
// any is queued), the rest WR_FLUSH_ERR, receives are flushed. lost says
// the link to the peer is gone, so one later request owes RETRY_EXC_ERR
// if nothing queued took it. q.mu is held.
func (q *QP) fail(first verbs.Status, lost bool) {
	if q.st() == verbs.QPErr {
		return
	}
	q.closeRQ()
	q.setState(verbs.QPErr)
	q.stopTimer()
	for i := range q.pending {
		st := verbs.StatusWRFlushErr
		if i == 0 {
			st = first
		}
		q.scq.push(verbs.WC{ID: q.pending[i].wr.ID, Status: st, QPNum: q.qpn, Opcode: verbs.WCOpcodeFor(q.pending[i].wr.Opcode)})
	}
	q.owedRetry = lost && len(q.pending) == 0
	q.pending = q.pending[:0]
	// Wake whoever waits for our receives: they flush now.
	q.rcq.db.kick()
}

// checkRemoteErr moves the QP to ERR if its peer said a request of ours
// broke the rules (the remote side of REM_ACCESS_ERR and friends).
func (q *QP) checkRemoteErr() {
	if atomic.LoadUint32(q.hdr32(qsRemoteErr)) == 0 || q.st() == verbs.QPErr || q.st() == verbs.QPReset {
		return
	}
	q.mu.Lock()
	if atomic.LoadUint32(q.hdr32(qsRemoteErr)) != 0 && q.st() != verbs.QPReset {
		q.fail(verbs.StatusWRFlushErr, false)
	}
	q.mu.Unlock()
}

// linkLost is called when the connection to the peer drops (the peer
// process died, or its QP or device closed, or Disconnect).
func (q *QP) linkLost(l *link) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.lnk.Load() != l || q.destroyed {
		return
	}
	if s := q.st(); s == verbs.QPRTR || s == verbs.QPRTS || s == verbs.QPSQD || s == verbs.QPSQE {
		q.fail(verbs.StatusRetryExcErr, true)
	}
}

// Disconnect drops the link as if the peer had vanished: both sides'
// outstanding and later work fails with RETRY_EXC_ERR.
func (q *QP) Disconnect() error {
	q.mu.Lock()
	l := q.lnk.Load()
	if q.destroyed {
		q.mu.Unlock()
		return q.opErr("Disconnect", -1, verbs.ErrClosed)
	}
	if l == nil {
		q.mu.Unlock()
		return q.opErr("Disconnect", -1, fmt.Errorf("%w: QP is not connected", verbs.ErrInvalidState))
	}
	q.mu.Unlock()
	l.shutdown()
	q.d.closeAccepted(q)
	q.linkLost(l)
	return nil
}

// dropLink closes the link and the peer's connections to this QP. q.mu is held.
func (q *QP) dropLink() {
	if l := q.lnk.Load(); l != nil {
		l.shutdown()
		l.release()
		q.lnk.Store(nil)
	}
	q.d.closeAccepted(q)
}

func (q *QP) stopTimer() {
	if q.timer != nil {
		q.timer.Stop()
		q.timer = nil
	}
}

// Close destroys the QP: queued requests and posted receives complete with
// WR_FLUSH_ERR, the peer sees the link drop.
func (q *QP) Close() error {
	if err := q.destroy(); err != nil {
		return err
	}
	return nil
}

func (q *QP) destroy() error {
	q.mu.Lock()
	if q.destroyed {
		q.mu.Unlock()
		return q.opErr("QP.Close", -1, verbs.ErrClosed)
	}
	if s := q.st(); s != verbs.QPReset && s != verbs.QPErr {
		q.fail(verbs.StatusWRFlushErr, false)
	} else if s == verbs.QPReset {
		q.closeRQ()
		q.setState(verbs.QPErr)
	}
	q.destroyed = true
	q.dropLink()
	q.mu.Unlock()
	q.rcq.removeRQ(q)
	d := q.d
	d.mu.Lock()
	delete(d.qps, q.qpn)
	q.pd.nQP.Add(-1)
	q.scq.nQP.Add(-1)
	q.rcq.nQP.Add(-1)
	if !d.closed {
		// The segment's range is retired, not reused: a peer that has not yet
		// seen the link drop may still look at it.
		punchHole(d.fd, int64(q.segOff), int64(q.segN))
	}
	d.mu.Unlock()
	return nil
}

// ---- receive side ----

// desc is receive i's descriptor, cqe its completion.
func (q *QP) desc(i uint64) []byte {
	off := qsEntries + (i&(q.depth-1))*q.dsz
	return q.seg[off : off+q.dsz : off+q.dsz]
}

// descHolds reports whether descriptor e already describes wr, as it
// does when a caller reposts its buffers in the order they were consumed
// and their number divides the ring's depth (p2p's eager buffers). Such a
// descriptor is not rewritten: the sender only reads descriptors, so the
// line stays shared by both cores, where a rewrite made the receiver take
// it from the sender's cache and the sender take it back when it claimed
// the receive, two line transfers per message.
func descHolds(e []byte, wr *verbs.RecvWR) bool {
	if binary.LittleEndian.Uint64(e[rdWRID:]) != wr.ID || binary.LittleEndian.Uint32(e[rdNSGE:]) != uint32(len(wr.SGL)) {
		return false
	}
	for j, s := range wr.SGL {
		if addr, n, key := descSGE(e, j); addr != s.Addr || n != s.Length || key != s.LKey {
			return false
		}
	}
	return true
}

func (q *QP) cqe(i uint64) []byte {
	off := q.cqeOff + (i&(q.depth-1))*rcSize
	return q.seg[off : off+rcSize : off+rcSize]
}

func (q *QP) PostRecv(wrs ...verbs.RecvWR) error {
	q.checkRemoteErr()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.destroyed {
		return q.opErr("PostRecv", 0, verbs.ErrClosed)
	}
	if q.st() == verbs.QPReset {
		return q.opErr("PostRecv", 0, fmt.Errorf("%w: PostRecv in RESET", verbs.ErrInvalidState))
	}
	racesync.Release()
	// The receives are published with one store of the head after the
	// last (or before a bad one, whose predecessors stay posted): a store
	// per receive drained the store buffer once per descriptor, each time
	// waiting for the line the sender last read it from.
	head := word64(q.seg, qsHead)
	h0 := atomic.LoadUint64(head)
	h, err := q.writeRecvs(h0, wrs)
	if h != h0 {
		racesync.Release()
		atomic.StoreUint64(head, h)
	}
	if err != nil {
		return err
	}
	if q.st() == verbs.QPErr {
		q.rcq.db.kick()
	}
	return nil
}

// writeRecvs writes the descriptors of wrs from head h on, unpublished,
// and returns the head after the last one written: all of them, or those
// before the first bad one, whose error it returns too. Called with recvMu.
func (q *QP) writeRecvs(h uint64, wrs []verbs.RecvWR) (uint64, error) {
	for i := range wrs {
		wr := &wrs[i]
		if err := verbs.ValidateRecvWR(wr, q.cap); err != nil {
			return h, q.opErr("PostRecv", i, err)
		}
		for j, s := range wr.SGL {
			m := q.d.localMR(s.LKey)
			if m == nil || m.pd != q.pd {
				return h, q.opErr("PostRecv", i, fmt.Errorf("%w: SGE %d lkey %#x names no memory region of this PD", verbs.ErrBadKey, j, s.LKey))
			}
			if !m.contains(s.Addr, uint64(s.Length)) {
				return h, q.opErr("PostRecv", i, fmt.Errorf("%w: SGE %d [%#x, +%d) is outside region %#x [%#x, +%d)", verbs.ErrBadKey, j, s.Addr, s.Length, s.LKey, m.addr, len(m.buf)))
			}
			// A buffer of provider memory posted for the first time: map
			// its pages into this process now, writable, not at its first
			// receive (see ntcopy.Touch; touched for reading only, the
			// first receives still took 2-3 times as long). The sender
			// does the same in its mapping when it connects (touchPosted).
			m.pages.TouchOnce(m.slice(s.Addr, uint64(s.Length)), true)
		}
		if h-q.rqPolled.Load() >= q.depth {
			return h, q.opErr("PostRecv", i, fmt.Errorf("%w: %d receives outstanding", verbs.ErrQueueFull, q.depth))
		}
		var n uint64
		for _, s := range wr.SGL {
			n += uint64(s.Length)
		}
		if n := uint32(min(n, 1<<32-1)); !q.minPosted || n < q.minRecv {
			// Before the head that publishes this receive: a sender that
			// sees the receive sees a minimum no larger than it.
			q.minRecv, q.minPosted = n, true
			atomic.StoreUint32(q.hdr32(qsMinRecv), n)
		}
		if e := q.desc(h); !descHolds(e, wr) {
			binary.LittleEndian.PutUint64(e[rdWRID:], wr.ID)
			binary.LittleEndian.PutUint32(e[rdNSGE:], uint32(len(wr.SGL)))
			for j, s := range wr.SGL {
				o := rdSGEs + j*sgeSize
				binary.LittleEndian.PutUint64(e[o:], s.Addr)
				binary.LittleEndian.PutUint32(e[o+8:], s.Length)
				binary.LittleEndian.PutUint32(e[o+12:], s.LKey)
			}
			q.descWrites++
		}
		h++
	}
	return h, nil
}

// recvReady reports whether the next receive has completed (or flushes).
func (q *QP) recvReady() bool {
	if atomic.LoadUint32(q.hdr32(qsRemoteErr)) != 0 && q.st() != verbs.QPErr && q.st() != verbs.QPReset {
		return true
	}
	p := q.rqPolled.Load()
	if p == atomic.LoadUint64(word64(q.seg, qsHead)) {
		return false
	}
	if atomic.LoadUint32(word32(q.cqe(p), rcSeq)) == uint32(p+1) {
		return true
	}
	return q.st() == verbs.QPErr && (p >= q.flushFrom.Load() || q.linkDead())
}

// scatterInline copies a SEND's data from its completion into the
// receive's buffers (descriptor d, posted by this QP). It reports false
// when a buffer's region is gone or lost local write access since the
// receive was posted.
func (q *QP) scatterInline(d, data []byte) bool {
	nsge := int(binary.LittleEndian.Uint32(d[rdNSGE:]))
	for j := 0; j < nsge && len(data) > 0; j++ {
		o := rdSGEs + j*sgeSize
		addr := binary.LittleEndian.Uint64(d[o:])
		n := uint64(min(binary.LittleEndian.Uint32(d[o+8:]), uint32(len(data))))
		if n == 0 {
			continue
		}
		m := q.d.localMR(binary.LittleEndian.Uint32(d[o+12:]))
		if m == nil || m.pd != q.pd || m.access&verbs.AccessLocalWrite == 0 || !m.contains(addr, n) {
			return false
		}
		copy(m.slice(addr, n), data[:n])
		data = data[n:]
	}
	return len(data) == 0
}

func (q *QP) linkDead() bool {
	l := q.linkPtr()
	return l == nil || l.dead.Load()
}

func (q *QP) linkPtr() *link { return q.lnk.Load() }

// pollRecv moves completed receives into wc. The recv CQ's lock is held.
func (q *QP) pollRecv(wc []verbs.WC) int {
	n := 0
	p0 := q.rqPolled.Load()
	p, head := p0, atomic.LoadUint64(word64(q.seg, qsHead))
	for n < len(wc) && p != head {
		e := q.cqe(p)
		w := &wc[n]
		if atomic.LoadUint32(word32(e, rcSeq)) == uint32(p+1) {
			racesync.Acquire() // the sender released the data before it published
			*w = verbs.WC{
				ID:      binary.LittleEndian.Uint64(q.desc(p)[rdWRID:]),
				Status:  verbs.Status(e[rcStatus]),
				Opcode:  verbs.WCOpcode(e[rcOpcode]),
				ByteLen: binary.LittleEndian.Uint32(e[rcByteLen:]),
				Imm:     binary.LittleEndian.Uint32(e[rcImm:]),
				Flags:   verbs.WCFlags(e[rcFlags]),
				QPNum:   q.qpn,
				SrcQP:   q.peerQPN(),
			}
			if e[rcInline] != 0 && w.Status == verbs.StatusSuccess && !q.scatterInline(q.desc(p), e[rcData:rcData+min(w.ByteLen, rcInlineMax)]) {
				w.Status = verbs.StatusLocProtErr
			}
		} else if q.st() == verbs.QPErr && (p >= q.flushFrom.Load() || q.linkDead()) {
			*w = verbs.WC{ID: binary.LittleEndian.Uint64(q.desc(p)[rdWRID:]), Status: verbs.StatusWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.qpn}
		} else {
			break
		}
		p++
		n++
	}
	if p != p0 {
		q.rqPolled.Store(p)
	}
	return n
}

func (q *QP) peerQPN() uint32 {
	if l := q.linkPtr(); l != nil {
		return l.peerQPN
	}
	return 0
}

var _ verbs.DirectAccess = (*QP)(nil)

// MapRemote returns the peer's provider memory (AllocMR) [addr, addr+n)
// under rkey as a slice of this process's mapping of the peer's device,
// after the same checks a one-sided operation makes. Registered Go memory
// is not shared and yields ErrUnsupported. The QP must be connected.
func (q *QP) MapRemote(addr uint64, rkey uint32, n int, access verbs.Access) ([]byte, error) {
	if n < 0 {
		return nil, q.opErr("MapRemote", 0, fmt.Errorf("%w: negative length %d", verbs.ErrInvalidArgument, n))
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	l := q.lnk.Load()
	if l == nil || l.dead.Load() {
		return nil, q.opErr("MapRemote", 0, fmt.Errorf("%w: not connected", verbs.ErrInvalidState))
	}
	sp, st := l.resolve(rkey, addr, uint64(n), access)
	if st != verbs.StatusSuccess {
		return nil, q.opErr("MapRemote", 0, fmt.Errorf("%w: rkey %#x does not grant %v on [%#x, +%d)", verbs.ErrInvalidArgument, rkey, access, addr, n))
	}
	if sp.kind != kindProvider {
		return nil, q.opErr("MapRemote", 0, fmt.Errorf("%w: the peer's region is not provider memory (AllocMR)", verbs.ErrUnsupported))
	}
	// The caller maps the range to use it: map its pages now rather than
	// at each one's first access (see ntcopy.Touch).
	ntcopy.Touch(sp.direct, access&verbs.AccessRemoteWrite != 0)
	return sp.direct, nil
}

var (
	_ verbs.PeerReader = (*QP)(nil)
	_ verbs.PeerWriter = (*QP)(nil)
)

// ReadPeer reads the peer process's memory with process_vm_readv (see
// verbs.PeerReader); only links that use CMA for user memory can.
func (q *QP) ReadPeer(addr uint64, dst []byte) error { return q.peerIO("ReadPeer", addr, dst, false) }

// WritePeer writes the peer process's memory with process_vm_writev (see
// verbs.PeerWriter); only links that use CMA for user memory can.
func (q *QP) WritePeer(addr uint64, src []byte) error { return q.peerIO("WritePeer", addr, src, true) }

func (q *QP) peerIO(op string, addr uint64, b []byte, write bool) error {
	l := q.lnk.Load()
	if l == nil {
		return q.opErr(op, 0, fmt.Errorf("%w: not connected", verbs.ErrInvalidState))
	}
	if l.dead.Load() {
		// As a work request to a dead link completes: the peer is gone.
		return q.opErr(op, 0, fmt.Errorf("%w: the link to the peer is down", verbs.StatusRetryExcErr))
	}
	if l.path != UserMemCMA {
		return q.opErr(op, 0, fmt.Errorf("%w: the link reaches the peer's memory by %v, not CMA", verbs.ErrUnsupported, l.path))
	}
	if len(b) == 0 {
		return nil
	}
	sys := "process_vm_readv"
	if write {
		sys = "process_vm_writev"
	}
	switch err := cmaCopy(l.pid, [][]byte{b}, addr, write); err {
	case nil:
		return nil
	case syscall.EFAULT:
		return q.opErr(op, 0, fmt.Errorf("%w: [%#x, +%d) is not mapped in the peer", verbs.ErrInvalidArgument, addr, len(b)))
	case syscall.ESRCH:
		// The peer process has exited: the peer is lost, as for a work
		// request (remoteIO), not an operation the link cannot do.
		l.dead.Store(true)
		return q.opErr(op, 0, fmt.Errorf("%w: %s: peer process %d is gone", verbs.StatusRetryExcErr, sys, l.pid))
	default:
		return q.opErr(op, 0, fmt.Errorf("%w: %s: %v", verbs.ErrUnsupported, sys, err))
	}
}
