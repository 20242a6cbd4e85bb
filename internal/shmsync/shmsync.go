package shmsync

import (
	"context"
	"math"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/internal/futex"
)

// Policy is how a waiter waits: it polls its condition for Spin, then
// polls between yields of the CPU until Spin+Yield, then sleeps on the
// Bell, at most Nap at a time.
type Policy struct {
	// Spin is how long the waiter polls without giving the CPU away: a
	// writer on another core answers within a microsecond or two, far
	// sooner than a futex wake-up (tens of microseconds).
	Spin time.Duration
	// Yield is how long it then polls between yields: with more waiters
	// than cores, the writer may need this core. Forever never sleeps.
	Yield time.Duration
	// Nap bounds each sleep (0: DefaultNap), so that the waiter re-checks
	// what nobody rings for (stop).
	Nap time.Duration
	// Gosched yields to the goroutines of this process (runtime.Gosched)
	// instead of the CPU (sched_yield): for writers that are goroutines of
	// the same process.
	Gosched bool
	// CheckEvery is how many polls go between looks at the clock and at
	// stop while polling (0: 32). A stop that costs more than a few polls
	// (one load per rank of a group) wants more.
	CheckEvery int
}

// Forever as Policy.Yield makes a waiter that never sleeps.
const Forever time.Duration = math.MaxInt64

// DefaultNap is the longest sleep when Policy.Nap is 0.
const DefaultNap = time.Second

// defaultCheckEvery is Policy.CheckEvery's default: reading the clock
// costs about as much as a few dozen polls of a cached line.
const defaultCheckEvery = 32

// SleepsAfter is how long a waiter polls before it sleeps.
func (p Policy) SleepsAfter() time.Duration {
	if p.Yield >= Forever-p.Spin {
		return Forever
	}
	return p.Spin + p.Yield
}

func (p Policy) nap() time.Duration {
	if p.Nap <= 0 {
		return DefaultNap
	}
	return p.Nap
}

func (p Policy) yield() {
	if p.Gosched {
		runtime.Gosched()
	} else {
		futex.Yield()
	}
}

// Poll runs the spin and yield phases: it returns true when ready held,
// an error when stop (checked every CheckEvery polls; nil means none) or ctx ended the wait, and false with
// no error when the waiter should sleep now. stop returns the error that
// ends the wait, nil to go on.
func (p Policy) Poll(ctx context.Context, ready func() bool, stop func() error) (bool, error) {
	if ready() {
		return true, nil
	}
	// The clock starts at the first check: a wait that ends within a few
	// dozen polls (the common one) never reads it.
	var start time.Time
	sleepAt := p.SleepsAfter()
	every := p.CheckEvery
	if every <= 0 {
		every = defaultCheckEvery
	}
	for {
		for range every {
			if ready() {
				return true, nil
			}
		}
		if err := over(ctx, stop); err != nil {
			return false, err
		}
		if start.IsZero() {
			start = time.Now()
		}
		w := time.Since(start)
		if w >= sleepAt {
			return false, nil
		}
		if w >= p.Spin {
			p.yield()
		}
	}
}

// over is why a wait must end other than by its condition, or nil.
func over(ctx context.Context, stop func() error) error {
	if stop != nil {
		if err := stop(); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Bell is a futex word and a count of its sleepers, in memory that the
// waiters and the writers map (see the package doc for the protocol).
// The zero Bell is not usable.
type Bell struct {
	seq, sleepers *uint32
}

// BellSize is the bytes of a Bell in memory (BellAt).
const BellSize = 8

// NewBell is the Bell over two words: seq is the futex word, sleepers
// counts the waiters about to sleep on it.
func NewBell(seq, sleepers *uint32) Bell { return Bell{seq: seq, sleepers: sleepers} }

// BellAt is the Bell at mem[off:off+8] (seq, then sleepers); off must be a
// multiple of 4 from a 4-byte aligned mem.
func BellAt(mem []byte, off int) Bell {
	b := mem[off : off+BellSize : off+BellSize]
	if uintptr(unsafe.Pointer(&b[0]))%4 != 0 {
		panic("shmsync: a Bell's words must be 4-byte aligned")
	}
	return Bell{seq: (*uint32)(unsafe.Pointer(&b[0])), sleepers: (*uint32)(unsafe.Pointer(&b[4]))}
}

// Reset zeroes the sleepers count: for the owner of the memory, before
// any waiter uses it.
func (b Bell) Reset() { atomic.StoreUint32(b.sleepers, 0) }

// Sleepers is how many waiters are asleep on the bell or about to be.
func (b Bell) Sleepers() uint32 { return atomic.LoadUint32(b.sleepers) }

// Ring wakes the bell's sleepers, if any. The caller has just published
// what they wait for with an atomic store (see the package doc): that
// store, then this load of the sleepers count, is what makes it safe to
// skip the system call when nobody sleeps.
func (b Bell) Ring() {
	if atomic.LoadUint32(b.sleepers) != 0 {
		b.Kick()
	}
}

// Kick wakes the bell's sleepers unconditionally (a close, a cancellation).
func (b Bell) Kick() {
	atomic.AddUint32(b.seq, 1)
	futex.Wake(b.seq)
}

// Wait waits until ready holds: p.Poll, then Sleep.
func (b Bell) Wait(ctx context.Context, ready func() bool, stop func() error, p Policy) error {
	if ok, err := p.Poll(ctx, ready, stop); ok || err != nil {
		return err
	}
	return b.Sleep(ctx, ready, stop, p.nap())
}

// Sleep sleeps on the bell until ready holds (nil), stop returns an error
// or ctx ends (that error), re-checking at least every nap. Cancelling ctx
// kicks the bell; Sleep returns only after that kick is over, so the
// caller may unmap the bell's memory once Sleep has returned.
func (b Bell) Sleep(ctx context.Context, ready func() bool, stop func() error, nap time.Duration) error {
	if nap <= 0 {
		nap = DefaultNap
	}
	if ctx.Done() != nil {
		kicked := make(chan struct{})
		disarm := context.AfterFunc(ctx, func() {
			b.Kick()
			close(kicked)
		})
		defer func() {
			if !disarm() {
				<-kicked
			}
		}()
	}
	for {
		atomic.AddUint32(b.sleepers, 1) // A1
		s := atomic.LoadUint32(b.seq)   // A2: before the re-check
		if ready() {                    // A3
			atomic.AddUint32(b.sleepers, ^uint32(0))
			return nil
		}
		if err := over(ctx, stop); err != nil {
			atomic.AddUint32(b.sleepers, ^uint32(0))
			return err
		}
		futex.Wait(b.seq, s, nap) // A4
		atomic.AddUint32(b.sleepers, ^uint32(0))
	}
}
