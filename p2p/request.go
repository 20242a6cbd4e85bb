package p2p

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// Status describes a received message (or a probed one).
type Status struct {
	Source int // the sending rank
	Tag    int
	Count  int // bytes in the message (bytes delivered, after truncation)
}

type reqOp uint8

const (
	opSend reqOp = iota + 1
	opRecv
	opWrite
	opWinRead   // a one-sided read from a peer's window
	opWinAtomic // a 64-bit atomic on a word of a peer's window
)

func (o reqOp) String() string {
	switch o {
	case opSend:
		return "Send"
	case opRecv:
		return "Recv"
	case opWrite:
		return "Write"
	case opWinRead:
		return "Read"
	case opWinAtomic:
		return "Atomic"
	}
	return "?"
}

// doneFlag is a request's completion: set once under ep.mu, read by any
// goroutine without it.
type doneFlag struct{ v uint32 }

func (f *doneFlag) Load() bool { return atomic.LoadUint32(&f.v) != 0 }

// set completes the flag for goroutines that may be reading it. A light
// publication (a plain store on amd64, which orders the request's result
// before it): every reader loads the flag atomically, and what a waiter
// registers to be woken it registers under ep.mu, so nothing needs the
// full fence of an atomic store, which waited for the stores before it
// (the message's copy, a ring's write-back) to leave the store buffer.
func (f *doneFlag) set() { shmsync.PublishLight(&f.v, 1) }

// setUnshared completes the flag of a request no other goroutine can see
// yet (its op has not returned it), with a plain store: the atomic one is
// a full fence on x86, and in a ring send it waited for the line the
// previous message's stamp had claimed from the receiver's core (a
// window of 8-byte Isends went 1.45 times as fast without it, in the
// machine placements where that line moves slowly).
func (f *doneFlag) setUnshared() { f.v = 1 }

// Request is a non-blocking operation in progress. Wait, Test and Cancel
// may be called from any goroutine, several at once; the buffer given to
// the operation belongs to the request until it completes (Wait or Test
// returned done) and must not be touched before that.
type Request struct {
	// The fields every message touches come first, and the rare ones
	// (rendezvous receives, window operations) sit in *reqCold: a window
	// of 64 Isends and 64 Irecvs keeps 128 requests live, and a
	// 520-byte request made them spill the L1 cache and cost a fifth of an
	// 8-byte message's software to clear on release.
	ep         *Endpoint
	done       doneFlag
	op         reqOp
	queued     bool
	canceled   bool
	cancelSent bool
	// ext is the layer above's own request (SetExt): it stays with r
	// when r is recycled.
	ext     any
	peer    int      // destination, or the source pattern of a receive
	pattern envelope // receive: what it matches; send: its envelope
	buf     []byte
	// fold, for a receive of IrecvFold, folds each piece of the message
	// into buf instead of copying it (place); unit is the size of its
	// elements, which no piece may split.
	fold func(dst, src []byte)
	// head, for a receive of IrecvParts, takes the message's first
	// len(head) bytes, buf the rest (place); for an eager send of
	// IsendParts it is the message's first part, buf the rest.
	head []byte

	status Status
	err    error
	notify chan struct{} // set by a blocked waiter; guarded by ep.mu
	waker  *waker        // wakes a waitCQ; guarded by ep.mu
	waitCh chan struct{}

	unit      int32    // fold's element size
	pipeFirst *outItem // a pipelined send's first fragment
	// A rendezvous send's or receive's (or a window operation's)
	// registration of buf, and the send's id.
	reg *regEntry
	dev *device
	id  uint64

	item outItem

	// The rest of a rendezvous receive's or a window operation's state,
	// nil for other requests (see coldLocked).
	*reqCold
}

// reqCold is the state of a request that only rendezvous receives and
// window operations use.
type reqCold struct {
	// Rendezvous.
	rts        inbound
	readID     uint32
	readChunks int
	readsLeft  int
	readErr    error
	// The receiver READs [readOff, readOff+readLen) of the message: all
	// of it, or the first part of a split rendezvous, whose rest the
	// sender writes (split: its WDONE has not come yet; readDone: the
	// READ has finished).
	readOff, readLen int
	split, readDone  bool
	fallback         bool  // the sender could not write its part: READ it too
	splitErr         error // the sender's part will never come (its link broke)
	// served: the READ of the whole message asked the sender's queue pair
	// to report its response written (verbs.Caps.ReadServed), which
	// completes the send: no FIN follows.
	served bool

	// A fold or parts receive staged in memory of the endpoint's (buf,
	// see stageLocked): the caller's buffer, placed into at completion.
	stagedTo   []byte
	stagedHead []byte // a parts receive's head
	staging    bool

	// Window writes.
	notify32 bool
	winMR    verbs.MR
	fence    bool // a write of no bytes that orders the ones before it (Ifence)
	// covers: the unsignaled inline requests posted before this fence,
	// whose send-queue entries its completion frees (peer.signalInline).
	covers int

	// Window atomics: the opcode and its operands.
	atomic       verbs.Opcode
	cmpAdd, swap uint64
}

// newWinReq is a window operation's request, its cold state attached,
// recycled from ep's free lists when they have one: a burst of Puts over
// tcp whose Flush releases them allocated a request each (a fifth of a
// Put's software, and the garbage collector's work after it).
func (ep *Endpoint) newWinReq() *Request {
	ep.mu.Lock()
	r := ep.newReqLocked()
	ep.coldLocked(r)
	ep.mu.Unlock()
	return r
}

// coldLocked attaches cold state to pooled request r (a rendezvous
// receive), recycled from ep's free list if there is one. The caller
// holds ep.mu.
func (ep *Endpoint) coldLocked(r *Request) {
	if r.reqCold != nil {
		return
	}
	if n := len(ep.freeColds); n > 0 {
		r.reqCold = ep.freeColds[n-1]
		ep.freeColds[n-1] = nil
		ep.freeColds = ep.freeColds[:n-1]
		return
	}
	r.reqCold = new(reqCold)
}

// Requests of the blocking calls (Send, Recv), and those handed back with
// Release, are recycled: nothing else can hold them once they completed.
// The endpoint keeps them in a free list under its mutex, which the calls
// that take one hold anyway: a sync.Pool's Get and Put were a third of
// the software of a window of 8-byte Isends and Irecvs.
const maxFreeReqs = 256

// newReqLocked is a zeroed request of ep, recycled if one is free. The
// caller holds ep.mu.
func (ep *Endpoint) newReqLocked() *Request {
	n := len(ep.freeReqs)
	if n == 0 {
		return &Request{ep: ep}
	}
	r := ep.freeReqs[n-1]
	ep.freeReqs[n-1] = nil
	ep.freeReqs = ep.freeReqs[:n-1]
	r.ep = ep
	if r.waitCh != nil {
		select { // a stale wake-up from the previous use
		case <-r.waitCh:
		default:
		}
	}
	return r
}

// getReq is newReqLocked for a caller that does not hold ep.mu.
func (ep *Endpoint) getReq() *Request {
	ep.mu.Lock()
	r := ep.newReqLocked()
	ep.mu.Unlock()
	return r
}

// putReq recycles a completed request. Under the mutex, completeLocked
// (which may still be signalling r after a channel woke its waiter) has
// finished with it.
func (ep *Endpoint) putReq(r *Request) {
	ep.mu.Lock()
	ep.putReqLocked(r)
	ep.mu.Unlock()
}

func (ep *Endpoint) putReqLocked(r *Request) {
	if c := r.reqCold; c != nil {
		// The cold part goes back apart (coldLocked), so that the next
		// message r carries does not clear it again.
		*c = reqCold{}
		if len(ep.freeColds) < maxFreeReqs {
			ep.freeColds = append(ep.freeColds, c)
		}
	}
	*r = Request{waitCh: r.waitCh, ext: r.ext}
	if len(ep.freeReqs) < maxFreeReqs {
		ep.freeReqs = append(ep.freeReqs, r)
	}
}

// putReqLaterLocked is putReqLocked for a blocking receive about to
// return: r is cleared by the caller's next blocking receive, once that
// one is posted (cleanLocked), while it waits for its message, rather than
// before this one returns; the clear writes all five of r's cache lines,
// otherwise on a ping-pong's path every message (2-5 ns of a 0.11 µs
// way at 0-32 B, the vCPUs close). Until then r is out of the pool; it
// lets go of the caller's buffers at once.
func (ep *Endpoint) putReqLaterLocked(r *Request) {
	// cleanLocked, written out: through the call this would not inline
	// into Recv.
	if ep.unclean != nil {
		ep.putReqLocked(ep.unclean)
	}
	r.buf, r.head, r.fold = nil, nil, nil
	ep.unclean = r
}

// cleanLocked recycles the request putReqLaterLocked left, if any.
func (ep *Endpoint) cleanLocked() {
	if r := ep.unclean; r != nil {
		ep.unclean = nil
		ep.putReqLocked(r)
	}
}

// ReleaseAll is Release for each request of reqs (nil entries and
// requests that have not completed are left alone), taking the endpoint's
// mutex once per run of requests of one endpoint rather than once per
// request: for a window of non-blocking operations that was a fifth of
// their software.
func ReleaseAll(reqs []*Request) {
	var ep *Endpoint
	for _, r := range reqs {
		if r == nil || r.ep == nil || !r.done.Load() {
			continue
		}
		if r.ep != ep {
			if ep != nil {
				ep.mu.Unlock()
			}
			ep = r.ep
			ep.mu.Lock()
		}
		ep.putReqLocked(r)
	}
	if ep != nil {
		ep.mu.Unlock()
	}
}

// SetExt attaches v to r for the layer that issued it, and Ext returns it:
// a layer that wraps each request in one of its own (comm does) keeps its
// object with the request, and gets it back with the request when the
// endpoint recycles it, rather than keeping a pool of its own: a
// sync.Pool's Get and Put cost a tenth of a message of a window of 8-byte
// Isends and Irecvs between processes. The value survives Release; it
// is the issuer's, and nothing here looks at it.
func (r *Request) SetExt(v any) { r.ext = v }

// Ext is the value SetExt attached to r (or to the request r recycles),
// or nil.
func (r *Request) Ext() any { return r.ext }

// Done reports whether the request has completed (without progressing it).
func (r *Request) Done() bool { return r.done.Load() }

// Outcome reports whether r has completed, without progressing the
// endpoint, and then its byte count (Status.Count) and error as Wait
// would return them: for a layer that goes over many requests and needs
// no more of each than whether it failed (comm's WaitAll), where a Wait
// for each cost the receiver of an OSU bw window of 8-byte messages about
// a tenth of its time.
func (r *Request) Outcome() (done bool, count int, err error) {
	if !r.done.Load() {
		return false, 0, nil
	}
	return true, r.status.Count, r.err
}

// Peer is the rank r exchanges with: a send's destination, a receive's
// source as posted (AnySource for a wildcard), a window operation's target.
func (r *Request) Peer() int { return r.peer }

// Test progresses the endpoint once and reports whether r has completed;
// when it has, it returns the status and error as Wait would.
func (r *Request) Test() (Status, bool, error) {
	if !r.done.Load() {
		r.ep.progress()
		if !r.done.Load() {
			return Status{}, false, nil
		}
	}
	return r.status, true, r.err
}

// Wait blocks until r completes or ctx ends. On ctx's end it cancels r if
// it has not matched yet (the error then wraps a *DeadlineError naming the
// peer that had not arrived, and r is complete). A request that cannot be
// canceled at once (a receive already being written, a rendezvous send
// whose receiver has not answered the cancel yet, a window operation
// already posted) is not waited for either, as that may take the peer's
// progress: Wait returns an error naming the peer and wrapping ctx.Err(),
// and r stays pending, its buffer in use, until it completes (Done; a
// later Wait returns its own result).
func (r *Request) Wait(ctx context.Context) (Status, error) {
	if !r.done.Load() {
		if err := r.ep.wait(ctx, r); err != nil {
			return Status{}, err
		}
	}
	return r.status, r.err
}

// WaitPassive is Wait without polling: the calling goroutine sleeps until
// another goroutine's progress (a blocking call on the endpoint, or the
// endpoint's background goroutine) completes r. It is for requests that may
// stay pending for long, such as a receive that watches for rare control
// messages: a Wait there would spin and then hold a CPU in the completion
// queue's own wait, competing with the goroutines on the hot path. It adds
// a goroutine wake-up (tens of µs on a busy machine) to r's latency.
// Cancellation and errors are as for Wait.
func (r *Request) WaitPassive(ctx context.Context) (Status, error) {
	if !r.done.Load() {
		if err := r.ep.waitChan(ctx, r, false); err != nil {
			return Status{}, err
		}
	}
	return r.status, r.err
}

// Release returns a completed request to the endpoint for reuse, sparing
// the allocation of a new one; a layer that issues many small non-blocking
// operations (the collectives) calls it once it has read the result.
// Release of a request that has not completed does nothing. After Release,
// r must not be used again, and Release must not be called twice: like a
// double free, that would hand one request to two operations.
func (r *Request) Release() {
	if r.ep != nil && r.done.Load() {
		r.ep.putReq(r)
	}
}

// Cancel asks for r to be canceled, as MPI_Cancel does: a receive that has
// not matched, or a send whose receiver has not matched it, completes with
// an error matching ErrCanceled; one that already matched completes
// normally. Cancel does not wait; use Wait to learn the outcome.
func (r *Request) Cancel() {
	ep := r.ep
	ep.mu.Lock()
	ep.cancelLocked(r)
	ep.flushDirtyLocked()
	ep.mu.Unlock()
}

// cancelLocked tries to cancel r; it reports whether r is complete now.
func (ep *Endpoint) cancelLocked(r *Request) bool {
	if r.done.Load() {
		return true
	}
	switch r.op {
	case opRecv:
		if ep.m.unpost(r) {
			r.canceled = true
			ep.completeLocked(r, ep.opErr(r, ErrCanceled))
			return true
		}
	case opSend:
		p := ep.peers[r.peer]
		if r.queued && p.unqueue(r) {
			if r.pipeFirst == nil { // a pipelined send holds nothing to release
				ep.dropQueuedLocked(&r.item)
			}
			r.canceled = true
			ep.completeLocked(r, ep.opErr(r, ErrCanceled))
			return true
		}
		if r.reg != nil && !r.cancelSent {
			r.cancelSent = true
			p.sendCtl(ep, header{kind: kCancel, id: r.id})
		}
	case opWrite, opWinRead, opWinAtomic:
		// A window operation still queued for credits or send-queue room
		// has touched nothing of the peer's: drop it. Once posted it
		// runs to its completion.
		p := ep.peers[r.peer]
		if r.queued && p.unqueue(r) {
			ep.dropQueuedLocked(&r.item)
			r.canceled = true
			ep.completeLocked(r, ep.opErr(r, ErrCanceled))
			return true
		}
	}
	return false
}

// wait is the blocking hot path: poll (spin, then yield), then block.
func (ep *Endpoint) wait(ctx context.Context, r *Request) error {
	if ep.poll(ctx, func() bool { return r.done.Load() }) {
		return nil
	}
	return ep.block(ctx, r)
}

// block is wait after its polling phase.
func (ep *Endpoint) block(ctx context.Context, r *Request) error {
	return ep.blockFor(ctx, r, false)
}

// blockFor is block; keep leaves r as it is when ctx ends (no cancel,
// the error is only ctx's), for WaitAny.
func (ep *Endpoint) blockFor(ctx context.Context, r *Request, keep bool) error {
	if len(ep.devs) == 1 {
		return ep.waitCQ(ctx, r, keep)
	}
	return ep.waitChan(ctx, r, keep)
}

// ended is what a wait for r returns when ctx ends first: r canceled if it
// can be (expire), or, if keep, untouched and ctx's error (the caller,
// WaitAny, says what it waited for).
func (ep *Endpoint) ended(ctx context.Context, r *Request, keep bool) error {
	if keep {
		return ctx.Err()
	}
	return ep.expire(ctx, []*Request{r})
}

// waitChan blocks on r's channel and leaves progress to others: the
// background goroutines (handed off to at once) and any foreground poller.
func (ep *Endpoint) waitChan(ctx context.Context, r *Request, keep bool) error {
	ep.mu.Lock()
	if r.done.Load() {
		ep.mu.Unlock()
		return nil
	}
	if r.waitCh == nil {
		r.waitCh = make(chan struct{}, 1)
	}
	r.notify = r.waitCh
	ep.mu.Unlock()
	ep.handOff()
	select {
	case <-r.waitCh:
		return nil
	case <-ctx.Done():
	}
	return ep.ended(ctx, r, keep)
}

// waitCQ blocks in the completion queue's own Wait, so that the goroutine
// the provider wakes is the one that wants the completion: one wake-up
// instead of two (provider → background goroutine → waiter). While it
// waits it counts as a poller, so the background goroutine stays parked. A
// request completed by someone else (another poller, a failure, Cancel)
// wakes the wait's context. That wake is armed only while the goroutine
// is inside CQ.Wait: when it completes its own request while polling (the
// common case), waking would make the provider run its ctx watcher (a new
// goroutine, a scheduler wake-up) for nothing. The context is one of the
// endpoint's reused wakers, which ends with ctx as well, so that the wait
// allocates nothing unless the provider sleeps.
func (ep *Endpoint) waitCQ(ctx context.Context, r *Request, keep bool) error {
	d := ep.devs[0]
	var w *waker
	ep.enterPoll()
	defer ep.leavePoll()
	defer func() {
		if w != nil {
			ep.mu.Lock()
			ep.putWakerLocked(w)
			ep.mu.Unlock()
		}
	}()
	for {
		ep.progressTurn()
		if r.done.Load() {
			break
		}
		ep.repostDue()
		ep.mu.Lock()
		if r.done.Load() {
			ep.mu.Unlock()
			break
		}
		// A fresh use of the waker each time round, as the last one
		// may have been woken.
		if w == nil {
			w = ep.getWakerLocked(ctx)
		} else {
			w.reset(ctx)
		}
		r.waker = w
		ep.mu.Unlock()
		err := ep.blockIn(w, d, false)
		ep.mu.Lock()
		r.waker = nil
		ep.mu.Unlock()
		if err != nil {
			if r.done.Load() { // the waker was woken (done is set first)
				break
			}
			if ctx.Err() != nil {
				return ep.ended(ctx, r, keep)
			}
			// The CQ is closed: the endpoint is closing and will complete r.
			time.Sleep(100 * time.Microsecond)
		}
	}
	return nil
}

// poll runs the polling phase of a blocking call by ep.policy: it makes
// progress and looks at cond until cond holds (true), or Spin+Yield has
// passed or ctx has ended (false: the caller blocks, or reports ctx).
func (ep *Endpoint) poll(ctx context.Context, cond func() bool) bool {
	ep.enterPoll()
	defer ep.leavePoll()
	// The first poll goes before the Poller is made: on the hot path it
	// usually finds the completion, and then the Poller would be work
	// for nothing (BenchmarkOverhead makes four polls a round).
	n := ep.progress()
	if cond() {
		return true
	}
	w := ep.policy.Poller(nil)
	for !w.Over(ctx) {
		if n == 0 {
			ep.repostDue()
		}
		n = ep.progress()
		if cond() {
			return true
		}
		if n == 0 && ep.incoming != nil {
			took, waiting := ep.arrived(ctx)
			if waiting {
				return false
			}
			if took {
				n = ep.progress()
				if cond() {
					return true
				}
			}
		}
	}
	return false
}

// arrived takes what has arrived for the CQs whose provider's goroutines
// would otherwise read it (verbs.Arrivals) on this goroutine; waiting
// reports bytes only those goroutines can take. A poller that keeps the
// thread (waitPolicy, crowded) blocks then, and Go's scheduler, with
// nothing else to run, finds those goroutines ready in its network poll
// at once.
func (ep *Endpoint) arrived(ctx context.Context) (took, waiting bool) {
	for _, a := range ep.incoming {
		t, w := a.Arrived(ctx)
		took, waiting = took || t, waiting || w
	}
	return took, waiting
}

// pollHeld is poll for the one request r of a blocking call. When one of
// its own polls completes r, it returns with ep.mu still held from handling
// that completion (held), so that the caller can recycle r without taking
// the mutex again; done says that r has completed.
func (ep *Endpoint) pollHeld(ctx context.Context, r *Request) (done, held bool) {
	ep.enterPoll()
	defer ep.leavePoll()
	n, held := ep.progressFor(r)
	if held || r.done.Load() {
		return true, held
	}
	w := ep.policy.Poller(nil)
	for !w.Over(ctx) {
		if n == 0 {
			ep.repostDue()
		}
		if n, held = ep.progressFor(r); held || r.done.Load() {
			return true, held
		}
		if n == 0 && ep.incoming != nil {
			took, waiting := ep.arrived(ctx)
			if waiting {
				break
			}
			if took {
				if n, held = ep.progressFor(r); held || r.done.Load() {
					return true, held
				}
			}
		}
	}
	return false, false
}

// expire handles ctx ending while reqs were pending: cancel what has not
// matched and report which ranks had not arrived. It does not wait for the
// rest: what has matched (a receive being written, a window operation
// posted) or waits for the peer's answer to a CANCEL (a rendezvous send)
// may need the peer to make progress, and the caller's ctx has ended. Such
// a request stays pending, its buffer in use, until it completes; the
// error returned for it names its peer and wraps ctx.Err(), and a later
// Wait (or Done) tells when it has finished.
func (ep *Endpoint) expire(ctx context.Context, reqs []*Request) error {
	ep.progress() // take the completions that have come already
	ep.mu.Lock()
	defer ep.mu.Unlock()
	var stopped, running []*Request
	var ranks []int
	anySrc := false
	for _, r := range reqs {
		if r == nil || r.done.Load() {
			continue
		}
		if ep.cancelLocked(r) {
			stopped = append(stopped, r)
		} else {
			running = append(running, r)
		}
		if r.peer == AnySource {
			anySrc = true
		} else if !slices.Contains(ranks, r.peer) {
			ranks = append(ranks, r.peer)
		}
	}
	ep.flushDirtyLocked()
	if len(stopped) == 0 && len(running) == 0 {
		return nil // everything completed after all
	}
	slices.Sort(ranks)
	errFor := func(r *Request, de *DeadlineError) error {
		return &Error{Op: r.op.String(), Rank: ep.rank, Peer: r.peer, Tag: int(r.pattern.tag), Err: de}
	}
	if len(stopped) > 0 {
		what := "no matching receive posted"
		switch stopped[0].op {
		case opRecv:
			what = "no matching message"
		case opWrite, opWinRead, opWinAtomic:
			what = "still queued for the peer's credits"
		}
		de := &DeadlineError{Ranks: ranks, Any: anySrc && len(ranks) == 0, What: what, Cause: ctx.Err()}
		for _, r := range stopped {
			r.err = errFor(r, de)
		}
		return stopped[0].err
	}
	what := "still in progress; its buffer stays in use until it completes"
	return errFor(running[0], &DeadlineError{Ranks: ranks, Any: anySrc && len(ranks) == 0, What: what, Cause: ctx.Err()})
}

// WaitAll waits for every request. It returns the first error among them
// (in slice order); when ctx ends first, the error names every rank whose
// request had not completed, and the requests are canceled or left
// pending as Wait does. Nil entries are skipped.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var ep *Endpoint
	for _, r := range reqs {
		if r != nil {
			ep = r.ep
			break
		}
	}
	if ep == nil {
		return nil
	}
	all := func() bool {
		for _, r := range reqs {
			if r != nil && !r.done.Load() {
				return false
			}
		}
		return true
	}
	if !ep.poll(ctx, all) {
		ch := make(chan struct{}, 1)
		for !all() {
			ep.mu.Lock()
			for _, r := range reqs {
				if r != nil && !r.done.Load() {
					r.notify = ch
				}
			}
			ep.mu.Unlock()
			if all() {
				break
			}
			ep.handOff()
			select {
			case <-ch:
			case <-ctx.Done():
				if err := ep.expire(ctx, reqs); err != nil {
					return err
				}
			}
		}
	}
	for _, r := range reqs {
		if r != nil && r.err != nil {
			return r.err
		}
	}
	return nil
}

// WaitAny waits until one of reqs completes and returns its index, status
// and error. Nil entries are skipped; with no non-nil entry it returns -1.
// When ctx ends first nothing is canceled and the error wraps ctx.Err().
func WaitAny(ctx context.Context, reqs ...*Request) (int, Status, error) {
	var ep *Endpoint
	for _, r := range reqs {
		if r != nil {
			ep = r.ep
			break
		}
	}
	if ep == nil {
		return -1, Status{}, nil
	}
	which := -1
	anyDone := func() bool {
		for i, r := range reqs {
			if r != nil && r.done.Load() {
				which = i
				return true
			}
		}
		return false
	}
	switch {
	case ep.poll(ctx, anyDone):
	case len(reqs) == 1:
		// One request: block as Wait does (in the CQ's own wait, which
		// drives the provider on this goroutine: no hand-off to the
		// background goroutine and back), but without its cancel.
		if err := ep.blockFor(ctx, reqs[0], true); err != nil {
			return -1, Status{}, &Error{Op: "WaitAny", Rank: ep.rank, Peer: NoPeer, Tag: NoTag, Err: ctx.Err()}
		}
		which = 0
	default:
		ch := make(chan struct{}, 1)
		for !anyDone() {
			ep.mu.Lock()
			for _, r := range reqs {
				if r != nil {
					r.notify = ch
				}
			}
			ep.mu.Unlock()
			if anyDone() {
				break
			}
			ep.handOff()
			select {
			case <-ch:
			case <-ctx.Done():
				return -1, Status{}, &Error{Op: "WaitAny", Rank: ep.rank, Peer: NoPeer, Tag: NoTag, Err: ctx.Err()}
			}
		}
	}
	r := reqs[which]
	return which, r.status, r.err
}

func asVerbsError(err error, target **verbs.Error) bool { return errors.As(err, target) }
