package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/internal/latch"
	"github.com/rdmago/rdmago/p2p"
)

// Status describes a received (or probed) message, in the communicator's
// numbering and in elements of the receive's type.
type Status struct {
	Source int // the sending rank
	Tag    int
	Count  int // elements received
}

// Send sends buf to rank dest with tag (0..MaxTag) and returns when buf may
// be reused: at once for a small message, after dest has taken the data
// for a large one. Messages from one rank to another with the same tag
// arrive in the order they were sent. When ctx ends before dest matched
// the message, the send is canceled and the error names dest.
func Send[T Element](ctx context.Context, c *Comm, buf []T, dest, tag int) error {
	if !c.peerOK(dest, tag, false) || ctx == nil {
		return c.argsErr("Send", dest, tag, false, ctx, false)
	}
	seq := c.p2p.begin(p2pSend, c.members[dest])
	err := c.user.Send(ctx, c.members[dest], tag, bytesOf(buf))
	c.p2p.end(seq)
	if err != nil {
		return c.wrap("Send", dest, tag, err)
	}
	return nil
}

// Recv receives a message from rank src (or AnySource) with tag (or
// AnyTag) into buf. A message longer than buf fails with ErrTruncated
// (the message is consumed; buf's contents are then unspecified); one that
// is not a whole number of T elements fails with ErrMismatch.
func Recv[T Element](ctx context.Context, c *Comm, buf []T, src, tag int) (Status, error) {
	if !c.peerOK(src, tag, true) || ctx == nil {
		return Status{}, c.argsErr("Recv", src, tag, true, ctx, false)
	}
	seq := c.p2p.begin(p2pRecv, c.worldOf(src))
	st, err := c.user.Recv(ctx, c.worldOf(src), tag, bytesOf(buf))
	c.p2p.end(seq)
	return c.status("Recv", src, tag, sizeOf[T](), st, err)
}

// Isend starts sending buf to dest with tag. buf must not be changed until
// the request completes. ctx bounds the send as it bounds Send: when it
// ends before dest matched the message, the request is canceled and
// completes with an error matching both ErrCanceled and ctx's error. A
// ctx that has already ended posts nothing.
func Isend[T Element](ctx context.Context, c *Comm, buf []T, dest, tag int) (*Request, error) {
	if !c.peerOK(dest, tag, false) || !ctxOK(ctx) {
		return nil, c.argsErr("Isend", dest, tag, false, ctx, true)
	}
	r, err := c.user.Isend(c.members[dest], tag, bytesOf(buf))
	if err != nil {
		return nil, c.wrap("Isend", dest, tag, err)
	}
	return newP2PRequest(ctx, c, "Isend", dest, tag, sizeOf[T](), r), nil
}

// Irecv starts receiving a message from src (or AnySource) with tag (or
// AnyTag) into buf, which belongs to the request until it completes. ctx
// bounds the receive as for Isend: when it ends before a message matched,
// the request completes with ErrCanceled and ctx's error.
func Irecv[T Element](ctx context.Context, c *Comm, buf []T, src, tag int) (*Request, error) {
	if !c.peerOK(src, tag, true) || !ctxOK(ctx) {
		return nil, c.argsErr("Irecv", src, tag, true, ctx, true)
	}
	r, err := c.user.Irecv(c.worldOf(src), tag, bytesOf(buf))
	if err != nil {
		return nil, c.wrap("Irecv", src, tag, err)
	}
	return newP2PRequest(ctx, c, "Irecv", src, tag, sizeOf[T](), r), nil
}

// checkCtx refuses a nil ctx and one that has already ended, naming the
// operation's peer and tag.
func (c *Comm) checkCtx(op string, peer, tag int, ctx context.Context) error {
	if ctx == nil {
		return c.opErr(op, peer, tag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if err := ctx.Err(); err != nil {
		return c.opErr(op, peer, tag, err)
	}
	return nil
}

// Probe waits until a message from src (or AnySource) with tag (or AnyTag)
// has arrived and returns its status (Count in elements of T) without
// receiving it. Another goroutine may receive it first; probe and receive
// from one goroutine, or use distinct tags.
func Probe[T Element](ctx context.Context, c *Comm, src, tag int) (Status, error) {
	if err := c.checkPeer("Probe", src, tag, true); err != nil {
		return Status{}, err
	}
	if ctx == nil {
		return Status{}, c.opErr("Probe", src, tag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	st, err := c.user.Probe(ctx, c.worldOf(src), tag)
	return c.status("Probe", src, tag, sizeOf[T](), st, err)
}

// Iprobe is Probe that does not wait: ok reports whether a message was
// there. A nil or ended ctx is an error, as for every other call.
func Iprobe[T Element](ctx context.Context, c *Comm, src, tag int) (st Status, ok bool, err error) {
	if err := c.checkPeer("Iprobe", src, tag, true); err != nil {
		return Status{}, false, err
	}
	if err := c.checkCtx("Iprobe", src, tag, ctx); err != nil {
		return Status{}, false, err
	}
	pst, ok, err := c.user.Iprobe(c.worldOf(src), tag)
	if err != nil || !ok {
		if err != nil {
			err = c.wrap("Iprobe", src, tag, err)
		}
		return Status{}, false, err
	}
	st, err = c.status("Iprobe", src, tag, sizeOf[T](), pst, nil)
	return st, err == nil, err
}

// Sendrecv sends send to dest and receives into recv from src at the same
// time, so that pairs of ranks can exchange without deadlock.
func Sendrecv[T Element](ctx context.Context, c *Comm, send []T, dest, sendTag int, recv []T, src, recvTag int) (Status, error) {
	rr, err := Irecv(ctx, c, recv, src, recvTag)
	if err != nil {
		return Status{}, err
	}
	if err := Send(ctx, c, send, dest, sendTag); err != nil {
		rr.Cancel()
		rr.Wait(context.WithoutCancel(ctx))
		return Status{}, err
	}
	return rr.Wait(ctx)
}

// checkPeer validates a peer and tag before anything reaches the endpoint,
// so that the error names them in the communicator's numbering.
func (c *Comm) checkPeer(op string, peer, tag int, recv bool) error {
	if c.peerOK(peer, tag, recv) {
		return nil
	}
	return c.peerErr(op, peer, tag, recv)
}

// peerOK is checkPeer's check alone, which inlines into the
// point-to-point calls: with p2p's checks inlined too, the 64 Irecvs of an
// OSU bw window (8 bytes, shm) took 1.24 µs against 1.58 through the calls.
func (c *Comm) peerOK(peer, tag int, recv bool) bool {
	return c != nil && !c.closed.Load() &&
		(uint(peer) < uint(c.size) || recv && peer == AnySource) &&
		(uint(tag) <= MaxTag || recv && tag == AnyTag)
}

// ctxOK is checkCtx's check alone (see peerOK).
func ctxOK(ctx context.Context) bool { return ctx != nil && ctx.Err() == nil }

// argsErr is the error of a point-to-point call whose arguments peerOK, or
// ctxOK (ended: whether an ended ctx is refused, as the non-blocking calls
// do, rather than only a nil one), refused: checkPeer's, else checkCtx's.
func (c *Comm) argsErr(op string, peer, tag int, recv bool, ctx context.Context, ended bool) error {
	if err := c.checkPeer(op, peer, tag, recv); err != nil {
		return err
	}
	if ended || ctx == nil {
		return c.checkCtx(op, peer, tag, ctx) // a nil ctx: its first check
	}
	return nil
}

// peerErr is checkPeer's error for a call that peerOK refused.
func (c *Comm) peerErr(op string, peer, tag int, recv bool) error {
	if err := c.check(op); err != nil {
		return err
	}
	if !(recv && peer == AnySource) && (peer < 0 || peer >= c.size) {
		return c.opErr(op, peer, tag, fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, peer, c.size))
	}
	if !(recv && tag == AnyTag) && (tag < 0 || tag > MaxTag) {
		return c.opErr(op, peer, tag, fmt.Errorf("%w: tag %d is not in [0, %d]", ErrInvalidTag, tag, MaxTag))
	}
	return nil
}

func (c *Comm) worldOf(r int) int {
	if r == AnySource {
		return p2p.AnySource
	}
	return c.members[r]
}

// status translates a p2p status to the communicator's numbering and to
// elements.
func (c *Comm) status(op string, peer, tag, esize int, st p2p.Status, err error) (Status, error) {
	if err != nil {
		return Status{}, c.wrap(op, peer, tag, err)
	}
	src := st.Source
	if src >= 0 && src < len(c.inv) {
		src = c.inv[src]
	}
	if esize == 1 { // bytes: no division
		return Status{Source: src, Tag: st.Tag, Count: st.Count}, nil
	}
	out := Status{Source: src, Tag: st.Tag, Count: st.Count / esize}
	if !wholeElements(st.Count, esize) {
		return out, c.opErr(op, src, st.Tag, &elementError{bytes: st.Count, esize: esize})
	}
	return out, nil
}

// wholeElements reports whether n bytes are whole elements of esize bytes.
func wholeElements(n, esize int) bool {
	if esize&(esize-1) == 0 { // every Element type's size: a mask, not a division
		return n&(esize-1) == 0
	}
	return n%esize == 0
}

// elementError is a received message that is not whole elements of the
// receive's type: sender and receiver disagree about the element type. It
// matches ErrMismatch, but is no collective's disagreement and says so.
type elementError struct{ bytes, esize int }

func (e *elementError) Error() string {
	return fmt.Sprintf("element type mismatch: the message has %d bytes, not a whole number of %d-byte elements", e.bytes, e.esize)
}

func (e *elementError) Is(target error) bool { return target == ErrMismatch }

// Request is a non-blocking operation in progress: a point-to-point
// Isend / Irecv, a non-blocking collective, a Batch's operations, or a
// persistent collective's current run (Persistent.Request). Wait, Test
// and Cancel may be
// called from any goroutine. The buffers given to the operation belong to
// it until it completes.
type Request struct {
	c     *Comm
	op    string
	peer  int
	tag   int
	esize int
	p     *p2p.Request    // point-to-point
	ctx   context.Context // the ctx it started with (point-to-point)
	hmu   sync.Mutex      // guards stop and hookRan
	stop  func() bool     // unregisters the start ctx's cancel hook (see startCtx)
	ran   bool            // the hook ran, or may still be running
	armed atomic.Bool     // stop was set once: disarm must look (under hmu)

	pers *Persistent // a persistent collective's request
	bat  *batch      // a batch of point-to-point operations

	// A non-blocking collective: its body, run by its goroutine or by a
	// Wait (runInline), whichever claims it first, with cctx, its start
	// ctx made background by waited; err is set before fin, whose
	// channel is made only for somebody who blocks on it.
	fn        func(ctx context.Context) error
	cctx      context.Context
	waited    collectives.Waited
	err       error
	fin       latch.Latch
	claimed   atomic.Bool
	startDone <-chan struct{}
	inline    bool          // a Wait ran it (for tests)
	turn      chan struct{} // its turn in the communicator's queue (nil: it had it at once)
	lazy      bool          // started lazily (lazy.go): nobody runs it until claimed
	seen      bool          // the lazy worker has seen it unclaimed (under the world's lazy.mu)
}

// Wait blocks until the request completes or ctx ends, and returns its
// status (for a receive: source, tag and element count). For a
// point-to-point request, ctx ending cancels it if it has not matched yet,
// and so does the end of the ctx it started with; a non-blocking
// collective keeps running (it is bounded by the ctx it was started with)
// and Wait may be called again.
func (r *Request) Wait(ctx context.Context) (Status, error) {
	if r == nil {
		return Status{}, nil
	}
	if ctx == nil {
		return Status{}, r.c.opErr(r.op, r.peer, r.tag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if r.p != nil {
		if r.p.Done() {
			// Nothing to wait for, so nothing for the start ctx to cancel
			// and no blocking call to record: a window of Isends finds
			// most of its requests done, and the record's atomics (and
			// the clock it read then) were a tenth of such a message's
			// cost.
			st, err := r.p.Wait(ctx)
			return r.p2pStatus(st, err)
		}
		r.startCtx(ctx)
		seq := r.c.p2p.begin(p2pWait, r.c.worldOf(r.peer))
		st, err := r.p.Wait(ctx)
		r.c.p2p.end(seq)
		return r.p2pStatus(st, err)
	}
	switch {
	case r.pers != nil:
		return Status{}, r.pers.Wait(ctx)
	case r.bat != nil:
		return Status{}, r.bat.wait(ctx)
	}
	// From now on the collective's waits may spin: its caller waits too.
	r.waited.Set()
	if r.runInline(ctx) {
		return Status{}, r.err
	}
	r.launch() // a ctx that may end sooner: it runs on a goroutine
	select {
	case <-r.fin.Chan():
		return Status{}, r.err
	case <-ctx.Done():
		return Status{}, r.c.opErr(r.op, NoPeer, NoTag, fmt.Errorf("waiting: %w", ctx.Err()))
	}
}

// Test reports whether the request has completed, without blocking; when
// it has, it returns what Wait would.
func (r *Request) Test() (Status, bool, error) {
	if r == nil {
		return Status{}, true, nil
	}
	if r.p != nil {
		r.startCtx(nil)
		st, done, err := r.p.Test()
		if !done {
			return Status{}, false, nil
		}
		s, err := r.p2pStatus(st, err)
		return s, true, err
	}
	switch {
	case r.pers != nil:
		done, err := r.pers.Test()
		return Status{}, done, err
	case r.bat != nil:
		done, err := r.bat.test()
		return Status{}, done, err
	}
	r.launch()
	if r.fin.IsSet() {
		return Status{}, true, r.err
	}
	return Status{}, false, nil
}

// Cancel asks for a point-to-point request that has not matched yet to
// complete with ErrCanceled (MPI_Cancel), or each of a batch's operations
// that has not; it does not wait. Collectives cannot be canceled (every
// rank takes part): Cancel does nothing for them.
func (r *Request) Cancel() {
	switch {
	case r == nil:
	case r.p != nil:
		r.p.Cancel()
	case r.bat != nil:
		r.bat.cancel()
	}
}

// Release hands a completed point-to-point request back for reuse, so that
// a loop of Isend and Irecv does not allocate (and make the garbage
// collector work) for every message. It does nothing for a request that
// has not completed, or for a non-blocking collective's. After Release the
// request must not be used again, and Release must not be called twice.
func (r *Request) Release() {
	if r == nil || r.p == nil || !r.p.Done() {
		return
	}
	// A cancel hook that has already started may still be about to call
	// Cancel on the p2p request: leave that one to the garbage collector
	// rather than recycle it under the hook. r goes back with its p2p
	// request (see newP2PRequest), so nothing may touch it after that.
	if p := r.p; !r.disarm() {
		r.ctx = nil // let it go while r waits for reuse
		p.Release()
	}
}

// ReleaseAll is Release for every request of reqs (nil entries, requests
// that have not completed and non-blocking collectives' are left alone),
// cheaper than one Release each: the point-to-point requests go back to
// their endpoint in one step (p2p.ReleaseAll). Every released entry of
// reqs must not be used again.
func ReleaseAll(reqs ...*Request) {
	var batch [64]*p2p.Request
	n := 0
	for _, r := range reqs {
		if r == nil || r.p == nil || !r.p.Done() {
			continue
		}
		if !r.disarm() {
			r.ctx = nil
			batch[n] = r.p
			if n++; n == len(batch) {
				p2p.ReleaseAll(batch[:n])
				n = 0
			}
		}
	}
	p2p.ReleaseAll(batch[:n])
}

// newP2PRequest is the request wrapping p2p request p: the one that came
// with p if p was recycled (p2p.Request.SetExt: the endpoint recycles
// both under the lock it takes anyway, where a sync.Pool of our own cost
// an atomic read-modify-write in each of Get and Put), else a new one.
// Its start ctx is enforced by Wait and Test (see startCtx), not by a
// callback registered here: that would allocate for every message of a
// loop of Isend/Irecv/Release.
func newP2PRequest(ctx context.Context, c *Comm, op string, peer, tag, esize int, p *p2p.Request) *Request {
	r, _ := p.Ext().(*Request)
	if r == nil {
		r = &Request{c: c, op: op, peer: peer, tag: tag, esize: esize, p: p, ctx: ctx}
		p.SetExt(r)
		return r
	}
	// A recycled wrapper is a point-to-point one whose Release cleared
	// what this does not set (ctx, stop, ran; the other kinds' fields
	// never held anything): set only the fields each message changes,
	// rather than clear and rewrite all of its three cache lines.
	r.c, r.op, r.peer, r.tag, r.esize, r.p, r.ctx = c, op, peer, tag, esize, p, ctx
	if r.armed.Load() {
		r.armed.Store(false)
	}
	return r
}

// startCtx applies a point-to-point request's start ctx before a wait on
// ctx: an ended one cancels the request (a no-op once it matched); one
// that may still end while ctx does not is hooked to cancel it meanwhile
// (the hook is removed by disarm).
func (r *Request) startCtx(ctx context.Context) {
	sd := r.ctx.Done()
	if sd == nil {
		return
	}
	if r.ctx.Err() != nil {
		r.p.Cancel()
		return
	}
	if ctx != nil && sd != ctx.Done() && !r.p.Done() {
		r.hmu.Lock()
		if r.stop == nil && !r.ran {
			r.armed.Store(true)
			r.stop = context.AfterFunc(r.ctx, r.p.Cancel)
		}
		r.hmu.Unlock()
	}
}

// disarm removes the start ctx's cancel hook, if there is one, and
// reports whether it ran (or may still be running).
func (r *Request) disarm() (ran bool) {
	if !r.armed.Load() {
		return false // never hooked: spare the mutex on every message
	}
	return r.unhook()
}

// unhook is disarm for a request whose hook was set: apart, so that
// disarm's check inlines into every wait and release.
func (r *Request) unhook() (ran bool) {
	r.hmu.Lock()
	defer r.hmu.Unlock()
	if r.stop != nil {
		r.ran = !r.stop()
		r.stop = nil
	}
	return r.ran
}

// p2pStatus is a completed point-to-point request's status. A request
// that its start ctx canceled reports that ctx's error too.
func (r *Request) p2pStatus(st p2p.Status, err error) (Status, error) {
	r.disarm()
	if err != nil && errors.Is(err, p2p.ErrCanceled) && r.ctx != nil && r.ctx.Err() != nil {
		err = fmt.Errorf("%w: %w", r.ctx.Err(), err)
	}
	return r.c.status(r.op, r.peer, r.tag, r.esize, st, err)
}

// WaitAll waits for every request (nil entries are skipped) and returns
// the first error in slice order, after all have completed or ctx ended.
func WaitAll(ctx context.Context, reqs ...*Request) error {
	var first error
	for _, r := range reqs {
		// A completed point-to-point request without a cancel hook, which
		// did not fail and moved whole elements, has nothing to report:
		// no Status to build (Wait's), so that a window of Irecvs costs
		// its receiver less (OSU's bw loop waits for 64 at a time, most
		// of them done by the first one's wait, and its receiver sets the
		// rate: 1.08-1.17x the rate at 1-256 B with the vCPUs close).
		if r != nil && r.p != nil && ctx != nil && !r.armed.Load() {
			if done, n, err := r.p.Outcome(); done && err == nil && wholeElements(n, r.esize) {
				continue
			}
		}
		if _, err := r.Wait(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}
