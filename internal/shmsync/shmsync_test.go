package shmsync

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// sleepAtOnce never spins or yields and never wakes by itself: a lost
// wake-up hangs the waiter until its context ends.
var sleepAtOnce = Policy{Nap: time.Hour}

// TestNoLostWakeup: two goroutines take turns, each sleeping on its bell
// at once and waking the other after publishing. A wake-up lost anywhere
// leaves both asleep (Nap is an hour), so the context's deadline fails
// the test instead of the exchange finishing.
func TestNoLostWakeup(t *testing.T) {
	var mem [2][BellSize]uint32
	var words [2]uint64
	a, b := NewBell(&mem[0][0], &mem[0][1]), NewBell(&mem[1][0], &mem[1][1])
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const rounds, budget = 20000, 2 * time.Second
	errc := make(chan error, 1)
	go func() {
		_, err := pingPongPeer(ctx, &words[1], &words[0], b, a, rounds, heavyPublisher)
		errc <- err
	}()
	done, err := pingPongLead(ctx, &words[0], &words[1], a, b, rounds, budget, heavyPublisher)
	require.NoError(t, err, "lost wake-up after %d rounds", done)
	require.NoError(t, <-errc)
	require.Positive(t, done)
	t.Logf("%d rounds", done)
}

// publisher is how a ping-pong side publishes a round and how it waits.
type publisher struct {
	store  func(p *uint64, v uint64)
	ring   func(b Bell)
	policy Policy
}

var (
	heavyPublisher = publisher{atomic.StoreUint64, Bell.Ring, sleepAtOnce}
	lightPublisher = publisher{PublishLight64, Bell.RingLight, Policy{Nap: time.Hour, Fenced: true}}
)

// pingPongLead sends round i (i = 1, 2, ...) and waits for its echo, for
// at most rounds rounds or budget; it then sends 0 as the end. It returns
// the rounds completed.
func pingPongLead(ctx context.Context, mine, theirs *uint64, myBell, theirBell Bell, rounds int, budget time.Duration, pub publisher) (int, error) {
	end := time.Now().Add(budget)
	i := uint64(1)
	defer func() {
		atomic.StoreUint64(theirs, 1<<63) // the end
		theirBell.Kick()
	}()
	for ; i <= uint64(rounds) && time.Now().Before(end); i++ {
		pub.store(theirs, i)
		pub.ring(theirBell)
		if err := myBell.Wait(ctx, func() bool { return atomic.LoadUint64(mine) == i }, nil, pub.policy); err != nil {
			return int(i - 1), err
		}
	}
	return int(i - 1), nil
}

// pingPongPeer echoes every round it sees until the end.
func pingPongPeer(ctx context.Context, mine, theirs *uint64, myBell, theirBell Bell, rounds int, pub publisher) (int, error) {
	for i := uint64(1); ; i++ {
		var got uint64
		if err := myBell.Wait(ctx, func() bool { got = atomic.LoadUint64(mine); return got >= i }, nil, pub.policy); err != nil {
			return int(i - 1), err
		}
		if got == 1<<63 {
			return int(i - 1), nil
		}
		if got != i {
			return int(i - 1), errors.New("rounds out of order")
		}
		pub.store(theirs, i)
		pub.ring(theirBell)
	}
}

// asleep waits until the bell counts a sleeper (about to sleep or asleep).
func asleep(t *testing.T, b Bell) {
	t.Helper()
	require.Eventually(t, func() bool { return b.Sleepers() != 0 }, 5*time.Second, 100*time.Microsecond, "the waiter never announced its sleep")
}

// TestCancelWakesSleeper: cancelling the context of a waiter asleep on a
// bell nobody rings ends its wait with the context's error, long before
// its nap would.
func TestCancelWakesSleeper(t *testing.T) {
	var w [2]uint32
	b := NewBell(&w[0], &w[1])
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- b.Wait(ctx, func() bool { return false }, nil, sleepAtOnce) }()
	asleep(t, b)
	cancel()
	select {
	case err := <-errc:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("cancelling the context did not wake the sleeper")
	}
	require.Zero(t, b.Sleepers(), "the waiter left its announcement behind")
}

// TestStopEndsSleep: stop is re-checked after every nap, so a reason to
// stop that nobody rings for still ends the wait.
func TestStopEndsSleep(t *testing.T) {
	var w [2]uint32
	b := NewBell(&w[0], &w[1])
	errStop := errors.New("stopped")
	var stopped atomic.Bool
	errc := make(chan error, 1)
	go func() {
		errc <- b.Wait(context.Background(), func() bool { return false }, func() error {
			if stopped.Load() {
				return errStop
			}
			return nil
		}, Policy{Nap: time.Millisecond})
	}()
	asleep(t, b)
	stopped.Store(true)
	select {
	case err := <-errc:
		require.ErrorIs(t, err, errStop)
	case <-time.After(5 * time.Second):
		t.Fatal("stop did not end the wait")
	}
}

// TestRingOnlyWhenSleeping: publishing costs no wake-up (seq stays) while
// nobody sleeps; with a sleeper announced it does.
func TestRingOnlyWhenSleeping(t *testing.T) {
	var w [2]uint32
	b := NewBell(&w[0], &w[1])
	b.Ring()
	require.Zero(t, atomic.LoadUint32(&w[0]))
	atomic.AddUint32(&w[1], 1)
	b.Ring()
	require.EqualValues(t, 1, atomic.LoadUint32(&w[0]))
	b.Reset()
	require.Zero(t, b.Sleepers())

	var sleepers uint32
	require.False(t, Asleep(&sleepers))
	Announce(&sleepers)
	Announce(&sleepers)
	require.True(t, Asleep(&sleepers))
	Withdraw(&sleepers)
	require.True(t, Asleep(&sleepers))
	Withdraw(&sleepers)
	require.False(t, Asleep(&sleepers))
}

// TestPollPhases: Poll reports a ready condition, tells a waiter to sleep
// once Spin+Yield has passed, and returns stop's error.
func TestPollPhases(t *testing.T) {
	ctx := context.Background()
	ok, err := Policy{}.Poll(ctx, func() bool { return true }, nil)
	require.True(t, ok)
	require.NoError(t, err)

	p := Policy{Spin: time.Millisecond, Yield: time.Millisecond}
	start := time.Now()
	ok, err = p.Poll(ctx, func() bool { return false }, nil)
	require.False(t, ok)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 2*time.Millisecond, "Poll gave up before Spin+Yield")

	polls := 0
	ok, err = Policy{Yield: Forever}.Poll(ctx, func() bool { polls++; return polls == 1000 }, nil)
	require.True(t, ok)
	require.NoError(t, err)

	polls, checks := 0, 0
	ok, err = Policy{Yield: Forever, CheckEvery: 100}.Poll(ctx, func() bool { polls++; return polls == 1000 }, func() error { checks++; return nil })
	require.True(t, ok)
	require.NoError(t, err)
	require.Equal(t, 9, checks, "stop is checked every CheckEvery polls")

	errStop := errors.New("stop")
	_, err = Policy{Yield: Forever, Gosched: true}.Poll(ctx, func() bool { return false }, func() error { return errStop })
	require.ErrorIs(t, err, errStop)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	_, err = Policy{Yield: Forever}.Poll(cctx, func() bool { return false }, nil)
	require.ErrorIs(t, err, context.Canceled)

	require.Equal(t, Forever, Policy{Spin: time.Second, Yield: Forever}.SleepsAfter())
	require.Equal(t, 3*time.Second, Policy{Spin: time.Second, Yield: 2 * time.Second}.SleepsAfter())
}

func TestBellAt(t *testing.T) {
	mem := make([]byte, 16)
	b := BellAt(mem, 8)
	atomic.AddUint32(b.sleepers, 1)
	require.EqualValues(t, 1, mem[12])
	require.Panics(t, func() { BellAt(mem, 2) })
}

// lockedBuf collects a child's output.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestPoller: a caller's own polling loop ends when Spin+Yield has passed
// (Err nil: sleep now) or when stop or ctx ends the wait (Err says why).
func TestPoller(t *testing.T) {
	ctx := context.Background()
	w := (&Policy{Spin: time.Millisecond, CheckEvery: 1}).Poller(nil)
	start := time.Now()
	for !w.Over(ctx) {
	}
	require.GreaterOrEqual(t, time.Since(start), time.Millisecond)
	require.NoError(t, w.Err(ctx))

	errStop := errors.New("stop")
	calls := 0
	w = (&Policy{Yield: Forever, CheckEvery: 10}).Poller(func() error {
		if calls++; calls >= 3 { // sticky, as Err asks again
			return errStop
		}
		return nil
	})
	n := 1
	for ; !w.Over(ctx); n++ {
	}
	require.Equal(t, 30, n, "stop is asked every CheckEvery polls")
	require.ErrorIs(t, w.Err(ctx), errStop)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	w = (&Policy{Yield: Forever}).Poller(nil)
	for !w.Over(cctx) {
	}
	require.ErrorIs(t, w.Err(cctx), context.Canceled)
}

// TestPollerYields: within Spin the waiter yields only every YieldInSpin
// looks, past it at every look; a policy with no Spin and no Yield looks
// at the first failed poll and says to sleep, without polling on.
func TestPollerYields(t *testing.T) {
	ctx := context.Background()
	w := (&Policy{Spin: time.Hour, Yield: time.Hour, CheckEvery: 1, YieldInSpin: 4, Gosched: true}).Poller(nil)
	for range 40 {
		require.False(t, w.Over(ctx))
	}
	require.Equal(t, 10, w.yields, "one yield every YieldInSpin looks within the spin")

	w = (&Policy{Spin: time.Hour, Yield: time.Hour, CheckEvery: 1, Gosched: true}).Poller(nil)
	for range 40 {
		require.False(t, w.Over(ctx))
	}
	require.Zero(t, w.yields, "no yield within the spin without YieldInSpin")

	w = (&Policy{Yield: time.Hour, CheckEvery: 1, YieldInSpin: 4, Gosched: true}).Poller(nil)
	for range 40 {
		require.False(t, w.Over(ctx))
	}
	require.Equal(t, 40, w.yields, "past the spin, a yield at every look")

	w = (&Policy{CheckEvery: 16}).Poller(nil)
	require.True(t, w.Over(ctx), "no spin and no yield: sleep after the first poll")
	require.NoError(t, w.Err(ctx))
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	w = (&Policy{}).Poller(nil)
	require.True(t, w.Over(cctx))
	require.ErrorIs(t, w.Err(cctx), context.Canceled)
}

// TestPollerYieldKinds: every yield is a runtime.Gosched with Gosched, a
// sched_yield without; with Gosched and OSYield it is both, a sched_yield
// then a Gosched, after every failed poll when CheckEvery is 1 and there
// is no spin (a crowded waiter over several devices: its sender may be
// another process on this core or a goroutine of this one).
func TestPollerYieldKinds(t *testing.T) {
	ctx := context.Background()
	const polls = 40
	for _, c := range []struct {
		name               string
		p                  Policy
		goscheds, osYields int
	}{
		{"Gosched and OSYield", Policy{Yield: time.Hour, Gosched: true, OSYield: true, CheckEvery: 1}, polls, polls},
		{"Gosched", Policy{Yield: time.Hour, Gosched: true, CheckEvery: 1}, polls, 0},
		{"neither", Policy{Yield: time.Hour, CheckEvery: 1}, 0, polls},
		{"OSYield alone is sched_yield", Policy{Yield: time.Hour, OSYield: true, CheckEvery: 1}, 0, polls},
		{"Gosched and OSYield, every 4 polls", Policy{Yield: time.Hour, Gosched: true, OSYield: true, CheckEvery: 4}, polls / 4, polls / 4},
	} {
		w := c.p.Poller(nil)
		for range polls {
			require.False(t, w.Over(ctx), c.name)
		}
		require.Equal(t, c.goscheds, w.goscheds, "%s: Goscheds", c.name)
		require.Equal(t, c.osYields, w.osYields, "%s: sched_yields", c.name)
		require.Equal(t, polls/max(1, c.p.CheckEvery), w.yields, "%s: yields", c.name)
	}
}

// fakeClock is a Poller clock that moves only when told to.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

// withContendedAt sets when this process last lost a CPU (0: never) for
// one test, and restores it after.
func withContendedAt(t *testing.T, at int64) {
	old := contendedAt.Load()
	contendedAt.Store(at)
	t.Cleanup(func() { contendedAt.Store(old) })
}

// TestPollerKeepsContendedCPU: a waiter that lost its CPU (a gap of
// lostGap between two looks at the clock) polls on past Spin+Yield
// until Contended of polled time, giving the CPU only to goroutines of
// this process (Gosched, no sched_yield); the time it did not poll does
// not count. The same waiter with no Contended sleeps after Spin+Yield
// and yields with sched_yield. A waiter that keeps its CPU this way and
// loses it anyway sleeps at once.
func TestPollerKeepsContendedCPU(t *testing.T) {
	ctx := context.Background()
	withContendedAt(t, 0)
	p := Policy{Spin: 10 * time.Microsecond, Yield: 100 * time.Microsecond, CheckEvery: 1, Contended: 3 * time.Millisecond}
	clk := &fakeClock{t: time.Now()}
	w := p.Poller(nil)
	w.clock = clk.now
	require.False(t, w.Over(ctx))
	clk.advance(5 * time.Millisecond) // preempted: another thread ran
	require.False(t, w.Over(ctx), "the time it did not poll counted")
	require.True(t, Contended(clk.t), "a lost CPU did not mark the process contended")
	polls := 1
	for ; !w.Over(ctx); polls++ {
		clk.advance(10 * time.Microsecond)
		require.Less(t, polls, 1000, "a contended waiter never sleeps")
	}
	require.InDelta(t, 300, polls, 2, "a contended waiter polls for Contended (3 ms in 10 µs steps)")
	require.NoError(t, w.Err(ctx))
	require.Zero(t, w.osYields, "a contended waiter gave its CPU to other processes")
	require.NotZero(t, w.goscheds, "a contended waiter gave no turn to its own goroutines")

	// Kept past Spin+Yield, it loses the CPU: it sleeps at once.
	w = p.Poller(nil)
	w.clock = clk.now
	polls = 0
	for ; polls < 20; polls++ {
		clk.advance(10 * time.Microsecond)
		require.False(t, w.Over(ctx))
	}
	clk.advance(2 * time.Millisecond)
	require.True(t, w.Over(ctx), "a waiter that kept its CPU and lost it anyway polls on")
	require.NoError(t, w.Err(ctx))

	// Without Contended: sleep after Spin+Yield, sched_yield past Spin.
	p.Contended = 0
	w = p.Poller(nil)
	w.clock = clk.now
	require.False(t, w.Over(ctx))
	polls = 1
	for ; !w.Over(ctx); polls++ {
		clk.advance(10 * time.Microsecond)
	}
	require.InDelta(t, 11, polls, 1, "without Contended the wait sleeps after Spin+Yield")
	require.NotZero(t, w.osYields)
}

// TestPollerUncontended: with no CPU lost recently, Contended changes
// nothing: the waiter sleeps after Spin+Yield and yields with sched_yield;
// a lost CPU is forgotten after contendedFor.
func TestPollerUncontended(t *testing.T) {
	ctx := context.Background()
	clk := &fakeClock{t: time.Now()}
	// Never lost, and lost just over contendedFor ago.
	for _, at := range []int64{0, int64(clk.t.Sub(epoch) - contendedFor)} {
		withContendedAt(t, at)
		require.False(t, Contended(clk.t))
		w := (&Policy{Spin: 10 * time.Microsecond, Yield: 100 * time.Microsecond, CheckEvery: 1, Contended: 3 * time.Millisecond}).Poller(nil)
		w.clock = clk.now
		polls := 1
		for require.False(t, w.Over(ctx)); !w.Over(ctx); polls++ {
			clk.advance(10 * time.Microsecond)
		}
		require.InDelta(t, 11, polls, 1, "an uncontended waiter sleeps after Spin+Yield")
		require.NotZero(t, w.osYields, "an uncontended waiter gives its CPU away past Spin")
	}
}

// Asymmetric gives one answer however often it is asked: comm's queue
// and the rings decide from it once and again.
func TestAsymmetricStable(t *testing.T) {
	first := Asymmetric()
	for range 3 {
		if got := Asymmetric(); got != first {
			t.Fatalf("Asymmetric said %v, then %v", first, got)
		}
	}
}
