package p2p_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/stretchr/testify/require"
)

// TestCancelWakesBlockedWait cancels, from another goroutine, a receive
// whose waiter blocks in the CQ, under a context that never ends and under
// one that can: the cancel must wake the wait (a reused waker, not a
// context.WithCancel per wait), every time, and the waits reuse one waker.
// A wait nobody wakes would block for good, so a watchdog closes the
// endpoint after 10 s and the test fails.
func TestCancelWakesBlockedWait(t *testing.T) {
	for _, tc := range []struct {
		prov, ctx string
	}{{"loop", "background"}, {"tcp", "background"}, {"shm", "background"}, {"tcp", "cancellable"}, {"shm", "cancellable"}} {
		t.Run(tc.prov+"/"+tc.ctx, func(t *testing.T) {
			wctx := context.Background()
			if tc.ctx == "cancellable" {
				c, cancel := context.WithCancel(context.Background())
				defer cancel()
				wctx = c
			}
			onRankZero(t, tc.prov, func(ctx context.Context, ep *p2p.Endpoint) error {
				for i := range 20 {
					r, err := ep.Irecv(1, 100+i, make([]byte, 8))
					require.NoError(t, err)
					armed := make(chan time.Time, 1)
					go func() {
						deadline := time.Now().Add(10 * time.Second)
						for !r.WaitArmed() {
							if time.Now().After(deadline) {
								t.Errorf("wait %d never blocked in the CQ", i)
								armed <- time.Now()
								r.Cancel()
								return
							}
							time.Sleep(100 * time.Microsecond)
						}
						armed <- time.Now()
						r.Cancel()
					}()
					watchdog := time.AfterFunc(10*time.Second, func() { _ = ep.Close() })
					_, err = r.Wait(wctx)
					took := time.Since(<-armed)
					stopped := watchdog.Stop()
					require.True(t, stopped, "wait %d: only closing the endpoint ended it", i)
					// Without the wake-up the endpoint's housekeeping ends
					// such a wait within a second or two; the bound tells
					// the two apart on a loaded machine.
					require.Less(t, took, 500*time.Millisecond, "wait %d was not woken by the cancel", i)
					require.True(t, errors.Is(err, p2p.ErrCanceled), "wait %d: %v", i, err)
				}
				require.Equal(t, 1, ep.SpareWakers(), "the waits reuse one waker")
				return nil
			})
		})
	}
}

// TestContextEndWakesBlockedWait ends, by its deadline, the context of a
// receive that blocks in the CQ waiting for a message that never comes:
// the wait's waker, registered with that context once the provider sleeps,
// must end the wait with the context's error, and the endpoint keeps the
// waker for the next wait. Every provider, as each sleeps its own way. A
// watchdog closes the endpoint after 10 s should nothing end the wait.
func TestContextEndWakesBlockedWait(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			onRankZero(t, prov, func(ctx context.Context, ep *p2p.Endpoint) error {
				for i := range 3 {
					wctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
					watchdog := time.AfterFunc(10*time.Second, func() { _ = ep.Close() })
					_, err := ep.Recv(wctx, 1, 200+i, make([]byte, 8))
					deadline, _ := wctx.Deadline()
					late := time.Since(deadline)
					cancel()
					require.True(t, watchdog.Stop(), "wait %d: only closing the endpoint ended it", i)
					require.ErrorIs(t, err, context.DeadlineExceeded, "wait %d", i)
					// Unwoken, the endpoint's housekeeping ends such a wait
					// within a second or two; the bound tells the two apart
					// on a loaded machine.
					require.Less(t, late, 500*time.Millisecond, "wait %d was not woken by its context's end", i)
				}
				require.Equal(t, 1, ep.SpareWakers(), "the waits reuse one waker")
				return nil
			})
		})
	}
}

// onRankZero runs f on rank 0 of a 2-rank job over prov whose rank 1 does
// nothing: the peer of a receive that never gets its message.
func onRankZero(t *testing.T, prov string, f func(ctx context.Context, ep *p2p.Endpoint) error) {
	t.Helper()
	o := small
	o.Provider = prov
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() != 0 {
			return nil
		}
		return f(ctx, ep)
	})
}
