package softrc

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// swqe is a send work queue entry.
type swqe struct {
	id       uint64
	op       verbs.Opcode
	flags    verbs.SendFlags
	signaled bool
	seq      uint32
	run      uint32 // WRITEs of a run (PostWriteRun), whose sequence numbers follow seq; 0 for any other request
	length   uint32
	raddr    uint64
	rkey     uint32
	imm      uint32
	cmp      uint64
	swap     uint64
	segs     [][]byte // local memory: payload source, or READ/atomic destination
	mrs      []*MR    // references held on segs' regions
	inline   []byte
	// tail follows inline (PostSendLentPair): the caller's memory while
	// lent (the post has not returned yet), else own's copy of it, or
	// nil once written (gone: it cannot be sent again after an RNR).
	tail       []byte
	own        []byte
	lent, gone bool
	sent       bool
	rnrLeft    uint8
	localErr   verbs.Status // a local error found when it was about to be sent
}

func (e *swqe) readLike() bool { return e.op == verbs.OpRDMARead || e.op.IsAtomic() }

func (e *swqe) releaseRefs() {
	for i, m := range e.mrs {
		m.release()
		e.mrs[i] = nil
	}
	e.mrs = e.mrs[:0]
	for i := range e.segs {
		e.segs[i] = nil
	}
	e.segs = e.segs[:0]
	e.inline = e.inline[:0]
	e.run = 0
}

// seqs is how many sequence numbers e takes: one, or a run's writes.
func (e *swqe) seqs() uint32 { return max(e.run, 1) }

// rwqe is a receive work queue entry.
type rwqe struct {
	id     uint64
	segs   [][]byte
	mrs    []*MR
	length uint64
}

func (e *rwqe) releaseRefs() {
	for i, m := range e.mrs {
		m.release()
		e.mrs[i] = nil
	}
	e.mrs = e.mrs[:0]
	for i := range e.segs {
		e.segs[i] = nil
	}
	e.segs = e.segs[:0]
}

// QP is a software RC queue pair. One mutex guards its state, queues and
// timers; it is never held while calling into a Link or another QP, so two
// QPs of one process (loop) can drive each other without lock-order cycles.
//
// The send queue is a ring with four monotonically increasing indices:
// head ≤ comp ≤ next ≤ tail. [head, comp) completed without a completion
// entry (unsignaled) and still hold their slots until a later signaled
// completion retires them; [comp, next) were sent and await a response;
// [next, tail) wait to be sent.
type QP struct {
	dev    *Device
	pd     *PD
	num    uint32
	psn    uint32
	addr   []byte
	cap    verbs.QPCap
	sendCQ *CQ
	recvCQ *CQ
	sigAll bool

	mu     sync.Mutex
	state  verbs.QPState
	closed bool
	access verbs.Access
	mtu    verbs.MTU
	// responder attributes
	remote          verbs.QPAddress
	minRNRTimer     uint8
	maxDestRdAtomic uint8
	epsn            uint32 // next request sequence expected from the peer
	// rkMR is the region the last request with an rkey named: a stream of
	// WRITEs into one window skips the device's lookup (a read lock and a
	// map) while it is still registered. Cleared when the QP closes, so
	// that it does not keep a deregistered region's memory reachable.
	rkMR *MR

	// runBufs keeps the bodies of completed runs (PostWriteRun) for the
	// next ones, newest last: a body taken by each send queue entry in
	// turn was cold memory at every post (put_bw over tcp at 512 B, 33
	// KiB a run, 0.88x the rate of a request per write).
	runBufs [][]byte
	// scratch of the goroutine that runs HandleRequest, for WRITE_RUNs
	runDesc []byte
	runDst  [][]byte
	runMRs  []*MR
	// requester attributes
	timeout       uint8
	retryCnt      uint8
	rnrRetry      uint8
	maxQPRdAtomic uint8
	nextSeq       uint32

	sq                     []swqe
	head, comp, next, tail uint64
	rdOut                  int    // READ/atomics sent and not completed
	ackReqUpTo             uint64 // requests before this index asked for an ACK

	rq     []rwqe
	rqHead uint64
	rqTail uint64
	// rin is the receive the responder popped and is filling outside the
	// lock. Only the responder goroutine touches its buffers; a flush meanwhile
	// completes it with WR_FLUSH_ERR and sets rinFlushed.
	rin        rwqe
	rinBusy    bool
	rinFlushed bool
	// steer (verbs.SendSteerer) places the bodies of inbound SENDs longer
	// than steerPrefix where it says; set under mu, read by the responder.
	steer       verbs.SendSteer
	steerPrefix int

	// scratch owned by the one goroutine that runs HandleResponse
	respSegs [][]byte
	respRefs []*MR
	// susp is a READ response whose payload read was suspended mid-frame
	// (ErrSuspended): what is left to read, and the completion it makes.
	susp suspendedRead
	// fill is the inbound SEND's payload on its way into rin, owned by
	// the goroutine that runs HandleRequest; suspSend says its read was
	// suspended mid-frame (ErrSuspended), with what finishing it needs.
	fill     sendFill
	suspSend suspendedSend

	link Link
	lost bool // the link was lost: the next send completion is RETRY_EXC_ERR
	// linkFailed: the link was lost or never came up while in RTR; the QP
	// goes to ERR when it reaches RTS.
	linkFailed bool
	kicks      int    // Kick calls owed (counted under mu, made after unlock)
	holds      int    // HoldPosts not yet released: kicks wait for the last ReleasePosts
	epoch      uint64 // bumped when the queues are flushed or reset

	rnrUntil  time.Time
	rnrTimer  *time.Timer
	ackTimer  *time.Timer
	ackArmed  bool
	ackMoved  bool // a response or a new request since the ACK timer was set (armAckLocked)
	connTimer *time.Timer
	connErr   error // why the connection could not be made (ConnectError)
	executing atomic.Int32
}

var _ verbs.QP = (*QP)(nil)
var _ verbs.Disconnector = (*QP)(nil)

var _ verbs.ConnectErrorer = (*QP)(nil)

// CreateQP creates an RC queue pair in RESET.
func (pd *PD) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	d := pd.dev
	bad := func(format string, a ...any) (verbs.QP, error) {
		return nil, d.err("CreateQP", 0, -1, fmt.Errorf("%w: "+format, append([]any{verbs.ErrInvalidArgument}, a...)...))
	}
	scq, ok1 := attr.SendCQ.(*CQ)
	rcq, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return bad("send and receive CQs must be CQs of this %s device", d.cfg.Provider)
	}
	if scq.dev != d || rcq.dev != d {
		return bad("CQ belongs to another device")
	}
	c := attr.Cap
	caps := d.cfg.Caps
	switch {
	case c.MaxSendWR < 0 || c.MaxSendWR > caps.MaxQPWR:
		return bad("MaxSendWR %d not in [0, %d]", c.MaxSendWR, caps.MaxQPWR)
	case c.MaxRecvWR < 0 || c.MaxRecvWR > caps.MaxQPWR:
		return bad("MaxRecvWR %d not in [0, %d]", c.MaxRecvWR, caps.MaxQPWR)
	case c.MaxSendSGE < 0 || c.MaxSendSGE > caps.MaxSGE:
		return bad("MaxSendSGE %d not in [0, %d]", c.MaxSendSGE, caps.MaxSGE)
	case c.MaxRecvSGE < 0 || c.MaxRecvSGE > caps.MaxSGE:
		return bad("MaxRecvSGE %d not in [0, %d]", c.MaxRecvSGE, caps.MaxSGE)
	case c.MaxInline < 0 || c.MaxInline > caps.MaxInline:
		return bad("MaxInline %d not in [0, %d]", c.MaxInline, caps.MaxInline)
	}
	q := &QP{dev: d, pd: pd, cap: c, sendCQ: scq, recvCQ: rcq, sigAll: attr.SigAll, psn: Rand24(),
		sq: make([]swqe, c.MaxSendWR), rq: make([]rwqe, c.MaxRecvWR)}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || pd.closed.Load() {
		return nil, d.err("CreateQP", 0, -1, verbs.ErrClosed)
	}
	if len(d.qps) >= caps.MaxQP {
		return nil, d.err("CreateQP", 0, -1, fmt.Errorf("%w: device has %d queue pairs already", verbs.ErrQueueFull, len(d.qps)))
	}
	for {
		q.num = Rand24()
		if _, dup := d.qps[q.num]; !dup {
			break
		}
	}
	a, err := verbs.QPAddress{Provider: d.cfg.Provider, QPNum: q.num, PSN: q.psn, Payload: d.t.AddressPayload(q.num)}.Encode()
	if err != nil {
		return nil, d.err("CreateQP", 0, -1, err)
	}
	q.addr = a
	d.qps[q.num] = q
	pd.qps.Add(1)
	return q, nil
}

func (q *QP) Num() uint32          { return q.num }
func (q *QP) PSN() uint32          { return q.psn }
func (q *QP) Address() []byte      { return append([]byte(nil), q.addr...) }
func (q *QP) Cap() verbs.QPCap     { return q.cap }
func (q *QP) Device() *Device      { return q.dev }
func (q *QP) String() string       { return fmt.Sprintf("%s qp %#x", q.dev.cfg.Provider, q.num) }
func (q *QP) State() verbs.QPState { q.mu.Lock(); defer q.mu.Unlock(); return q.state }

// Remote is the peer address given at RTR.
func (q *QP) Remote() verbs.QPAddress {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.remote
}

// Modify runs the RC state machine. A failed Modify changes nothing.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return q.dev.err("Modify", q.num, -1, verbs.ErrClosed)
	}
	cur := q.state
	next, err := verbs.CheckModify(q.dev.cfg.Provider, cur, attr, mask, q.dev.cfg.Caps)
	var remote verbs.QPAddress
	if err == nil && mask&verbs.AttrAV != 0 {
		remote, err = verbs.DecodeAddressFor(q.dev.cfg.Provider, attr.Remote)
		if err == nil {
			err = q.dev.t.CheckRemote(remote.Payload)
		}
	}
	if err != nil {
		q.mu.Unlock()
		return q.dev.err("Modify", q.num, -1, err)
	}
	var drop Link
	connect := false
	if mask&verbs.AttrAccessFlags != 0 {
		q.access = attr.AccessFlags
	}
	if mask&verbs.AttrMinRNRTimer != 0 {
		q.minRNRTimer = attr.MinRNRTimer
	}
	switch {
	case next == verbs.QPErr:
		if cur != verbs.QPErr {
			q.enterErrLocked()
		}
	case next == verbs.QPReset:
		drop = q.resetLocked()
	case cur == verbs.QPInit && next == verbs.QPRTR:
		q.remote = remote
		q.mtu = attr.PathMTU
		q.maxDestRdAtomic = attr.MaxDestRdAtomic
		q.epsn = remote.PSN
		q.state = verbs.QPRTR
		connect = true
		q.connTimer = time.AfterFunc(q.dev.cfg.ConnectTimeout, q.onConnectTimeout)
	case cur == verbs.QPRTR && next == verbs.QPRTS:
		q.nextSeq = attr.SQPSN
		q.timeout = attr.Timeout
		q.retryCnt = attr.RetryCnt
		q.rnrRetry = attr.RNRRetry
		q.maxQPRdAtomic = attr.MaxQPRdAtomic
		q.state = verbs.QPRTS
		q.kicks++
		if q.linkFailed {
			q.linkFailed = false
			q.enterErrLocked()
		}
	default:
		q.state = next
	}
	l, kicks := q.takeKicksLocked()
	q.mu.Unlock()
	if drop != nil {
		drop.Close()
	}
	if next == verbs.QPReset {
		q.forget()
	}
	if connect {
		q.dev.t.Connect(q)
	}
	q.doKicks(l, kicks)
	return nil
}

// resetLocked returns the QP to RESET: queues emptied without completions,
// link dropped, attributes cleared.
func (q *QP) resetLocked() Link {
	q.epoch++
	for ; q.head < q.tail; q.head++ {
		q.sq[q.head%uint64(len(q.sq))].releaseRefs()
	}
	q.head, q.comp, q.next, q.tail, q.rdOut, q.ackReqUpTo = 0, 0, 0, 0, 0, 0
	if q.rinBusy {
		q.rinFlushed = true
	}
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		q.rq[q.rqHead%uint64(len(q.rq))].releaseRefs()
	}
	q.rqHead, q.rqTail = 0, 0
	q.stopTimersLocked()
	l := q.detachLocked()
	q.lost = false
	q.linkFailed = false
	q.state = verbs.QPReset
	q.access = 0
	q.remote = verbs.QPAddress{}
	return l
}

func (q *QP) stopTimersLocked() {
	if q.rnrTimer != nil {
		q.rnrTimer.Stop()
	}
	q.rnrUntil = time.Time{}
	if q.ackTimer != nil {
		q.ackTimer.Stop()
		q.ackArmed = false
	}
	if q.connTimer != nil {
		q.connTimer.Stop()
		q.connTimer = nil
	}
}

// takeKicksLocked hands the owed kicks to the caller, who makes them after
// unlocking.
func (q *QP) takeKicksLocked() (Link, int) {
	if q.holds > 0 {
		return nil, 0 // ReleasePosts makes them
	}
	k := q.kicks
	q.kicks = 0
	if q.link == nil {
		return nil, 0
	}
	return q.link, k
}

func (q *QP) doKicks(l Link, n int) {
	if l != nil && n > 0 {
		l.Kick()
	}
}

// PostKicker is implemented by links that can start sending in the posting
// goroutine itself (saving a goroutine hand-off on the latency path).
// PostSend calls KickPost instead of Kick; it must not block for long.
type PostKicker interface {
	KickPost()
}

// LentWriter is implemented by links that can write a request whose tail
// the poster lends for the call only (PostSendLentPair). WriteLent takes
// the link's write side if it is free (else it returns false, having
// called nothing), calls post, writes what is queued as far as the link
// takes it without blocking, copies into memory of its own whatever it
// took but did not write, calls settle, and only then lets the write side
// go: nobody else takes a request meanwhile.
type LentWriter interface {
	WriteLent(post, settle func()) bool
}

func (q *QP) forget() {
	if f, ok := q.dev.t.(QPForgetter); ok {
		f.Forget(q)
	}
}

func (q *QP) kick() {
	q.mu.Lock()
	l := q.link
	q.mu.Unlock()
	if l != nil {
		l.Kick()
	}
}

// Close destroys the QP; outstanding work completes with WR_FLUSH_ERR.
func (q *QP) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return q.dev.err("QP.Close", q.num, -1, verbs.ErrClosed)
	}
	q.closed = true
	q.rkMR = nil
	q.lost = false
	if q.state != verbs.QPErr && q.state != verbs.QPReset {
		q.enterErrLocked()
	}
	q.stopTimersLocked()
	l := q.detachLocked()
	q.mu.Unlock()
	if l != nil {
		l.Close()
	}
	q.forget()
	d := q.dev
	d.mu.Lock()
	delete(d.qps, q.num)
	d.mu.Unlock()
	q.pd.qps.Add(-1)
	return nil
}

// Disconnect drops the link as if the network failed: both sides' work
// fails with RETRY_EXC_ERR and both QPs go to ERR.
func (q *QP) Disconnect() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return q.dev.err("Disconnect", q.num, -1, verbs.ErrClosed)
	}
	l := q.link
	if l == nil && (q.state == verbs.QPRTR || q.state == verbs.QPRTS) {
		// Not connected yet: it can never connect now.
		q.linkFailedLocked()
	}
	q.mu.Unlock()
	if l != nil {
		l.Close()
	}
	return nil
}

// Attach gives a QP in RTR or RTS its connection. It returns false (and the
// transport should drop the connection) when the QP is not waiting for one.
func (q *QP) Attach(l Link) bool {
	q.mu.Lock()
	if q.closed || q.link != nil || q.linkFailed || (q.state != verbs.QPRTR && q.state != verbs.QPRTS) {
		q.mu.Unlock()
		return false
	}
	q.link = l
	if d, ok := l.(Driver); ok {
		q.sendCQ.addDriver(d)
		if q.recvCQ != q.sendCQ {
			q.recvCQ.addDriver(d)
		}
	}
	if q.connTimer != nil {
		q.connTimer.Stop()
		q.connTimer = nil
	}
	q.mu.Unlock()
	l.Kick()
	return true
}

// Link returns the connection attached to q, or nil (for a transport's
// white-box tests).
func (q *QP) Link() Link {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.link
}

// LinkLost tells the QP that l is gone (peer dead, connection reset): the
// QP goes to ERR, its first outstanding send completes with RETRY_EXC_ERR
// and everything else is flushed.
func (q *QP) LinkLost(l Link, cause error) {
	q.mu.Lock()
	if q.link != l || l == nil {
		q.mu.Unlock()
		return
	}
	q.detachLocked()
	st := q.state
	if st == verbs.QPRTR || st == verbs.QPRTS {
		q.linkFailedLocked()
	}
	q.mu.Unlock()
	q.dev.log.Debug("softrc: link lost", "provider", q.dev.cfg.Provider, "qp", q.num, "state", st, "cause", cause)
}

func (q *QP) onConnectTimeout() {
	q.mu.Lock()
	if q.link == nil && q.connTimer != nil && (q.state == verbs.QPRTR || q.state == verbs.QPRTS) {
		q.connTimer = nil
		q.linkFailedLocked()
		q.connErr = fmt.Errorf("%s: qp %#x: no connection with peer qp %#x within %v", q.dev.cfg.Provider, q.num, q.remote.QPNum, q.dev.cfg.ConnectTimeout)
		q.dev.log.Warn("softrc: connection not established in time", "provider", q.dev.cfg.Provider,
			"qp", q.num, "peer_qp", q.remote.QPNum, "timeout", q.dev.cfg.ConnectTimeout)
	}
	q.mu.Unlock()
}

// enterErrLocked moves the QP to ERR and flushes both queues: every send
// request not yet completed, and every receive, completes with
// WR_FLUSH_ERR, except that after a lost link the first send completes with
// RETRY_EXC_ERR.
func (q *QP) enterErrLocked() {
	q.epoch++
	q.state = verbs.QPErr
	q.stopTimersLocked()
	for q.comp < q.tail {
		e := &q.sq[q.comp%uint64(len(q.sq))]
		st := verbs.StatusWRFlushErr
		if q.lost {
			st = verbs.StatusRetryExcErr
			q.lost = false
		}
		q.pushSendWC(e, st)
		e.releaseRefs()
		q.comp++
	}
	q.head, q.next, q.rdOut, q.ackReqUpTo = q.comp, q.comp, 0, q.comp
	if q.rinBusy && !q.rinFlushed {
		q.rinFlushed = true
		q.recvCQ.push(verbs.WC{ID: q.rin.id, Status: verbs.StatusWRFlushErr, QPNum: q.num})
	}
	for ; q.rqHead < q.rqTail; q.rqHead++ {
		e := &q.rq[q.rqHead%uint64(len(q.rq))]
		q.recvCQ.push(verbs.WC{ID: e.id, Status: verbs.StatusWRFlushErr, QPNum: q.num})
		e.releaseRefs()
	}
}

func (q *QP) pushSendWC(e *swqe, st verbs.Status) {
	wc := verbs.WC{ID: e.id, Status: st, QPNum: q.num}
	if st == verbs.StatusSuccess {
		wc.Opcode = verbs.WCOpcodeFor(e.op)
		wc.ByteLen = e.length
	}
	q.sendCQ.push(wc)
}

// Waiting reports whether q is in RTR or RTS without a link, so a transport
// still trying to connect it should go on.
func (q *QP) Waiting() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.closed && q.link == nil && !q.linkFailed && (q.state == verbs.QPRTR || q.state == verbs.QPRTS)
}

// linkFailedLocked handles the loss, or the failure to establish, of the
// QP's connection. In RTS the QP goes to ERR at once and its first send
// request, outstanding or later, completes with RETRY_EXC_ERR. In RTR the
// failure is remembered and takes effect when the QP reaches RTS: RTR→RTS
// must succeed whatever the peer does, as on real RC, where a dead peer
// shows only when requests go unanswered.
func (q *QP) linkFailedLocked() {
	q.lost = true
	if q.connTimer != nil {
		q.connTimer.Stop()
		q.connTimer = nil
	}
	if q.state == verbs.QPRTR {
		q.linkFailed = true
		return
	}
	q.enterErrLocked()
}

// FailConnect gives up on connecting q (the peer refused it): the QP goes to
// ERR, and its first send request, outstanding or later, completes with
// RETRY_EXC_ERR, as it would after the connect timeout.
func (q *QP) FailConnect(cause error) {
	q.mu.Lock()
	if q.closed || q.link != nil || q.linkFailed || (q.state != verbs.QPRTR && q.state != verbs.QPRTS) {
		q.mu.Unlock()
		return
	}
	q.linkFailedLocked()
	q.connErr = cause
	q.mu.Unlock()
	q.dev.log.Warn("softrc: connection failed", "provider", q.dev.cfg.Provider, "qp", q.num, "cause", cause)
}

// ConnectError implements verbs.ConnectErrorer: the cause FailConnect was
// given, or the connect timeout, nil if neither happened.
func (q *QP) ConnectError() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.connErr
}

// HasWork reports whether requests wait to be sent and could be now.
func (q *QP) HasWork() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sendableLocked()
}

// sendableLocked reports whether the next request waiting to be sent may
// go now (NextRequestMax would give it, size aside): not while it is a READ
// or atomic and as many are outstanding as the peer takes, nor while it is
// fenced and a READ or atomic is outstanding. Such a request waits for a
// response, whose completion kicks the link again (completeLocked); kicking
// it before only woke a writer with nothing it could write.
func (q *QP) sendableLocked() bool {
	if q.state != verbs.QPRTS || q.link == nil || q.next >= q.tail || !q.rnrUntil.IsZero() {
		return false
	}
	e := &q.sq[q.next%uint64(len(q.sq))]
	if e.flags&verbs.SendFence != 0 && q.rdOut > 0 {
		return false // IBTA: a fenced request waits for every earlier READ and atomic
	}
	return !e.readLike() || q.rdOut < maxInt(1, int(q.maxQPRdAtomic))
}

// detachLocked drops the QP's link (and its CQs' reference to it) and
// returns it. A READ response suspended on that link can no longer be
// finished: the memory it held is released.
func (q *QP) detachLocked() Link {
	l := q.link
	q.link = nil
	q.dropSuspendedLocked()
	if d, ok := l.(Driver); ok {
		q.sendCQ.removeDriver(d)
		if q.recvCQ != q.sendCQ {
			q.recvCQ.removeDriver(d)
		}
	}
	return l
}
