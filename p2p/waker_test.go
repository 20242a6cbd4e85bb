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
// whose waiter blocks in the CQ under a context that never ends: the
// cancel must wake the wait (a reused waker, not a context.WithCancel per
// wait, since such a context has nothing to propagate), every time, and
// the waits reuse one waker. A wait nobody wakes would block for good, so
// a watchdog closes the endpoint after 10 s and the test fails.
func TestCancelWakesBlockedWait(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			o := small
			o.Provider = prov
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 1 {
					return nil
				}
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
					_, err = r.Wait(context.Background())
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
