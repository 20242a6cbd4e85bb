//go:build linux

package shm

import (
	"context"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/internal/stacks"
	"github.com/rdmago/rdmago/verbs"
)

// sleeperState waits until a goroutine blocked in WaitSleep shows up in the
// stack dump parked ("IO wait": in the network poller) and returns that
// state, or the last other state seen ("syscall" when sleeping in
// futex(2); "select" is a sleeper waiting for its turn).
func sleeperState(t *testing.T) string {
	t.Helper()
	last := ""
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, g := range stacks.All() {
			if !strings.Contains(g.Stack, "(*cq).WaitSleep") {
				continue
			}
			switch g.State {
			case "IO wait":
				return g.State
			case "running", "runnable", "select":
			default:
				last = g.State
			}
		}
	}
	if last == "" {
		t.Fatal("no goroutine blocked in WaitSleep")
	}
	return last
}

// TestWaitSleepParks: the background waiter's sleep (WaitSleep) parks in
// the network poller, not in a futex system call, which would keep the
// only P of a GOMAXPROCS=1 process from the goroutine that needs it; and
// it still wakes for a completion from the peer, for ctx and for Close.
func TestWaitSleepParks(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	connectPair(t, a, b)
	sw := a.rcq.(verbs.SleepWaiter)
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- sw.WaitSleep(ctx) }()
	require.Equal(t, "IO wait", sleeperState(t), "WaitSleep must park, not sit in a system call")
	wakes := parkWakes.Load()
	require.NoError(t, b.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpSend}))
	require.NoError(t, within(t, errc, "a completion from the peer did not wake WaitSleep"))
	require.Greater(t, parkWakes.Load(), wakes, "the peer's completion sent no wake-up datagram (the sleep ended at its backstop)")
	okWC(t, a.rcq, 1)

	// Every sleep gets its wake-up, not just the first.
	for i := uint64(10); i < 13; i++ {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: i}))
		go func() { errc <- sw.WaitSleep(ctx) }()
		require.Equal(t, "IO wait", sleeperState(t))
		wakes := parkWakes.Load()
		require.NoError(t, b.qp.PostSend(verbs.SendWR{ID: 100 + i, Opcode: verbs.OpSend}))
		require.NoError(t, <-errc)
		require.Greater(t, parkWakes.Load(), wakes, "sleep %d ended at its backstop", i)
		okWC(t, a.rcq, i)
	}

	// Cancellation wakes a parked sleeper.
	cctx, ccancel := context.WithCancel(context.Background())
	go func() { errc <- sw.WaitSleep(cctx) }()
	require.Equal(t, "IO wait", sleeperState(t))
	ccancel()
	require.ErrorIs(t, within(t, errc, "WaitSleep ignored cancellation"), context.Canceled)

	// Two sleepers take turns; one completion wakes the parked one and the
	// other sees it too.
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 3}))
	errc2 := make(chan error, 2)
	for range 2 {
		go func() { errc2 <- sw.WaitSleep(ctx) }()
	}
	require.Equal(t, "IO wait", sleeperState(t))
	require.NoError(t, b.qp.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.OpSend}))
	for range 2 {
		require.NoError(t, within(t, errc2, "a sleeper was not woken"))
	}
	okWC(t, a.rcq, 3)

	// Close wakes a parked sleeper with ErrClosed.
	cq, err := a.dev.CreateCQ(4)
	require.NoError(t, err)
	go func() { errc <- cq.(verbs.SleepWaiter).WaitSleep(ctx) }()
	require.Equal(t, "IO wait", sleeperState(t))
	require.NoError(t, cq.Close())
	require.ErrorIs(t, within(t, errc, "Close did not wake WaitSleep"), verbs.ErrClosed)
}

// TestParkedWakeOnce: while a sleeper stays parked, producers send it one
// datagram, not one per ring; a sleeper that parks again is sent another.
func TestParkedWakeOnce(t *testing.T) {
	e := newEnd(t, Options{})
	c := e.rcq.(*cq)
	p := c.parker()
	require.NotNil(t, p)
	queued := func() int {
		rc, err := p.SyscallConn()
		require.NoError(t, err)
		n := 0
		var buf [16]byte
		require.NoError(t, rc.Read(func(fd uintptr) bool {
			for {
				if _, _, err := unix.Recvfrom(int(fd), buf[:], unix.MSG_DONTWAIT); err != nil {
					return true
				}
				n++
			}
		}))
		return n
	}
	// A sleeper as WaitSleep announces one (it never reads here).
	atomic.StoreUint32(c.db.woken, 0)
	atomic.AddUint32(c.db.parked, 1)
	for range 10 {
		c.db.ring()
	}
	require.Equal(t, 1, queued(), "datagrams for one sleep")
	atomic.StoreUint32(c.db.woken, 0) // it parks again
	c.db.ring()
	c.db.ring()
	require.Equal(t, 1, queued(), "datagrams for the next sleep")
	atomic.AddUint32(c.db.parked, ^uint32(0))
	c.db.ring()
	require.Equal(t, 0, queued(), "datagrams with nobody parked")
}

// TestWaitSleepAllocatesNothing: a parked sleep and its wake-up allocate
// nothing (the socket is drained by a read kept on the CQ, not a closure
// and a recvfrom that returned the sender's address each time), so a
// rank that sleeps between messages makes no garbage.
func TestWaitSleepAllocatesNothing(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	connectPair(t, a, b)
	sw := a.rcq.(verbs.SleepWaiter)
	c := a.rcq.(*cq)
	var turn atomic.Int64 // odd: the sleeper's turn to sleep; even: it woke
	var sleepErr atomic.Value
	go func() {
		for i := int64(1); ; i += 2 {
			for turn.Load() < i {
				if turn.Load() < 0 {
					return
				}
				runtime.Gosched()
			}
			if err := sw.WaitSleep(context.Background()); err != nil {
				sleepErr.Store(err)
			}
			turn.Store(i + 1)
		}
	}()
	defer turn.Store(-1 << 40)
	rwrs := []verbs.RecvWR{{ID: 1}}
	swrs := []verbs.SendWR{{ID: 2, Opcode: verbs.OpSend}}
	var wc [1]verbs.WC
	next := int64(1)
	deadline := time.Now().Add(time.Minute)
	cycle := func() {
		if err := a.qp.PostRecv(rwrs...); err != nil {
			t.Fatal(err)
		}
		turn.Store(next)
		for !shmsync.Asleep(c.db.parked) { // parked (or about to read the socket)
			if turn.Load() == next+1 {
				// Woken at once, with nothing sent: the datagram of an
				// earlier cycle, whose sleeper found the completion before
				// it read the socket, was still queued. WaitSleep may
				// return so (a spurious wake-up); sleep again.
				next += 2
				turn.Store(next)
				continue
			}
			if time.Now().After(deadline) {
				t.Fatal("the sleeper never parked")
			}
			runtime.Gosched()
		}
		if err := b.qp.PostSend(swrs...); err != nil {
			t.Fatal(err)
		}
		for turn.Load() != next+1 {
			if time.Now().After(deadline) {
				t.Fatal("the sleeper was not woken")
			}
			runtime.Gosched()
		}
		next += 2
		if n := a.rcq.Poll(wc[:]); n != 1 || wc[0].Status != verbs.StatusSuccess {
			t.Fatalf("poll after the wake-up: %d completions, %v", n, wc[0].Status)
		}
	}
	for range 3 {
		cycle()
	}
	wakes := parkWakes.Load()
	allocs := testing.AllocsPerRun(20, cycle)
	require.Nil(t, sleepErr.Load())
	require.Greater(t, parkWakes.Load(), wakes, "the sleeps were not woken by datagrams")
	require.Zero(t, allocs, "allocations per sleep and wake-up")
}

// TestWaitSleepReturnsOnWake: a wake-up ends a parked sleep even when the
// completion that rang it is gone by then (a foreground poller took it),
// so that p2p's background goroutine sees the others poll and stops being
// a sleeper that every ring message must PING.
func TestWaitSleepReturnsOnWake(t *testing.T) {
	e := newEnd(t, Options{})
	c := e.rcq.(*cq)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- c.WaitSleep(ctx) }()
	require.Equal(t, "IO wait", sleeperState(t))
	wakes := parkWakes.Load()
	c.db.ring() // as a producer whose completion another goroutine polled
	require.NoError(t, within(t, errc, "a wake-up with nothing left to poll did not end the sleep"))
	require.Greater(t, parkWakes.Load(), wakes)
	require.Equal(t, 0, c.Poll(make([]verbs.WC, 1)))
}
