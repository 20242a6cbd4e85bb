package lightmu

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/futex"
)

// Mutex is a mutual-exclusion lock (see the package doc).
type Mutex struct {
	state uint32 // 1 while held; released by release (a plain store on amd64)
	// starving is 1 while a waiter that has waited starveAfter has first
	// claim: nobody else takes the lock then.
	starving uint32
	waiters  atomic.Int32 // goroutines parked or about to park
	wake     atomic.Pointer[chan struct{}]
}

// The waiting phases (see the package doc). The spins cost nothing the
// holder needs on another CPU; the yields let a holder that waits for this
// thread's P run; the settle outlasts any store buffer's drain by far.
var (
	spins       = 64
	yields      = 16
	settle      = 2 * time.Microsecond
	parkMax     = time.Millisecond
	starveAfter = time.Millisecond
)

// Lock locks m, waiting until it is free.
func (m *Mutex) Lock() {
	if atomic.LoadUint32(&m.starving) == 0 && atomic.CompareAndSwapUint32(&m.state, 0, 1) {
		return
	}
	m.lockSlow()
}

// TryLock locks m if it is free now and reports whether it did.
func (m *Mutex) TryLock() bool { return m.try(false) }

// Unlock unlocks m. It panics if m is not locked. As with sync.Mutex, any
// goroutine may unlock a Mutex another one locked.
func (m *Mutex) Unlock() {
	if atomic.LoadUint32(&m.state) != 1 {
		panic("lightmu: unlock of unlocked mutex")
	}
	release(&m.state)
	if m.waiters.Load() != 0 {
		m.wakeOne()
	}
}

// try takes m if it is free and nobody else has first claim on it.
func (m *Mutex) try(claimed bool) bool {
	if !claimed && atomic.LoadUint32(&m.starving) != 0 {
		return false
	}
	return atomic.LoadUint32(&m.state) == 0 && atomic.CompareAndSwapUint32(&m.state, 0, 1)
}

func (m *Mutex) lockSlow() {
	for i := range spins + yields {
		if m.try(false) {
			return
		}
		if i >= spins {
			runtime.Gosched()
		}
	}
	ch := m.wakeChan()
	var t *time.Timer
	start := time.Now()
	claimed := false
	for {
		if !claimed && time.Since(start) >= starveAfter && atomic.CompareAndSwapUint32(&m.starving, 0, 1) {
			claimed = true
		}
		if claimed {
			// Nobody else takes the lock now: wait for the holder's
			// Unlock without parking, which another waiter's token could
			// outlast.
			for j := 1; !m.try(true); j++ {
				runtime.Gosched()
				if j%16 == 0 {
					futex.Yield() // the holder may be another thread on this CPU
				}
			}
			atomic.StoreUint32(&m.starving, 0)
			if t != nil {
				t.Stop()
			}
			return
		}
		m.waiters.Add(1)
		got := m.settleFor()
		if !got {
			if t == nil {
				t = time.NewTimer(parkMax)
			} else {
				t.Reset(parkMax)
			}
			select {
			case <-ch:
			case <-t.C:
			}
			got = m.try(false)
		}
		m.waiters.Add(-1)
		if got {
			if t != nil {
				t.Stop()
			}
			return
		}
	}
}

// settleFor polls m for settle after the waiter counted itself: an Unlock
// whose load of the count came before the count's increment has its store
// visible by then.
func (m *Mutex) settleFor() bool {
	end := time.Now().Add(settle)
	for i := 1; ; i++ {
		if m.try(false) {
			return true
		}
		if i%32 == 0 && !time.Now().Before(end) {
			return false
		}
	}
}

// wakeOne lets one parked waiter (if any) try again.
func (m *Mutex) wakeOne() {
	if p := m.wake.Load(); p != nil {
		select {
		case *p <- struct{}{}:
		default: // a token is there already
		}
	}
}

// wakeChan is m's wake-up channel, made by the first waiter that parks.
func (m *Mutex) wakeChan() chan struct{} {
	if p := m.wake.Load(); p != nil {
		return *p
	}
	c := make(chan struct{}, 1)
	if m.wake.CompareAndSwap(nil, &c) {
		return c
	}
	return *m.wake.Load()
}
