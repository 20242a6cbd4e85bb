package comm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/bootstrap"
)

// TestSharedRegionCrowded: the world's shared region says it is crowded
// (collectives.Crowded) exactly when its ranks outnumber the CPUs this
// process may run on, and every rank says the same; the communicators'
// groups report the ranks per CPU (collectives.Crowding). Its waits keep a
// contended CPU (shmsync.Policy.Contended) as the endpoint's do: not when
// crowded.
func TestSharedRegionCrowded(t *testing.T) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Skipf("sched_getaffinity: %v", err)
	}
	cpus := set.Count()
	if cpus < 2 || cpus > 7 {
		t.Skipf("%d CPUs: the test runs 2 ranks and one more than the CPUs", cpus)
	}
	for _, n := range []int{2, cpus + 1} {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		stores, err := bootstrap.NewMemory(n)
		require.NoError(t, err)
		comms := make([]*Comm, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() { comms[r], errs[r] = Init(ctx, Options{Store: stores[r], Transport: "shm", NoEnv: true}) })
		}
		wg.Wait()
		for r := range n {
			require.NoError(t, errs[r], "rank %d of %d", r, n)
		}
		for r, c := range comms {
			require.NotNil(t, c.w.shared, "rank %d of %d has no shared region", r, n)
			require.Equal(t, n > cpus, c.w.shared.Crowded(), "rank %d of %d ranks on %d CPUs", r, n, cpus)
			require.Equal(t, c.w.ep.ContendedPoll(), c.w.shared.WaitPolicy().Contended, "rank %d of %d", r, n)
			require.Equal(t, n <= cpus, c.w.shared.WaitPolicy().Contended > 0, "rank %d of %d ranks on %d CPUs", r, n, cpus)
			// The collectives' cost model sees the same as ranks per CPU.
			require.Equal(t, max(float64(n)/float64(cpus), 1), (&group{c: c}).Crowding(), "rank %d of %d ranks on %d CPUs", r, n, cpus)
		}
		for r := range n {
			require.NoError(t, comms[r].Close())
			stores[r].Close()
		}
		cancel()
	}
}

// TestDirectPutLeavesNothingPending: a Put into a window of provider
// memory over shm is a copy that is complete when Put returns, so Flush
// has no request to wait for or release; a Put into a window of the
// caller's memory still leaves its request for Flush. Both arrive.
func TestDirectPutLeavesNothingPending(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	stores, err := bootstrap.NewMemory(2)
	require.NoError(t, err)
	comms := make([]*Comm, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { comms[r], errs[r] = Init(ctx, Options{Store: stores[r], Transport: "shm", NoEnv: true}) })
	}
	wg.Wait()
	for r := range 2 {
		require.NoError(t, errs[r], "rank %d", r)
	}
	defer func() {
		for r := range 2 {
			comms[r].Close()
			stores[r].Close()
		}
	}()
	for r := range 2 {
		wg.Go(func() {
			errs[r] = func() error {
				c := comms[r]
				wa, err := AllocWin[int64](ctx, c, 4)
				if err != nil {
					return err
				}
				wu, err := NewWin(ctx, c, make([]int64, 4))
				if err != nil {
					return err
				}
				if r == 0 {
					if err := wa.Put(1, 1, []int64{7, 8}); err != nil {
						return err
					}
					if n := len(wa.pending); n != 0 {
						return fmt.Errorf("a Put into provider memory left %d requests pending", n)
					}
					if err := wu.Put(1, 2, []int64{9}); err != nil {
						return err
					}
					if n := len(wu.pending); n != 1 {
						return fmt.Errorf("a Put into user memory left %d requests pending, want 1", n)
					}
				}
				if err := wa.Fence(ctx); err != nil {
					return err
				}
				if err := wu.Fence(ctx); err != nil {
					return err
				}
				if r == 1 {
					if got := wa.Local(); got[1] != 7 || got[2] != 8 {
						return fmt.Errorf("provider window holds %v, want 7, 8 at 1", got)
					}
					if got := wu.Local(); got[2] != 9 {
						return fmt.Errorf("user window holds %v, want 9 at 2", got)
					}
				}
				if err := wa.Close(ctx); err != nil {
					return err
				}
				return wu.Close(ctx)
			}()
		})
	}
	wg.Wait()
	for r := range 2 {
		require.NoError(t, errs[r], "rank %d", r)
	}
}
