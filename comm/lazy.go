package comm

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Small non-blocking collectives start lazily. A goroutine per call made
// an 8-byte Iallreduce followed by its Wait cost 1.6 µs between two ranks
// over shm where the blocking Allreduce took 0.5 (Open MPI's Iallreduce
// and Wait: 0.5): the go statement readies the goroutine and, with a P to
// spare, the runtime wakes a thread for it, on the CPU the other rank
// needs, even when Wait comes at once and runs the call itself
// (runInline). A time.AfterFunc per call cost as much. So a non-blocking
// collective of at most lazyStartMax bytes is only queued by its start:
// whoever waits for it or tests it first runs it (Wait, as before) or
// gives it a goroutine (Test, WaitAny, a Wait with another ctx), a later
// blocking collective of the communicator runs it first, and otherwise
// the world's lazy worker gives it a goroutine once it has waited a whole
// nap unclaimed (between lazyNapMin and twice lazyNapMax). Such a call's
// peers wait that much longer for this rank's part when its program starts
// it and then computes without testing it; MPI promises no progress there
// at all. Larger calls, whose time in the background pays for the
// goroutine, get one at once.
//
// The worker naps as Persistent's does: kicked by the first lazy start
// after it fell asleep, it wakes every lazyNapMin, its naps doubling up to
// lazyNapMax while it finds nothing to start and shrinking back once it
// starts a call, and sleeps again after lazyIdle without pending calls;
// so a loop of starts and waits kicks it once, not every call.
var (
	lazyNapMin = 50 * time.Microsecond // variables for tests
	lazyNapMax = 500 * time.Microsecond
)

const lazyIdle = 10 * time.Millisecond

// lazyStartMax is the largest call, in bytes of the caller's buffer, that
// starts lazily (a variable for tests).
var lazyStartMax = 64 << 10

// lazyStarts is a world's queue of lazily started collectives.
type lazyStarts struct {
	mu      sync.Mutex
	pending []*Request // started lazily, oldest first; claimed ones leave at the next look
	asleep  bool       // the worker waits for a kick
	kick    chan struct{}
}

// nbytes is the size of s in bytes.
func nbytes[T Element](s []T) int { return len(s) * sizeOf[T]() }

// add takes r's turn in its communicator's queue and queues r, which
// nobody can have claimed, waking the worker if it sleeps. Every lazy
// start takes its turn under l.mu, so the queue holds a communicator's
// requests in the order of their turns.
func (l *lazyStarts) add(r *Request) {
	r.lazy = true
	l.mu.Lock()
	r.turn = r.c.q.take()
	r.c.lazyN.Add(1)
	l.pruneLocked()
	l.pending = append(l.pending, r)
	kick := l.asleep
	l.asleep = false
	l.mu.Unlock()
	if kick {
		nudge(l.kick)
	}
}

// nudge wakes the worker that waits on kick, a channel of one slot,
// without blocking when a kick is pending already (the lazy worker's,
// Persistent's).
func nudge(kick chan struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// pruneLocked drops the claimed requests at the head of the queue: in a
// loop of starts and waits that is all of them, and the queue stays short.
func (l *lazyStarts) pruneLocked() {
	i := 0
	for i < len(l.pending) && l.pending[i].claimed.Load() {
		l.pending[i] = nil
		i++
	}
	if i > 0 {
		n := copy(l.pending, l.pending[i:])
		clear(l.pending[n:])
		l.pending = l.pending[:n]
	}
}

// claimBefore claims, in turn order, c's lazily started requests that
// nobody has claimed and whose turns come before r's: whoever runs r must
// see them run first. None when r is not queued.
func (l *lazyStarts) claimBefore(c *Comm, r *Request) []*Request {
	// When c's only unclaimed lazy request is r itself, none can come
	// before it (one started meanwhile comes after it).
	if n := c.lazyN.Load(); n == 0 || n == 1 && r.lazy && !r.claimed.Load() {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	i := slices.Index(l.pending, r)
	if i < 0 {
		return nil
	}
	return l.claimLocked(c, l.pending[:i])
}

func (l *lazyStarts) claimLocked(c *Comm, ps []*Request) []*Request {
	var out []*Request
	for _, p := range ps {
		if p.c == c && p.claim() {
			out = append(out, p)
		}
	}
	return out
}

// takeAfterLazy takes a blocking collective's turn and first runs c's
// lazily started requests, all of whose turns come before it (they were
// taken under the same lock).
func (c *Comm) takeAfterLazy(ctx context.Context) chan struct{} {
	l := &c.w.lazy
	l.mu.Lock()
	turn := c.q.take()
	earlier := l.claimLocked(c, l.pending)
	l.mu.Unlock()
	c.runAll(ctx, earlier)
	return turn
}

// runAll runs claimed requests in turn order: on this goroutine when ctx
// ends no sooner than each one's own, else each on a goroutine of its own
// (a Wait must return when its ctx ends).
func (c *Comm) runAll(ctx context.Context, ps []*Request) {
	for _, p := range ps {
		if p.runsUnder(ctx) {
			p.waited.Set()
			p.inline = true
			p.run()
		} else {
			go p.run()
		}
	}
}

// runsUnder says whether a goroutine waiting under ctx may run r itself:
// when ctx ends no sooner than r's own start ctx (it is that ctx, or one
// that never ends), so that the wait still returns when ctx ends.
func (r *Request) runsUnder(ctx context.Context) bool {
	d := ctx.Done()
	return d == nil || d == r.startDone
}

// claim takes r for running; false when somebody already has.
func (r *Request) claim() bool {
	if !r.claimed.CompareAndSwap(false, true) {
		return false
	}
	if r.lazy {
		r.c.lazyN.Add(-1)
	}
	return true
}

// launch gives r a goroutine now unless somebody has claimed it, after the
// requests of its communicator that started before it: for a Test or a
// WaitAny, which must not run it themselves.
func (r *Request) launch() {
	if !r.lazy || r.claimed.Load() {
		return
	}
	earlier := r.c.w.lazy.claimBefore(r.c, r)
	mine := r.claim()
	if !mine && len(earlier) == 0 {
		return
	}
	go func() {
		for _, p := range earlier {
			p.run()
		}
		if mine {
			r.run()
		}
	}()
}

// lazyWorker starts the calls nobody has claimed for a whole nap, until
// the world closes; then it starts every one left, which fail at once.
func (w *world) lazyWorker() {
	defer w.watchWG.Done()
	l := &w.lazy
	t := time.NewTimer(lazyNapMin)
	defer t.Stop()
	nap, idle := lazyNapMin, time.Duration(0)
	asleep := true
	for {
		if asleep {
			select {
			case <-l.kick:
			case <-w.stop:
				l.startAll()
				return
			}
			nap, idle = lazyNapMin, 0
		} else {
			t.Reset(nap)
			select {
			case <-t.C:
			case <-w.stop:
				l.startAll()
				return
			}
		}
		started, left := l.startAged()
		switch {
		case started:
			nap, idle = lazyNapMin, 0
		case left:
			nap = min(2*nap, lazyNapMax)
		default:
			idle += nap
			nap = min(2*nap, lazyNapMax)
		}
		asleep = false
		if idle >= lazyIdle {
			l.mu.Lock()
			if len(l.pending) == 0 {
				l.asleep, asleep = true, true
			}
			l.mu.Unlock()
		}
	}
}

// startAged gives a goroutine to each request still unclaimed that the
// previous look saw already, and marks the rest seen. It reports whether
// it started any and whether any are left.
func (l *lazyStarts) startAged() (started, left bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pruneLocked()
	keep := l.pending[:0]
	for _, p := range l.pending {
		switch {
		case p.claimed.Load():
		case p.seen && p.claim():
			started = true
			go p.run()
		default:
			p.seen = true
			keep = append(keep, p)
		}
	}
	clear(l.pending[len(keep):])
	l.pending = keep
	return started, len(keep) > 0
}

// startAll gives every unclaimed request a goroutine (the world is
// closing: they fail at once).
func (l *lazyStarts) startAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, p := range l.pending {
		if p.claim() {
			go p.run()
		}
	}
	clear(l.pending)
	l.pending = l.pending[:0]
}
