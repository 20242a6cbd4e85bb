package p2p_test

import (
	"bytes"
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// Non-blocking requests progress in the background: after Isend/Irecv,
// neither rank calls into p2p again (no Wait, no Test), yet both the eager
// and the rendezvous transfers complete while the program "computes".
func TestBackgroundProgress(t *testing.T) { testBackgroundProgress(t, 0) }

// The same right after a run of blocking ping-pongs: the background
// goroutine, which stays off while foreground goroutines keep polling, must
// notice by itself that they stopped.
func TestBackgroundProgressAfterPingPong(t *testing.T) { testBackgroundProgress(t, 200) }

func testBackgroundProgress(t *testing.T, pingPongs int) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				var b [8]byte
				for range pingPongs {
					if ep.Rank() == 0 {
						require.NoError(t, ep.Send(ctx, 1, 7, b[:]))
						_, err := ep.Recv(ctx, 1, 7, b[:])
						require.NoError(t, err)
					} else {
						_, err := ep.Recv(ctx, 0, 7, b[:])
						require.NoError(t, err)
						require.NoError(t, ep.Send(ctx, 0, 7, b[:]))
					}
				}
				const big = 1 << 20
				var reqs []*p2p.Request
				var bufs [][]byte
				for i, n := range []int{100, big} {
					var r *p2p.Request
					var err error
					if ep.Rank() == 0 {
						r, err = ep.Isend(1, i, pattern(n, byte(i)))
					} else {
						b := make([]byte, n)
						bufs = append(bufs, b)
						r, err = ep.Irecv(0, i, b)
					}
					require.NoError(t, err)
					reqs = append(reqs, r)
				}
				deadline := time.Now().Add(20 * time.Second)
				for _, r := range reqs {
					for !r.Done() { // Done does not progress anything
						require.True(t, time.Now().Before(deadline), "request never completed without Wait")
						time.Sleep(time.Millisecond)
					}
				}
				for i, b := range bufs {
					require.True(t, bytes.Equal(b, pattern(len(b), byte(i))))
				}
				return p2p.WaitAll(ctx, reqs...)
			})
		})
	}
}

// A Recv whose message is there when it is posted completes in the poll it
// makes while it holds the endpoint's lock, without entering the polling
// phase; the background goroutine, which stays off while foreground
// goroutines poll, must still see that poll start. (The background
// goroutine, woken by the message, may take it first, or hold the poll
// lock, and then the Recv polls nothing or polls in its polling phase: of
// 50 tries, at least one must be a counted poll under the lock alone.)
func TestHeldPollCounts(t *testing.T) {
	const tries = 50
	sent, taken := make(chan struct{}), make(chan struct{})
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		b := make([]byte, 8)
		// The two ranks take turns through sent and taken; a rank that
		// fails ends ctx for the other.
		pass := func(send bool, c chan struct{}) error {
			if send {
				select {
				case c <- struct{}{}:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			select {
			case <-c:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		counted := false
		for range tries {
			if ep.Rank() == 0 {
				if err := ep.Send(ctx, 1, 3, b); err != nil { // a ring message: there once Send returns
					return err
				}
				if err := pass(true, sent); err != nil {
					return err
				}
				if err := pass(false, taken); err != nil {
					return err
				}
				continue
			}
			if err := pass(false, sent); err != nil {
				return err
			}
			before, entered := ep.PollsStarted(), ep.PollsEntered()
			if _, err := ep.Recv(ctx, 0, 3, b); err != nil {
				return err
			}
			// A Recv that went on to its polling phase counted there.
			counted = counted || ep.PollsStarted() != before && ep.PollsEntered() == entered
			if err := pass(true, taken); err != nil {
				return err
			}
		}
		if ep.Rank() == 1 && !counted {
			t.Errorf("in %d tries, no Recv's poll counted", tries)
		}
		return nil
	})
}

// Close leaves no goroutine of the endpoints behind.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	p2ptest.Run(t, 3, p2ptest.Options{Provider: "loop"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		right := (ep.Rank() + 1) % ep.Size()
		r, err := ep.Irecv(p2p.AnySource, 0, make([]byte, 1<<16))
		if err != nil {
			return err
		}
		if err := ep.Send(ctx, right, 0, make([]byte, 1<<16)); err != nil {
			return err
		}
		_, err = r.Wait(ctx)
		return err
	})
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}
