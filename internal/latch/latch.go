package latch

import "sync/atomic"

// Latch is a one-shot event (see the package doc).
type Latch struct {
	set atomic.Bool
	// ch is made by the first Chan before Set, and closed by the Set that
	// sets the latch.
	ch atomic.Pointer[chan struct{}]
}

// closed is what Chan returns once the latch is set.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Set sets the latch and closes the channel Chan made, if any; it reports
// whether this call was the one that set it.
func (l *Latch) Set() bool {
	if l.set.Load() || l.set.Swap(true) {
		return false
	}
	// Set stores set, then loads ch; Chan stores ch, then loads set: one
	// of them sees the other's store, so no channel is left open.
	if p := l.ch.Load(); p != nil {
		close(*p)
	}
	return true
}

// IsSet reports whether the latch is set.
func (l *Latch) IsSet() bool { return l.set.Load() }

// Chan returns a channel that is closed once the latch is set (at once
// when it is).
func (l *Latch) Chan() <-chan struct{} {
	if l.set.Load() {
		return closed
	}
	p := l.ch.Load()
	if p == nil {
		c := make(chan struct{})
		if l.ch.CompareAndSwap(nil, &c) {
			p = &c
		} else {
			p = l.ch.Load()
		}
	}
	if l.set.Load() {
		return closed
	}
	return *p
}
