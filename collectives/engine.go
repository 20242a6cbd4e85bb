package collectives

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/lightmu"
)

// abortTag is where mismatch aborts travel; call tags stay below it.
const abortTag = 1 << 30

// Engine runs collectives over one Group. It holds the call sequence
// number (which keeps back-to-back calls from cross-matching), the options,
// the one-sided window and the mismatch watchers.
//
// Concurrency contract: every rank calls the collectives of one Engine in
// the same order, one at a time. A second call while one runs fails with
// ErrInvalidArgument; concurrent collectives need one Engine per Dup'ed
// communicator (each with its own private tag space). Close may be called
// from any goroutine.
type Engine struct {
	g      Group
	opts   Options
	forced [numCollectives]Algorithm // opts.Algorithms, without a map lookup per call
	model  Model
	rank   int
	size   int

	// mu is taken and let go at every call's begin: a lightmu.Biased,
	// whose Unlock is a plain store rather than sync.Mutex's locked add.
	// With Options.Serialized a call's own takes (LockFavoured) are plain
	// stores and a load, and the watchers, the probe timer and Close (Lock)
	// pay a heavy fence instead: the caller's queue already took a locked
	// instruction to order the calls.
	mu     lightmu.Biased
	seq    uint32
	cur    *callState
	aborts map[uint32]error
	loose  []Request // unwaited abort and probe sends, see fire

	// probe sends the stall probe of the running call (see sendStatus).
	// One timer per Engine: a time.AfterFunc per call would allocate on
	// every collective. It is not reset and stopped per call either (those
	// took a sixth of a 16-byte call's software): a pending timer armed
	// for an earlier call re-arms itself for the call it finds running,
	// so a stream of short calls costs a timer operation per StallProbe
	// period. probeOn says it is pending, probeCall which call (by the
	// calls counter) it was armed for; both under mu.
	probe     *time.Timer
	probeOn   bool
	probeCall uint64
	status    map[uint32]statusNote // stall probes for calls not started yet
	closed    bool

	wctx    context.Context
	wcancel context.CancelFunc
	wg      sync.WaitGroup

	win    Window // one-sided window, exposed on first use
	winBuf []byte

	hosts []int // host index per rank, nil without Topology
	hl    hostLayout

	// inl is the largest payload sent in its header's message to each
	// rank, nil when it is Options.inline() for all (see inlineLimits).
	inl []int

	// The group's PartsSender, PartsReceiver and FoldReceiver, nil where
	// it has not the capability: looked up once here rather than for every
	// message.
	partsOut PartsSender
	sendNow  NowSender
	partsIn  PartsReceiver
	foldIn   FoldReceiver

	// autoMemo holds, per collective, Auto's latest choice (see autoKey):
	// it depends only on the size and the op's commutativity once the
	// Engine is made, and a program calls one collective with one size
	// over and over; the cost model's search was a tenth of a 16-byte
	// call's software. Atomic: choose runs before a call takes the lock.
	autoMemo [numCollectives]atomic.Uint64

	// spare is the latest call's records, for the next call to reuse once
	// that call has ended: end says so by storing its seq into act.done
	// (its last step, without taking mu again), and spareSeq is the seq of
	// the call that holds spare. Both under mu.
	spare    *call
	spareSeq uint32
	recent   [16]header // fingerprints of the latest calls, by seq, for late stall probes

	// The shared-memory algorithms' state (nil without a SharedRegion; set
	// by New only). Calls that touch the region hold shmMu for reading,
	// except a shared-memory call, which is marked by shmCall from its
	// begin to its end instead (under mu, which both take anyway: a read
	// lock of its own was two more locked instructions per call). Close
	// sets closing (waiting calls give up), waits until no shared-memory
	// call runs (it polls shmCall: see endQuick), then takes shmMu for
	// writing and sets shmGone, after which nothing touches the region.
	shm     *shmState
	shmMu   sync.RWMutex
	shmGone bool
	shmCall bool // a shared-memory call runs; under mu (see settleLocked)
	closing atomic.Bool
	calls   uint64 // calls begun, under mu (a 64-bit seq, for round ids)
	okCalls uint64 // the counter of the latest call that succeeded, under mu

	act activity // what runs now, lock-free for status tools (activity.go)
}

// LastAlgorithm reports the algorithm the latest call ran (Auto if it
// failed before choosing). It reads the activity record and takes no
// lock: the lock's locked instruction waited for the stores of the call
// just ended (its publications in shared memory) to leave the core, a
// line's trip between the cores for a caller that asks after every call.
func (e *Engine) LastAlgorithm() Algorithm {
	return callAlg(atomic.LoadUint64(&e.act.call))
}

// New makes an Engine for g. With more than one rank it starts one
// goroutine per peer that waits for mismatch aborts; Close stops them.
func New(g Group, opts Options) (*Engine, error) {
	if g == nil || g.Size() < 1 || g.Rank() < 0 || g.Rank() >= g.Size() {
		return nil, fmt.Errorf("%w: group must have a rank in [0, size)", ErrInvalidArgument)
	}
	for c, a := range opts.Algorithms {
		if a != Auto && !implements(c, a) {
			return nil, fmt.Errorf("%w: %v has no algorithm %v (have %v)", ErrInvalidArgument, c, a, algsOf(c))
		}
	}
	e := &Engine{g: g, opts: opts, rank: g.Rank(), size: g.Size(), aborts: map[uint32]error{}, status: map[uint32]statusNote{}}
	for c, a := range opts.Algorithms {
		if c < numCollectives { // an unknown one can only be Auto (checked above)
			e.forced[c] = a
		}
	}
	if opts.Serialized {
		e.mu.Favour()
	}
	e.model = newModel(g, opts.Model, opts.segment())
	if t, ok := g.(Topology); ok {
		e.hosts = make([]int, e.size)
		for r := range e.hosts {
			e.hosts[r] = t.HostOf(r)
		}
		e.hl = newHostLayout(e.hosts)
	}
	e.inl = inlineLimits(g, &opts)
	e.partsOut, _ = g.(PartsSender)
	e.sendNow, _ = g.(NowSender)
	e.partsIn, _ = g.(PartsReceiver)
	e.foldIn, _ = g.(FoldReceiver)
	if sm, ok := g.(SharedMemoryGroup); ok {
		if r := sm.Shared(); r != nil {
			e.shm = newShmState(r, e.size, e.rank)
		}
	}
	e.wctx, e.wcancel = context.WithCancel(context.Background())
	if ar, ok := g.(AnySourceReceiver); ok && e.size > 1 {
		e.wg.Add(1)
		go e.watchLoop(func(buf []byte) (Request, error) { return ar.IrecvAny(abortTag, buf) })
	} else {
		for p := 0; p < e.size; p++ {
			if p != e.rank {
				e.wg.Add(1)
				go e.watchLoop(func(buf []byte) (Request, error) { return e.g.Irecv(p, abortTag, buf) })
			}
		}
	}
	return e, nil
}

// Rank and Size are the group's.
func (e *Engine) Rank() int { return e.rank }
func (e *Engine) Size() int { return e.size }

// Group returns the group the Engine runs on.
func (e *Engine) Group() Group { return e.g }

// Close stops the watchers and releases the one-sided window. Once a
// one-sided algorithm has run, Close is collective (every rank closes its
// Engine, concurrently), because releasing a window is. Collectives after
// Close fail with ErrClosed. Close returns the disagreement of this rank's
// last shared-memory call if that call left it to Close (see Agreement in
// alg_shm.go).
func (e *Engine) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	if e.probe != nil {
		e.probe.Stop()
	}
	e.settleLocked()
	idle := e.cur == nil
	e.mu.Unlock()
	// The agreement of this rank's last call, if still pending, is
	// checked here (see Agreement in alg_shm.go): no call runs any more.
	var late error
	if idle && e.shm != nil && e.size > 1 {
		e.shmMu.RLock()
		if !e.shmGone {
			late = e.closeVerify()
		}
		e.shmMu.RUnlock()
	}
	// A call polling shared memory gives up; then nothing touches it. A
	// call that ends on endQuick's path says so by a plain store, which
	// this rank may not see at once: so Close polls (it is rare) rather
	// than have that path look for a Close (a fence on every call).
	e.closing.Store(true)
	for {
		e.mu.Lock()
		e.settleLocked()
		busy := e.shmCall
		e.mu.Unlock()
		if !busy {
			break
		}
		time.Sleep(20 * time.Microsecond)
	}
	e.shmMu.Lock()
	if e.shm != nil && !e.shmGone {
		e.mu.Lock()
		ok := e.okCalls
		e.mu.Unlock()
		e.shm.leave(e.rank, ok)
	}
	e.shmGone = true
	e.shmMu.Unlock()
	e.wcancel()
	e.wg.Wait()
	e.mu.Lock()
	loose := e.loose
	e.loose = nil
	e.mu.Unlock()
	for _, r := range loose {
		r.Cancel()
	}
	var err error
	if e.win != nil {
		err = e.win.Close()
		scratch.put(e.winBuf)
		e.win, e.winBuf = nil, nil
	}
	if err == nil {
		return late
	}
	return errors.Join(late, err)
}

// watchLoop receives mismatch aborts and stall probes (from one peer, or
// from any) until Close or until the group fails.
func (e *Engine) watchLoop(post func(buf []byte) (Request, error)) {
	defer e.wg.Done()
	buf := make([]byte, hdrLen+maxReason)
	for {
		req, err := post(buf)
		if err != nil {
			return
		}
		var n int
		if pw, ok := req.(PassiveWaiter); ok {
			n, err = pw.WaitPassive(e.wctx)
		} else {
			n, err = req.Wait(e.wctx)
		}
		if err != nil {
			req.Cancel() // Close: the receive must not linger in the group
			return
		}
		if rl, ok := req.(Releaser); ok {
			rl.Release()
		}
		var h header
		if !h.decode(buf[:n]) {
			continue
		}
		switch h.kind {
		case kindAbort:
			e.onAbort(h.seq, mismatchFromAbort(&h, buf[hdrLen:n]))
		case kindStatus:
			if peer := int(h.rankA); peer >= 0 && peer < e.size && peer != e.rank {
				e.onStatus(peer, &h)
			}
		}
	}
}

// statusNote is a stall probe received before this rank began its call.
type statusNote struct {
	peer int
	h    header
}

// Stall probes. When ranks disagree about a count, they may also choose
// different algorithms, whose messages never meet: each rank then waits
// for a message the other will not send, and no header check can fire. So
// a call still running after Options.StallProbe sends its fingerprint to
// every peer, on the abort tag; a peer in the same call that disagrees
// reports the mismatch (to everyone), a peer that agrees ignores it. The
// fast path pays only for a stopped timer.
func (e *Engine) sendStatus() {
	e.mu.Lock()
	e.settleLocked()
	st := e.cur
	switch {
	case st == nil || !st.probeArmed || e.closed:
		// Idle, or a call that wants no probe yet (armProbe arms the
		// timer again when it does).
		e.probeOn = false
		e.mu.Unlock()
		return
	case st.calls != e.probeCall:
		// Armed for a call that has ended: give this one a whole period.
		e.probeCall = st.calls
		e.probe.Reset(e.opts.stallProbe())
		e.mu.Unlock()
		return
	}
	e.probeOn = false // the call has run for a period at least: probe once
	h := st.hdr
	e.mu.Unlock()
	h.kind = kindStatus
	h.rankA = int32(e.rank) // the receiver may not know the source (IrecvAny)
	b := make([]byte, hdrLen)
	h.encode(b)
	e.fireAll(b)
}

func (e *Engine) onStatus(peer int, h *header) {
	e.mu.Lock()
	e.settleLocked()
	st := e.cur
	switch {
	case st != nil && st.seq == h.seq:
		m := compareCall(e.rank, &st.hdr, peer, h)
		if m == nil || st.abort != nil {
			e.mu.Unlock()
			return
		}
		st.abort = m
		st.stopLocked()
		seq := st.seq // st is recycled once its call ends: read it under the lock
		e.mu.Unlock()
		e.broadcastAbort(header{kind: kindAbort, seq: seq, what: whatCode(m.What), rankA: int32(m.Rank), rankB: int32(m.Peer), valA: m.Value, valB: m.PeerValue, root: int32(m.Suspect + 1)}, nil)
		return
	case int32(h.seq-e.seq) > 0 && len(e.status) < 1024:
		e.status[h.seq] = statusNote{peer: peer, h: *h}
	case int32(e.seq-h.seq) >= 0 && int32(e.seq-h.seq) < int32(len(e.recent)) && (st == nil || st.seq != h.seq):
		// A call this rank has finished: the peer may wait for something
		// this rank's algorithm never sends (it chose another one, for
		// another count). Report the disagreement; the peer, still in
		// the call, fails by name. (Ranks past the call ignore the abort.)
		past := e.recent[h.seq%uint32(len(e.recent))]
		if past.seq != h.seq {
			break
		}
		m := compareCall(e.rank, &past, peer, h)
		e.mu.Unlock()
		if m != nil {
			e.broadcastAbort(header{kind: kindAbort, seq: h.seq, what: whatCode(m.What), rankA: int32(m.Rank), rankB: int32(m.Peer), valA: m.Value, valB: m.PeerValue, root: int32(m.Suspect + 1)}, nil)
		}
		return
	}
	e.mu.Unlock()
}

func (e *Engine) onAbort(seq uint32, m error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.settleLocked()
	switch {
	case e.cur != nil && e.cur.seq == seq:
		suspectByOwn(m, &e.cur.hdr, e.rank)
		if e.cur.abort == nil {
			e.cur.abort = m
		}
		e.cur.stopLocked()
	case int32(seq-e.seq) > 0: // a call this rank has not started yet
		if len(e.aborts) < 1024 {
			e.aborts[seq] = m
		}
	}
}

// callState is what one collective call shares among its phases.
type callState struct {
	e      *Engine
	parent context.Context // the caller's
	// ctx is what the call's waits use: the caller's ctx, until a wait
	// that no request can end (a window notification) needs a ctx that an
	// abort cancels; cancelCtx makes one then. Requests are ended by
	// Cancel instead (see stopLocked), which spares every call a
	// context.WithCancel.
	ctx      context.Context
	cancelFn context.CancelFunc // nil until cancelCtx
	stopped  bool               // stopLocked ran: new requests are canceled at once; under e.mu
	halted   atomic.Bool        // stopped, for lock-free polls (shared-memory waits)
	calls    uint64             // the Engine's call counter for this call
	shmHeld  bool               // a shared-memory call: e.shmCall stands for e.shmMu's read lock
	seq      uint32
	op       string
	alg      Algorithm
	abort    error // a peer's abort (mismatch or invalid arguments), under e.mu
	pending  []*pendingReq
	// batch holds requests posted while batching, tracked together by
	// endBatch with one lock instead of one per request.
	batch    []*pendingReq
	batching bool
	scratch  [][]byte // pooled buffers, released once no request can touch them
	hdr      header   // the call's fingerprint, for stall probes

	// Message records, recycled with the callState: outs[:nout] and
	// ins[:nin] are this call's.
	outs      []*outMsg
	ins       []*inMsg
	nout, nin int

	probeArmed bool // the Engine's probe timer runs for this call; under e.mu
	waitPeer   int  // 1 + the group rank the call waited for last (noteWait); 0: none yet

	// shmLast: the round running is the call's last (shmChunksOf), whose
	// shmDone marks the whole call read; shmFinished: that happened, and
	// end need not store the done word again.
	shmLast, shmFinished bool

	// waited is the Waited of the caller's ctx (Waited.Context; nil: a
	// blocking call): until it is set, the call's waits sleep instead of
	// spinning. The first wait looks it up (background; waitedKnown: it
	// has): ctx.Value walks the caller's whole chain of contexts, a real
	// part of a small call, and a call that never waits need not know.
	waited      *Waited
	waitedKnown bool

	// The phases' views (sub), a view's rank list (ints) and lists of
	// buffers (bufList), recycled with the callState: a hierarchical call
	// allocated them anew each time, a dozen objects a call on every rank
	// of a job across hosts.
	subs [4]call
	nsub int
	ints []int
	bufs [][]byte // the lists handed out this call, back to back
}

type pendingReq struct {
	r    Request
	done bool
	buf  []byte // staging buffer to return to the pool once done
}

// call is one phase of a collective: the callState plus the view of the
// group the phase runs on and the header template its messages carry.
type call struct {
	*callState
	ranks []int // view rank → group rank; nil means identity
	me    int   // this rank in the view
	n     int   // view size
	// h is the call's header, the callState's (hdr): a copy of it would
	// read with 16-byte loads what begin just stored byte by byte, a load
	// the store buffer cannot serve (a failed store-to-load forwarding),
	// which waits until those stores and every one before them reach the
	// cache: a tenth of a small call's software, and behind a publication
	// of the call before, whose line a peer holds, far more. A sub-call,
	// whose root differs, points at its own (hSub).
	h     *header
	hSub  header
	tag   int
	kern  *reduce.Kernel // shared (reduce.KernelOf): never modified
	esize int
	vec   int // elements of the vector the block helpers split (usually h.count)
}

// begin starts a call: it takes the next sequence number, checks that no
// other call runs and that no peer already aborted this one.
func (e *Engine) begin(ctx context.Context, coll Collective, alg Algorithm, kern *reduce.Kernel, esize int, root int, count int64) (*call, error) {
	e.mu.LockFavoured()
	if e.closed {
		e.mu.UnlockFavoured()
		return nil, &Error{Op: coll.String(), Rank: e.rank, Peer: -1, Err: errEngineClosed}
	}
	e.settleLocked()
	if e.cur != nil {
		// The running call's name is read under the lock: it may end and
		// its records be reused as soon as the lock is released.
		err := &Error{Op: coll.String(), Rank: e.rank, Peer: -1, Err: fmt.Errorf("%w: %v called while %s #%d runs on the same Engine; use one Engine (communicator) per concurrent stream of collectives", ErrInvalidArgument, coll, e.cur.op, e.cur.seq)}
		e.mu.UnlockFavoured()
		return nil, err
	}
	e.seq++
	e.calls++
	// The call's state is recycled from the previous call (calls on one
	// Engine never overlap), with the capacity of its slices.
	c := e.spare
	if c == nil || e.act.ended() != e.spareSeq {
		// None yet, or still held (only a call that overlaps another, which
		// fails below, finds it so): new records, which become the spare.
		c = &call{callState: new(callState)}
		e.spare = c
	}
	e.spareSeq = e.seq
	st := c.callState
	// Field by field rather than *st = callState{...}: the literal is
	// built on the stack and copied, a tenth of a small call's software.
	if st.stopped {
		st.halted.Store(false)
	}
	st.e, st.parent, st.ctx, st.cancelFn = e, ctx, ctx, nil
	st.stopped, st.calls, st.shmHeld, st.seq = false, e.calls, false, e.seq
	st.shmLast, st.shmFinished = false, false
	st.op, st.alg, st.abort = coll.String(), alg, nil
	st.pending, st.scratch, st.batch, st.batching = st.pending[:0], st.scratch[:0], st.batch[:0], false
	st.nout, st.nin, st.probeArmed, st.waitPeer = 0, 0, false, 0
	if st.nsub > 0 || len(st.bufs) > 0 {
		clear(st.subs[:st.nsub]) // let go of the last call's buffers
		clear(st.bufs)
		st.nsub, st.bufs = 0, st.bufs[:0]
	}
	st.waited, st.waitedKnown = nil, false // looked up by the first wait (background)
	// Cleared, then field by field too: the literal's byte-sized stores on
	// the stack, read back 16 bytes at a time for the copy, stalled the
	// copy (a failed store-to-load forwarding) for 6% of a small call.
	callHeader(&st.hdr, coll, alg, kern, st.seq, root, count)
	var early *MismatchError // a stall probe that arrived before this call began
	// (The maps are nearly always empty: look only when they are not.)
	if len(e.aborts) > 0 {
		if m := e.aborts[e.seq]; m != nil {
			delete(e.aborts, e.seq)
			suspectByOwn(m, &st.hdr, e.rank)
			st.abort = m
			st.stopLocked()
		}
	}
	if len(e.status) > 0 {
		if n, ok := e.status[e.seq]; ok && st.abort == nil {
			early = compareCall(e.rank, &st.hdr, n.peer, &n.h)
		}
		delete(e.status, e.seq)
		for s := range e.status { // drop probes of calls that are over
			if int32(s-e.seq) < 0 {
				delete(e.status, s)
			}
		}
	}
	e.cur = st
	if alg == SharedMemory {
		// Close is not under way (e.closed is false): the region stays
		// until this call's end clears shmCall.
		st.shmHeld, e.shmCall = true, true
	}
	aborted := st.abort != nil
	if alg != SharedMemory && early == nil { // those arm it when a wait outlasts its spin
		if d := e.opts.stallProbe(); d > 0 && e.size > 1 {
			st.probeArmed = true
			e.armLocked(d)
		}
	}
	e.mu.UnlockFavoured()
	e.act.begin(st.seq, coll, alg)
	c.callState, c.ranks, c.me, c.n = st, nil, e.rank, e.size
	c.kern, c.esize, c.vec = kern, esize, int(count)
	c.h = &st.hdr
	c.tag = int(st.seq&(1<<29-1)) << 1
	if early != nil {
		return c, c.end(c.mismatch(early))
	}
	if aborted {
		return c, c.end(c.failAbort())
	}
	if alg == SharedMemory && (e.shm.failFlag == nil || e.shm.failFlag.Load()) {
		// A failed group fails every later call. The shared-memory waits
		// look at the group only when a peer is slow, so a call whose
		// peers are all on time would otherwise go on after the loss.
		select {
		case <-e.shm.failed:
			return c, c.end(c.fail(-1, e.shm.r.Err()))
		default:
		}
	}
	return c, nil
}

// callHeader fills h as the header of a call (begin's, and the record of
// a call that may end pending: execute), cleared and then field by field:
// see call.h for why neither is a copy of the other.
func callHeader(h *header, coll Collective, alg Algorithm, kern *reduce.Kernel, seq uint32, root int, count int64) {
	*h = header{}
	h.kind, h.alg, h.seq, h.coll = kindData, uint8(alg), seq, uint8(coll)
	h.op, h.dtype, h.root, h.count = kern.Op.Code(), kern.DType, int32(root), count
}

// armProbe starts the stall-probe timer for this call (once).
func (c *call) armProbe() {
	e := c.e
	d := e.opts.stallProbe()
	if d <= 0 || e.size < 2 || c.probeArmed {
		return
	}
	e.mu.LockFavoured()
	c.probeArmed = true
	e.armLocked(d)
	e.mu.UnlockFavoured()
}

// armLocked starts the probe timer, for the running call, unless it is
// pending already (see Engine.probe). The caller holds e.mu.
func (e *Engine) armLocked(d time.Duration) {
	if e.probeOn || e.closed {
		return
	}
	e.probeOn, e.probeCall = true, e.calls
	if e.probe == nil {
		e.probe = time.AfterFunc(d, e.sendStatus)
	} else {
		e.probe.Reset(d)
	}
}

// end finishes the call: on error it cancels and waits for every request
// still in flight (so no buffer is touched after return) and wraps err.
func (c *call) end(err error) error {
	st := c.callState
	e := st.e
	if err == nil && st.shmHeld && e.cur == st && len(st.pending) == 0 && len(st.scratch) == 0 && st.cancelFn == nil {
		c.endQuick()
		return nil
	}
	e.mu.LockFavoured()
	st.probeArmed = false // the timer, if pending, finds no armed call (or another)
	if err != nil {
		st.stopLocked() // pending requests return promptly per the Group contract
	}
	// From here on no watcher touches st (they look for e.cur), so the
	// requests can be waited for and released without the lock.
	current := e.cur == st
	if current {
		e.cur = nil
		e.recent[st.seq%uint32(len(e.recent))] = st.hdr
	}
	if err == nil {
		e.okCalls = st.calls
	}
	// Tell the writers of later calls that this rank reads nothing of this
	// call any more (see alg_shm.go), whichever algorithm ran. A
	// shared-memory call does it before it lets Close go on; another takes
	// shmMu unless Close is under way.
	if st.shmHeld {
		if !st.shmFinished {
			e.shm.finish(e.rank, st.calls)
		}
		e.shmCall = false
	}
	e.mu.UnlockFavoured()
	if !st.shmHeld && e.shm != nil && e.shmMu.TryRLock() {
		if !e.shmGone {
			e.shm.finish(e.rank, st.calls)
		}
		e.shmMu.RUnlock()
	}
	for _, p := range st.pending {
		if !p.done {
			p.r.Wait(context.Background())
			p.done = true
		}
		if rl, ok := p.r.(Releaser); ok {
			rl.Release()
		}
		p.r = nil
		scratch.put(p.buf)
	}
	st.pending = st.pending[:0]
	for _, b := range st.scratch {
		scratch.put(b)
	}
	st.scratch = st.scratch[:0]
	if st.cancelFn != nil {
		st.cancelFn()
	}
	if current {
		// The call is over for Activity, and its records may serve the
		// next call (see Engine.spare).
		e.act.end(st.seq)
	}
	if err == nil {
		return nil
	}
	var ce *Error
	if errors.As(err, &ce) {
		return err
	}
	return &Error{Op: st.op, Algorithm: st.alg.String(), Seq: st.seq, Rank: st.e.rank, Peer: -1, Err: err}
}

// endQuick ends a shared-memory call that succeeded and holds nothing
// (no request, scratch buffer or ctx of its own) without taking e.mu: it
// marks the call over for its peers (its done word) and for Activity, and
// leaves the rest of end's bookkeeping to whoever takes e.mu next
// (settleLocked). The stores that published the call's data wait in the
// store buffer until the peers polling those lines give them up (a cache
// line's trip between cores); a locked instruction here (the mutex) would
// wait for them, where without one the call returns and they complete
// while the caller goes on. The lock's other takers (the stall probe, a
// peer's status or abort, Close) see the call as still running until they
// see the store of its end, as they would before end took the lock.
func (c *call) endQuick() {
	st := c.callState
	e := st.e
	if !st.shmFinished {
		e.shm.finish(e.rank, st.calls)
	}
	e.shm.quick++
	e.shm.ownNextEntry(e.rank, st.calls+1)
	e.act.end(st.seq)
}

// settleLocked completes end's bookkeeping for a call that endQuick ended
// (Activity says it is over while it is still e.cur). The caller holds
// e.mu.
func (e *Engine) settleLocked() {
	st := e.cur
	if st == nil || e.act.ended() != st.seq {
		return
	}
	st.probeArmed = false
	e.cur = nil
	e.recent[st.seq%uint32(len(e.recent))] = st.hdr
	e.okCalls = st.calls
	e.shmCall = false
}

// stopLocked ends the call's requests and waits: every pending request is
// canceled (those already matched complete normally), so is every request
// the call makes from now on (see trackIn), and so is the ctx of waits on
// windows. The caller holds e.mu.
func (st *callState) stopLocked() {
	if st.stopped {
		return
	}
	st.stopped = true
	st.halted.Store(true)
	for _, p := range st.pending {
		p.r.Cancel()
	}
	if st.cancelFn != nil {
		st.cancelFn()
	}
}

// stop is stopLocked for a caller without e.mu.
func (st *callState) stop() {
	st.e.mu.LockFavoured()
	st.stopLocked()
	st.e.mu.UnlockFavoured()
}

// cancelCtx returns a ctx for waits that no request Cancel can end (window
// notifications, window set-up): an abort cancels it.
func (st *callState) cancelCtx() context.Context {
	st.e.mu.LockFavoured()
	defer st.e.mu.UnlockFavoured()
	if st.cancelFn == nil {
		st.ctx, st.cancelFn = context.WithCancel(st.parent)
		if st.stopped {
			st.cancelFn()
		}
	}
	return st.ctx
}

// sub returns a phase of the same call over a subset of the group (ranks
// lists group ranks in view order; this rank must be among them).
func (c *call) sub(ranks []int, root int) *call {
	var s *call
	if st := c.callState; st.nsub < len(st.subs) {
		s = &st.subs[st.nsub]
		st.nsub++
	} else {
		s = new(call)
	}
	*s = *c
	s.ranks = ranks
	s.n = len(ranks)
	s.me = -1
	for i, r := range ranks {
		if r == c.e.rank {
			s.me = i
		}
	}
	s.hSub = *c.h
	s.hSub.root = int32(root)
	s.h = &s.hSub
	return s
}

// bufList is an empty list of n buffers, valid for the rest of the call.
func (c *call) bufList(n int) [][]byte {
	st := c.callState
	k := len(st.bufs)
	if k+n > cap(st.bufs) {
		// The lists handed out so far keep the old array.
		st.bufs, k = make([][]byte, 0, max(2*cap(st.bufs), n, 8)), 0
	}
	st.bufs = st.bufs[:k+n]
	return st.bufs[k : k+n : k+n]
}

func (c *call) world(v int) int {
	if c.ranks == nil {
		return v
	}
	return c.ranks[v]
}

// fail wraps err from a request with peer (a view rank). A peer's abort or
// the caller's deadline take precedence over the cancellation they caused.
func (c *call) fail(peer int, err error) error {
	wp := -1
	if peer >= 0 {
		wp = c.world(peer)
	}
	if ab := c.abortErr(); ab != nil {
		return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: c.e.rank, Peer: -1, Err: ab}
	}
	if c.parent.Err() != nil {
		err = context.Cause(c.parent)
		if wp >= 0 { // the error names wp as its peer; this says what of it
			err = fmt.Errorf("%w: had not arrived", err)
		}
	}
	return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: c.e.rank, Peer: wp, Err: err}
}

func (c *call) abortErr() error {
	c.e.mu.LockFavoured()
	defer c.e.mu.UnlockFavoured()
	return c.abort
}

func (c *call) failAbort() error {
	return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: c.e.rank, Peer: -1, Err: c.abortErr()}
}

// mismatch records a disagreement found on this rank, tells every rank of
// the group (so those waiting elsewhere stop too) and returns the error.
func (c *call) mismatch(m *MismatchError) error {
	c.e.mu.LockFavoured()
	if c.abort == nil {
		c.abort = m
	}
	c.e.mu.UnlockFavoured()
	c.stop()
	c.e.broadcastAbort(header{kind: kindAbort, seq: c.seq, what: whatCode(m.What), rankA: int32(m.Rank), rankB: int32(m.Peer), valA: m.Value, valB: m.PeerValue, root: int32(m.Suspect + 1)}, nil)
	return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: c.e.rank, Peer: m.otherThan(c.e.rank), Err: m}
}

// invalid reports a bad argument on this rank: the other ranks are told
// (and fail with a *PeerError) so that none waits for this one.
func (c *call) invalid(err error) error {
	c.e.mu.LockFavoured()
	if c.abort == nil {
		c.abort = err
	}
	c.e.mu.UnlockFavoured()
	c.stop()
	// The others get the reason too (a sentinel code and the text).
	h, reason := refusal(c.seq, c.e.rank, err)
	c.e.broadcastAbort(h, reason)
	return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: c.e.rank, Peer: -1, Err: err}
}

// refusal is the abort header and reason text by which rank refuses call
// seq for err (see mismatchFromAbort).
func refusal(seq uint32, rank int, err error) (header, []byte) {
	reason := []byte(err.Error())
	if len(reason) > maxReason {
		reason = append(reason[:maxReason-3:maxReason-3], "..."...)
	}
	code := int64(reasonInvalid)
	if errors.Is(err, ErrUnsupported) {
		code = reasonUnsupported
	}
	return header{kind: kindAbort, seq: seq, what: whatInvalid, rankA: int32(rank), valA: code, payload: int64(len(reason))}, reason
}

// peerFailed stops the call because peer refused it (err, its reason),
// as an abort from it would.
func (c *call) peerFailed(peer int, err error) error {
	c.e.mu.LockFavoured()
	if c.abort == nil {
		c.abort = err
	}
	c.e.mu.UnlockFavoured()
	c.stop()
	return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: c.e.rank, Peer: peer, Err: c.abortErr()}
}

func (e *Engine) broadcastAbort(h header, extra []byte) {
	b := make([]byte, hdrLen+len(extra))
	h.encode(b)
	copy(b[hdrLen:], extra)
	// Not waited for: a peer that is gone or slow must not hold this rank
	// here. b is never reused, and Close cancels what is still pending.
	e.fireAll(b)
}

// fireAll sends b to every peer on the abort tag without waiting. The
// latest of these sends are kept so that Close can cancel those a peer
// never received; older ones are left to complete or fail on their own.
// They are recorded under one lock, not one per peer: with
// Options.Serialized this side's lock is a heavy fence (see Engine.mu).
func (e *Engine) fireAll(b []byte) {
	sent := make([]Request, 0, e.size-1)
	for p := 0; p < e.size; p++ {
		if p == e.rank {
			continue
		}
		if r, err := e.g.Isend(p, abortTag, b); err == nil {
			sent = append(sent, r)
		}
	}
	if len(sent) == 0 {
		return
	}
	e.mu.Lock()
	e.loose = append(e.loose, sent...)
	if n := len(e.loose) - maxLoose; n > 0 {
		e.loose = append(e.loose[:0], e.loose[n:]...)
	}
	e.mu.Unlock()
}

// maxLoose bounds the unwaited abort and probe sends an Engine remembers.
const maxLoose = 256

// get returns a pooled scratch buffer of n bytes that stays the call's
// until end (so a request cancelled on an error path can never write into
// a buffer another call already got).
func (c *call) get(n int) []byte {
	b := scratch.get(n)
	if b != nil {
		c.scratch = append(c.scratch, b)
	}
	return b
}
