package collectives

import (
	"context"
	"time"

	"github.com/rdmago/rdmago/internal/latch"
)

// Background collectives.
//
// A non-blocking collective (comm's Iallreduce and the like) runs in its
// own goroutine while the caller goes on computing. Waits that spin there
// take the CPU from that computation: a peer that is still computing makes
// the goroutine spin, then yield, then sleep in futex(2), which with
// GOMAXPROCS 1 (a rank bound to one core) also keeps the only P from the
// caller for up to 10 ms. A 2-4 ms allreduce of 16 MiB started before
// 50 ms of work made that work take 76-102 ms on two ranks.
//
// A call whose ctx comes from a Waited's Context therefore spins only 20 µs, then
// sleeps between checks (timer naps of 20 µs growing to 1 ms, which park
// the goroutine), and its point-to-point waits park until the endpoint's
// progress completes them (PassiveWaiter), until its Waited is set, when
// somebody waits for the result: from then on it waits like a blocking
// call (a nap in progress ends at once).

type backgroundKey struct{}

// Waited tells a background collective that somebody waits for its
// result. The zero value is ready to use; its methods may be called from
// any goroutine.
type Waited struct {
	// l is set once somebody waits; its channel is made only by a nap
	// that needs it (wake), so a non-blocking call started and waited for
	// at once allocates nothing for it.
	l      latch.Latch
	parent context.Context
}

// NewWaited returns a Waited that has not been set.
func NewWaited() *Waited { return new(Waited) }

// Set marks the collective waited for and wakes its nap; it may be called
// any number of times, from any goroutine.
func (w *Waited) Set() { w.l.Set() }

// wake returns a channel closed once w is set.
func (w *Waited) wake() <-chan struct{} { return w.l.Chan() }

// Context returns a ctx for a collective that runs while its caller does
// other work: until w is set, the call's waits sleep rather than spin. The
// caller sets w once it blocks on the result. The ctx is w itself (no
// allocation), so it is valid as long as w is, and w makes one at a time
// (a later Context replaces the parent of the earlier one).
func (w *Waited) Context(ctx context.Context) context.Context {
	w.parent = ctx
	return (*waitedCtx)(w)
}

// waitedCtx is a Waited seen as the ctx that Context returns: its
// parent's, with the Waited under backgroundKey.
type waitedCtx Waited

func (c *waitedCtx) Deadline() (time.Time, bool) { return c.parent.Deadline() }
func (c *waitedCtx) Done() <-chan struct{}       { return c.parent.Done() }
func (c *waitedCtx) Err() error                  { return c.parent.Err() }

func (c *waitedCtx) Value(key any) any {
	if key == (backgroundKey{}) {
		return (*Waited)(c)
	}
	return c.parent.Value(key)
}

const (
	bgSpin   = 20 * time.Microsecond
	bgNapMin = 20 * time.Microsecond
	bgNapMax = time.Millisecond
)

// background reports whether the call's waits should sleep now.
func (c *call) background() bool {
	if !c.waitedKnown {
		c.waited, _ = c.parent.Value(backgroundKey{}).(*Waited)
		c.waitedKnown = true
	}
	return c.waited != nil && !c.waited.l.IsSet()
}

// waitReq waits for r: passively (parked until the endpoint's progress
// completes it) while the call runs in the background, else as r.Wait.
func (c *call) waitReq(r Request) (int, error) {
	if c.background() {
		if pw, ok := r.(PassiveWaiter); ok {
			return pw.WaitPassive(c.ctx)
		}
	}
	return r.Wait(c.ctx)
}

// shmNap is shmWait's background form: it checks cond between timer naps
// until cond holds (true), the call stops (an error), or somebody starts
// waiting for the call's result (false: wait the usual way from then on).
func (c *call) shmNap(peer int, cond func() bool) (bool, error) {
	// A peer a few microseconds behind is caught spinning, as a blocking
	// call would, without the cost of a timer and a goroutine switch.
	for start := time.Now(); time.Since(start) < bgSpin; {
		for range 32 {
			if cond() {
				return true, nil
			}
		}
	}
	c.armProbe()
	c.noteWait(peer)
	t := time.NewTimer(bgNapMin)
	defer t.Stop()
	wake := c.waited.wake()
	for nap := bgNapMin; c.background(); nap = min(2*nap, bgNapMax) {
		select {
		case <-t.C:
			t.Reset(min(2*nap, bgNapMax))
		case <-wake: // waited for: wait the usual way at once
		}
		if cond() {
			return true, nil
		}
		if err := c.shmStopped(peer); err != nil {
			return false, err
		}
	}
	return false, nil
}
