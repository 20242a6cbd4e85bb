package comm

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/bootstrap"
)

// TestSharedRegionCrowded: the world's shared region says it is crowded
// (collectives.Crowded) exactly when its ranks outnumber the CPUs this
// process may run on, and every rank says the same.
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
		}
		for r := range n {
			require.NoError(t, comms[r].Close())
			stores[r].Close()
		}
		cancel()
	}
}
