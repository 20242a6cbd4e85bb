package p2p

import (
	"context"
	"sync"
	"time"
)

// waker is the context a waitCQ blocks in, so that whoever completes the
// request can interrupt the CQ's Wait. It ends when woken or when the
// caller's context (its parent) ends. Unlike a context.WithCancel per wait
// (two allocations and the parent's children updated twice, in about one
// wait per rank of every general-path call) it is reused: the endpoint
// keeps the ones its waits are done with, and a wait nobody interrupted
// leaves its channel for the next. It registers with a parent that can end
// only when a provider asks for Done or AfterFunc, which providers do only
// before they sleep: a wait whose completion comes while the provider
// polls (the common case) allocates nothing and touches nothing of the
// parent's but its Err.
//
// Concurrency: Done, Err, Value, Deadline, AfterFunc and wake may be
// called from any goroutine; reset only by its owner, once no CQ Wait
// holds it. A provider that registers AfterFunc must stop the
// registration before its Wait returns (the tcp provider's watch does);
// reset drops what is left, so a stop of an earlier use finds nothing, and
// waits for the registrations a wake started to finish: the context
// package's ask the waker's Err, which must still say it ended.
type waker struct {
	parent context.Context
	mu     sync.Mutex
	ch     chan struct{} // closed by wake; made on demand, kept across uses
	woken  bool
	afters map[*afterReg]struct{} // this use's registrations
	use    uint64                 // counts uses: a parent's end wakes only its own
	unlink func() bool            // ends this use's registration with parent; nil if none
	// running counts the registrations a wake started that have not
	// returned; reset waits on idle until there are none.
	running int
	idle    sync.Cond
}

// afterReg is one AfterFunc registration on a waker.
type afterReg struct{ f func() }

var _ context.Context = (*waker)(nil)

// Deadline is the parent's.
func (w *waker) Deadline() (time.Time, bool) { return w.getParent().Deadline() }

// Value is the parent's. The context package asks for it from goroutines of
// its own (Cause, in the AfterFunc a derived context registers), which may
// run as the owner resets the waker: hence the lock.
func (w *waker) Value(key any) any { return w.getParent().Value(key) }

func (w *waker) getParent() context.Context {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.parent
}

// Done returns a channel that is closed once the waker is woken or its
// parent ends.
func (w *waker) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	w.linkLocked()
	return w.ch
}

// Err is the parent's error once it has ended, context.Canceled once the
// waker is woken, else nil.
func (w *waker) Err() error {
	w.mu.Lock()
	parent, woken := w.parent, w.woken
	w.mu.Unlock()
	if err := parent.Err(); err != nil {
		return err
	}
	if woken {
		return context.Canceled
	}
	return nil
}

// linkLocked registers the waker with a parent that can end, once a use:
// the parent's end wakes it, so that Done closes and the AfterFunc
// registrations run. The caller holds w.mu.
func (w *waker) linkLocked() {
	if w.unlink != nil || w.woken || w.parent.Done() == nil {
		return
	}
	use := w.use
	w.unlink = context.AfterFunc(w.parent, func() { w.wakeUse(use) })
}

// wakeUse wakes the waker if it is still in the use the parent's
// registration was made for (a parent may end as that use is reset).
func (w *waker) wakeUse(use uint64) {
	w.mu.Lock()
	if w.use == use {
		w.startLocked(w.wakeLocked())
	}
	w.mu.Unlock()
}

// AfterFunc runs f in its own goroutine once the waker is woken, as
// context.AfterFunc does (which calls this, rather than starting a
// goroutine to watch Done); stop unregisters it and reports whether it
// did so before f was started.
func (w *waker) AfterFunc(f func()) (stop func() bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.woken {
		w.startLocked([]func(){f})
		return func() bool { return false }
	}
	r := &afterReg{f: f}
	if w.afters == nil {
		w.afters = map[*afterReg]struct{}{}
	}
	w.afters[r] = struct{}{}
	w.linkLocked()
	return func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		if _, ok := w.afters[r]; !ok {
			return false
		}
		delete(w.afters, r)
		return true
	}
}

// wake ends the waker's use: Done is closed, Err says Canceled, and the
// AfterFunc registrations run. Later calls do nothing.
func (w *waker) wake() {
	w.mu.Lock()
	w.startLocked(w.wakeLocked())
	w.mu.Unlock()
}

// startLocked runs each of fs in its own goroutine, counted in running
// until it returns. The caller holds w.mu.
func (w *waker) startLocked(fs []func()) {
	for _, f := range fs {
		w.running++
		go func() {
			f()
			w.mu.Lock()
			if w.running--; w.running == 0 {
				w.idle.Broadcast()
			}
			w.mu.Unlock()
		}()
	}
}

// wakeLocked is wake's work under w.mu: it returns the registrations to
// run (startLocked).
func (w *waker) wakeLocked() []func() {
	if w.woken {
		return nil
	}
	w.woken = true
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	close(w.ch)
	var fs []func()
	for r := range w.afters {
		fs = append(fs, r.f)
		delete(w.afters, r)
	}
	return fs
}

// reset makes the waker ready for another use under parent: not woken, a
// fresh channel if the last use closed it, no registrations (its own with
// the last parent included).
func (w *waker) reset(parent context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	// A registration the last use's wake started asks Err (the context
	// package's cancel of a derived context panics if it finds none): it
	// must see this use ended. (A zero waker's reset sets the Cond's lock.)
	w.idle.L = &w.mu
	for w.running > 0 {
		w.idle.Wait()
	}
	w.unlinkLocked()
	w.use++
	w.parent = parent
	clear(w.afters)
	if w.woken {
		w.woken, w.ch = false, nil
	}
}

func (w *waker) unlinkLocked() {
	if w.unlink != nil {
		w.unlink()
		w.unlink = nil
	}
}

// getWakerLocked returns a waker for a wait under parent from the
// endpoint's spares, or a new one. The caller holds ep.mu.
func (ep *Endpoint) getWakerLocked(parent context.Context) *waker {
	var w *waker
	if n := len(ep.wakers); n > 0 {
		w, ep.wakers = ep.wakers[n-1], ep.wakers[:n-1]
	} else {
		w = &waker{}
	}
	w.reset(parent)
	return w
}

// putWakerLocked keeps w for a later wait (a few: as many as goroutines
// wait at once, usually one or two). The caller holds ep.mu, and no CQ
// Wait holds w any more.
func (ep *Endpoint) putWakerLocked(w *waker) {
	// A use under Background, so that a spare neither holds the caller's
	// context nor stays registered with it, to be woken by its end.
	w.reset(context.Background())
	if len(ep.wakers) < maxSpareWakers {
		ep.wakers = append(ep.wakers, w)
	}
}

const maxSpareWakers = 8
