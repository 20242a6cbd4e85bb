package p2p

import (
	"context"
	"sync"
	"time"
)

// waker is the context a waitCQ blocks in when the caller's context can
// never end (its Done is nil: Background, or WithoutCancel), so that
// whoever completes the request can still interrupt the CQ's Wait. Unlike
// context.WithCancel it is reused: the endpoint keeps the ones its waits
// are done with, and a wait nobody interrupted leaves its channel for the
// next, so that a blocking wait allocates nothing (WithCancel cost two
// allocations and about 0.3 µs a wait, and 2-rank calls of the general
// path block in one wait each).
//
// Concurrency: Done, Err, Value, Deadline, AfterFunc and wake may be
// called from any goroutine; reset only by its owner, once no CQ Wait
// holds it. A provider that registers AfterFunc must stop the
// registration before its Wait returns (the tcp provider's watch does);
// reset drops what is left, so a stop of an earlier use finds nothing.
type waker struct {
	parent context.Context
	mu     sync.Mutex
	ch     chan struct{} // closed by wake; made on demand, kept across uses
	woken  bool
	afters map[*afterReg]struct{} // this use's registrations
}

// afterReg is one AfterFunc registration on a waker.
type afterReg struct{ f func() }

var _ context.Context = (*waker)(nil)

// Deadline is the parent's (a context whose Done is nil has none, but
// one may still carry a deadline it does not enforce).
func (w *waker) Deadline() (time.Time, bool) { return w.parent.Deadline() }

func (w *waker) Value(key any) any { return w.parent.Value(key) }

// Done returns a channel that is closed once the waker is woken.
func (w *waker) Done() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

// Err is context.Canceled once the waker is woken, else nil.
func (w *waker) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.woken {
		return context.Canceled
	}
	return nil
}

// AfterFunc runs f in its own goroutine once the waker is woken, as
// context.AfterFunc does (which calls this, rather than starting a
// goroutine to watch Done); stop unregisters it and reports whether it
// did so before f was started.
func (w *waker) AfterFunc(f func()) (stop func() bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.woken {
		go f()
		return func() bool { return false }
	}
	r := &afterReg{f: f}
	if w.afters == nil {
		w.afters = map[*afterReg]struct{}{}
	}
	w.afters[r] = struct{}{}
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
	if w.woken {
		w.mu.Unlock()
		return
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
	w.mu.Unlock()
	for _, f := range fs {
		go f()
	}
}

// reset makes the waker ready for another use under parent: not woken, a
// fresh channel if the last use closed it, no registrations.
func (w *waker) reset(parent context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.parent = parent
	clear(w.afters)
	if w.woken {
		w.woken, w.ch = false, nil
	}
}

// getWakerLocked returns a waker for a wait under parent (whose Done is nil)
// from the endpoint's spares, or a new one. The caller holds ep.mu.
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
	if len(ep.wakers) < maxSpareWakers {
		w.parent = context.Background()
		ep.wakers = append(ep.wakers, w)
	}
}

const maxSpareWakers = 8
