package lightmu

import (
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/shmsync"
)

// Biased is a Mutex with a favoured taker: one goroutine at a time at
// most, which the caller guarantees (comm's collective queue hands the
// favoured side from one call to the next), takes it with LockFavoured.
// Where the process has asymmetric fences (shmsync.Asymmetric), that
// takes and releases the lock with plain stores and a plain load, no
// locked instruction; every other taker (Lock) pays for that with a heavy
// fence (membarrier(2), microseconds), so it suits locks that the
// favoured side takes on every call and the others rarely.
//
// How: the favoured side stores held = 1 and then loads others; another
// taker adds itself to others, takes the Mutex, fences heavily and waits
// until held is 0. The heavy fence puts a full barrier into the favoured
// side's thread, so either the favoured side's load comes after it and
// sees others (and the favoured side backs off, to the Mutex), or its
// store of held is visible when the fence returns. Without asymmetric
// fences, or before Favour, both sides use the Mutex alone.
//
// The zero Biased is an unlocked Mutex with no favoured side; Favour
// turns it on, before the lock is used concurrently. LockFavoured and
// UnlockFavoured pair up on the favoured side, Lock and Unlock on the
// others; it must not be copied after first use.
type Biased struct {
	mu     Mutex
	held   uint32       // 1 while the favoured side holds the lock without mu (else its hold is mu's)
	others atomic.Int32 // with bias: takers between the start of Lock and the end of Unlock
	bias   bool         // Favour ran: set before concurrent use
}

// Favour makes b favour LockFavoured's caller, where the process has
// asymmetric fences. Call it before the lock is used concurrently.
func (b *Biased) Favour() { b.bias = shmsync.Asymmetric() }

// LockFavoured takes the lock for the favoured side (see Biased).
func (b *Biased) LockFavoured() {
	if b.bias {
		shmsync.PublishLight(&b.held, 1)
		if b.others.Load() == 0 {
			return
		}
		shmsync.PublishLight(&b.held, 0) // another taker wants it: take turns by the Mutex
	}
	b.mu.Lock()
}

// UnlockFavoured releases what LockFavoured took: held tells which way
// it went (only the favoured side stores it).
func (b *Biased) UnlockFavoured() {
	if atomic.LoadUint32(&b.held) == 0 {
		b.mu.Unlock()
		return
	}
	shmsync.PublishLight(&b.held, 0)
}

// Lock takes the lock for a taker other than the favoured side: safe from
// any goroutine, at the cost of a heavy fence when b favours.
func (b *Biased) Lock() {
	if !b.bias {
		b.mu.Lock() // nobody reads others: LockFavoured takes mu too
		return
	}
	b.others.Add(1)
	b.mu.Lock()
	// A refused fence (the kernel out of memory) orders nothing: try
	// again rather than trust a look at held.
	for wait := time.Microsecond; !shmsync.FenceHeavy(); wait = min(2*wait, time.Millisecond) {
		time.Sleep(wait)
	}
	for i := 0; atomic.LoadUint32(&b.held) != 0; i++ {
		if i >= spins {
			runtime.Gosched() // the favoured side holds it for a short while, but may be preempted
		}
	}
}

// Unlock releases what Lock took.
func (b *Biased) Unlock() {
	b.mu.Unlock()
	if b.bias {
		b.others.Add(-1)
	}
}
