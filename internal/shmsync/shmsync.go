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
	// OSYield, with Gosched, yields the CPU to other processes
	// (sched_yield) before each Gosched: for a waiter whose writer may be
	// another process that shares this core or a goroutine of this one.
	OSYield bool
	// CheckEvery is how many polls go between looks at the clock and at
	// stop while polling (0: 32). A stop that costs more than a few polls
	// (one load per rank of a group) wants more.
	CheckEvery int
	// YieldInSpin makes the waiter yield within Spin too, once every
	// YieldInSpin looks (0: never): for a waiter whose writer may be a
	// goroutine waiting for this very thread (a provider's goroutine,
	// another rank of this process under GOMAXPROCS=1), where a Gosched
	// costs little when nothing else is runnable.
	YieldInSpin int
	// Contended is how long the waiter polls before it sleeps, and polls
	// without yielding the CPU to other processes, once its CPU is found
	// shared with another runnable thread (Contended reports it); only
	// the time it polled counts, and a waiter that loses the CPU while it
	// keeps it this way sleeps at once. Giving the CPU away then costs the rest
	// of the other thread's time slice (milliseconds) before the waiter
	// runs again, far more than a wake-up on an idle CPU, and Open MPI's
	// ranks that have a CPU each never give it away. For waiters whose
	// writer runs on another CPU (ranks no more than CPUs); 0 leaves the
	// policy as it is.
	Contended time.Duration
	// Fenced makes the waiter fence heavily (FenceHeavy) between its
	// announcement and its re-check before each sleep on a Bell, so that
	// its writers may publish lightly (see the package doc); set it only
	// where Asymmetric holds. Where the kernel refuses the fence, the
	// waiter naps at most fencelessNap instead of sleeping until rung.
	Fenced bool
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

// Poll runs the spin and yield phases: it returns true when ready held,
// an error when stop (checked every CheckEvery polls; nil means none) or
// ctx ended the wait, and false with no error when the waiter should
// sleep now. stop returns the error that ends the wait, nil to go on;
// once it has returned an error it must keep returning one (Poller.Err
// asks again).
func (p Policy) Poll(ctx context.Context, ready func() bool, stop func() error) (bool, error) {
	w := p.Poller(stop)
	for !ready() {
		if w.left--; w.left == 0 {
			if done, err := w.check(ctx); done {
				return false, err
			}
		}
	}
	return true, nil
}

// Poller is Poll for a caller that polls its condition in its own loop,
// where the check can be inlined (a call through a func value per poll
// doubled the instructions of a spinning CQ wait):
//
//	w := p.Poller(stop)
//	for !ready() {
//		if w.Over(ctx) {
//			if err := w.Err(ctx); err != nil {
//				return err
//			}
//			... // sleep on the bell
//		}
//	}
//
// It keeps only what the checks need, not a copy of the Policy: it is
// made on every blocking call of the p2p hot path.
type Poller struct {
	stop        func() error
	start       time.Time // the clock starts at the first check
	left        int       // polls until the next check
	every       int
	checks      int // looks so far, for yieldInSpin
	yieldInSpin int
	yields      int              // yields so far (for tests)
	last        time.Time        // the previous look at the clock
	off         time.Duration    // time off the CPU since start, not counted (Contended); moving start instead leaks w to the heap, and every stop closure with it
	contended   time.Duration    // Policy.Contended
	clock       func() time.Time // time.Now, unless a test sets it
	keepCPU     bool             // past the spin on a contended CPU: poll on, no sched_yield
	osYields    int              // sched_yields so far (for tests)
	goscheds    int              // runtime.Goscheds so far (for tests)
	spin        time.Duration
	sleepAt     time.Duration
	gosched     bool
	osYield     bool
}

// Poller starts the polling phases of one wait, which stop (see Poll) or
// the ctx given to Over may end. A Policy with no Spin and no Yield looks
// at the first poll that fails and sleeps then.
func (p *Policy) Poller(stop func() error) Poller {
	every := p.CheckEvery
	if every <= 0 {
		every = defaultCheckEvery
	}
	sleepAt := Forever // SleepsAfter, without copying p
	if p.Yield < Forever-p.Spin {
		sleepAt = p.Spin + p.Yield
	}
	left := every
	if sleepAt == 0 {
		left = 1
	}
	return Poller{stop: stop, left: left, every: every, yieldInSpin: p.YieldInSpin,
		spin: p.Spin, sleepAt: sleepAt, gosched: p.Gosched, osYield: p.OSYield, contended: p.Contended}
}

// Over counts a poll that found the condition false and reports whether
// polling is over: Spin+Yield has passed (the waiter should sleep now) or
// Err says why the wait ends. Every CheckEvery polls it looks at stop, ctx
// and the clock, and once past Spin it yields.
func (w *Poller) Over(ctx context.Context) bool {
	w.left--
	if w.left != 0 {
		return false
	}
	done, _ := w.check(ctx)
	return done
}

// Err is why the wait ends (stop's error or ctx's), nil when Over reported
// that it is time to sleep. (It asks stop and ctx again rather than
// keeping their answer in w: that would make the compiler move stop, a
// method value, to the heap on every wait.)
func (w *Poller) Err(ctx context.Context) error { return over(ctx, w.stop) }

// check is the look at stop, ctx and the clock every CheckEvery polls:
// whether polling is over, and the error that ends the wait if that is
// why.
func (w *Poller) check(ctx context.Context) (bool, error) {
	w.left = w.every
	if err := over(ctx, w.stop); err != nil {
		return true, err
	}
	if w.sleepAt == 0 {
		return true, nil
	}
	// A wait that ends within CheckEvery polls (the common one) never
	// reads the clock.
	now := w.now()
	if w.start.IsZero() {
		w.start, w.last = now, now
	}
	if gap := now.Sub(w.last); gap >= lostGap {
		// The waiter did not poll for a while: another thread had its
		// CPU (a preemption, or a sched_yield that gave the CPU away).
		noteContended(now)
		if w.keepCPU {
			// Kept past its spin, it lost the CPU anyway: its polling
			// only spent its share of the CPU, which the work it waits
			// for will want (both ranks' CPUs busy). Sleep now.
			return true, nil
		}
		if w.contended > 0 {
			w.off += gap // time it did not poll does not count
		}
	}
	w.last = now
	el := now.Sub(w.start) - w.off
	if el >= w.spin && w.contended > 0 && !w.keepCPU && Contended(now) {
		// Past the spin, on a CPU that others want: keep it, and poll for
		// Contended before sleeping (see Policy.Contended).
		w.keepCPU = true
		w.sleepAt = max(w.sleepAt, w.contended)
	}
	if el >= w.sleepAt {
		return true, nil
	}
	w.checks++
	if el >= w.spin || (w.yieldInSpin > 0 && w.checks%w.yieldInSpin == 0) {
		w.yields++
		switch {
		case w.keepCPU:
			// Only the goroutines of this process get the CPU: one of
			// them may be what the waiter waits for.
			w.goscheds++
			runtime.Gosched()
		case w.gosched:
			if w.osYield {
				w.osYields++
				futex.Yield()
			}
			w.goscheds++
			runtime.Gosched()
		default:
			w.osYields++
			futex.Yield()
		}
	}
	return false, nil
}

// now reads the clock (a test's, when it set one).
func (w *Poller) now() time.Time {
	if w.clock != nil {
		return w.clock()
	}
	return time.Now()
}

// lostGap is how long a waiter may go between two looks at the clock
// before it counts as having lost its CPU to another thread: far longer
// than CheckEvery polls and a yield on an idle CPU (a microsecond or
// two), shorter than the scheduler's time slices (0.75 ms and up).
const lostGap = 200 * time.Microsecond

// contendedFor is how long a lost CPU marks this process's CPUs as
// contended (Contended): a process that keeps its CPU busy (a CPU hog, a
// computing rank) takes the CPU every few time slices, so waits keep
// seeing it while it lasts.
const contendedFor = 100 * time.Millisecond

// ContendedPoll is the Policy.Contended the layers above use by default
// where every rank has a CPU: about two of the scheduler's time slices
// (0.75 ms times 1 + log2 of the CPUs, up to 8), what giving the CPU away
// to a busy thread costs before it comes back.
const ContendedPoll = 3 * time.Millisecond

// epoch is what contendedAt counts from (monotonic).
var epoch = time.Now()

// contendedAt is when a waiter of this process last lost its CPU, in ns
// since epoch plus one (0: never).
var contendedAt atomic.Int64

func noteContended(now time.Time) { contendedAt.Store(int64(now.Sub(epoch)) + 1) }

// Contended reports whether a waiter of this process lost its CPU to
// another thread within the last contendedFor before now: its CPUs are
// shared with other runnable threads, and a waiter that gives its CPU
// away gets it back only after their time slice.
func Contended(now time.Time) bool {
	at := contendedAt.Load()
	return at != 0 && now.Sub(epoch) < time.Duration(at-1)+contendedFor
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

// Announce counts a waiter in a sleepers word (A1 in the package doc):
// before it re-checks its condition and blocks, however it blocks (a
// futex, a socket, a completion queue).
func Announce(sleepers *uint32) { atomic.AddUint32(sleepers, 1) }

// Withdraw takes back Announce, after the block or instead of it.
func Withdraw(sleepers *uint32) { atomic.AddUint32(sleepers, ^uint32(0)) }

// Asleep is a writer's look at a sleepers word after it has published
// with an atomic store (B2): whether a waiter may be blocked, and must be
// woken, however it blocks.
//
// Under the race detector the look is a read-modify-write: there, an
// atomic store to memory outside Go's heap (a mapping shared with other
// processes) is a plain store, which the CPU may let this load pass (see
// the package doc); an atomic add orders the two, as a fence would.
func Asleep(sleepers *uint32) bool {
	if raceEnabled {
		return atomic.AddUint32(sleepers, 0) != 0
	}
	return atomic.LoadUint32(sleepers) != 0
}

// Asymmetric reports whether this process takes both sides of light
// publishing (see the package doc): as a writer it publishes with
// PublishLight and looks with AsleepLight, trusting its waiters' heavy
// fence; as a waiter it fences heavily (FenceHeavy) after it announces
// itself. True on amd64, outside the race detector, once the process has
// registered for membarrier(2)'s expedited global barrier (the first call
// registers it). A writer may publish lightly to a waiter only when both
// processes report true: the waiter must fence, and its fence reaches only
// registered processes. After the first call it is one load: comm's
// collective queue asks on every turn.
func Asymmetric() bool {
	if st := asymmetricState.Load(); st != 0 {
		return st == asymmetricYes
	}
	return asymmetricFirst()
}

// asymmetricFirst is Asymmetric's first answer, which it keeps.
func asymmetricFirst() bool {
	if lightStores && asymmetric() {
		asymmetricState.Store(asymmetricYes)
		return true
	}
	asymmetricState.Store(asymmetricNo)
	return false
}

// asymmetricState is Asymmetric's answer once given (0 before): the
// registration's sync.OnceValue costs about 3 ns a call, a load 0.6.
var asymmetricState atomic.Int32

const (
	asymmetricYes int32 = 1 + iota
	asymmetricNo
)

// PublishLight stores v at p with release order and no fence: a plain
// store on amd64 outside the race detector, Go's atomic store elsewhere.
// As a publication (B1) a waiter may sleep on, it takes the atomic store's
// place only when the writer and the waiters are all Asymmetric; for a
// word that is only ever loaded, never slept on, it is right everywhere.
func PublishLight(p *uint32, v uint32) { storeLight(p, v) }

// PublishLight64 is PublishLight for a 64-bit word (8-byte aligned).
func PublishLight64(p *uint64, v uint64) { storeLight64(p, v) }

// AsleepLight is Asleep after a PublishLight: a plain load, which the CPU
// may perform before the store is visible; the waiter's FenceHeavy makes
// up for that (see the package doc).
func AsleepLight(sleepers *uint32) bool {
	if !lightStores {
		return Asleep(sleepers)
	}
	return atomic.LoadUint32(sleepers) != 0
}

// FenceHeavy is the heavy side of light publishing, for a waiter that is
// Asymmetric, between its Announce and its re-check: a full barrier in
// every thread of every registered process (membarrier(2)). It reports
// false when the kernel refused, and the waiter must then not sleep (it
// may poll again): a light publication may still be invisible to it and
// its writer blind to its announcement.
func FenceHeavy() bool { return fenceHeavy() }

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

// AsleepLight is RingLight's look: whether a waiter sleeps on the bell,
// or is about to, after a light publication, for a writer that rings
// itself (Kick) when one does, a call shallower than RingLight.
func (b Bell) AsleepLight() bool { return AsleepLight(b.sleepers) }

// Sleepers is how many waiters are asleep on the bell or about to be.
func (b Bell) Sleepers() uint32 { return atomic.LoadUint32(b.sleepers) }

// Ring wakes the bell's sleepers, if any. The caller has just published
// what they wait for with an atomic store (see the package doc): that
// store, then this load of the sleepers count, is what makes it safe to
// skip the system call when nobody sleeps.
func (b Bell) Ring() {
	if Asleep(b.sleepers) {
		b.Kick()
	}
}

// RingLight is Ring after a light publication (PublishLight): it looks
// with AsleepLight, and so relies on every sleeper being Fenced.
func (b Bell) RingLight() {
	if AsleepLight(b.sleepers) {
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
	return b.sleep(ctx, ready, stop, p.nap(), p.Fenced)
}

// Sleep sleeps on the bell until ready holds (nil), stop returns an error
// or ctx ends (that error), re-checking at least every nap. Cancelling ctx
// kicks the bell; Sleep returns only after that kick is over, so the
// caller may unmap the bell's memory once Sleep has returned.
func (b Bell) Sleep(ctx context.Context, ready func() bool, stop func() error, nap time.Duration) error {
	return b.sleep(ctx, ready, stop, nap, false)
}

// fencelessNap bounds a Fenced waiter's sleep when its fence failed: a
// light publication may then be out of its sight and its writer may not
// see its announcement, so no ring is sure to come.
const fencelessNap = 50 * time.Microsecond

func (b Bell) sleep(ctx context.Context, ready func() bool, stop func() error, nap time.Duration, fenced bool) error {
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
		Announce(b.sleepers)          // A1
		s := atomic.LoadUint32(b.seq) // A2: before the re-check
		d := nap
		if fenced && !FenceHeavy() {
			d = min(nap, fencelessNap)
		}
		if ready() { // A3
			Withdraw(b.sleepers)
			return nil
		}
		if err := over(ctx, stop); err != nil {
			Withdraw(b.sleepers)
			return err
		}
		futex.Wait(b.seq, s, d) // A4
		Withdraw(b.sleepers)
	}
}
