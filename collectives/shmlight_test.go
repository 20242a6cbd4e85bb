package collectives_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/shmsync"
)

// shmMix runs calls rounds of a shared-memory allreduce, bcast (from a
// moving root) and barrier on e and checks the results.
func shmMix(ctx context.Context, e *collectives.Engine, r, p, calls int) error {
	for i := range calls {
		buf := []float32{float32(r + i), 1}
		if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
			return err
		}
		if want := float32(p*i + p*(p-1)/2); buf[0] != want || buf[1] != float32(p) {
			return fmt.Errorf("call %d: allreduce gave %v, want [%v %v]", i, buf, want, p)
		}
		root := i % p
		b := []float32{float32(r * i)}
		if err := collectives.Bcast(ctx, e, b, root); err != nil {
			return err
		}
		if b[0] != float32(root*i) {
			return fmt.Errorf("call %d: bcast from %d gave %v", i, root, b[0])
		}
		if err := collectives.Barrier(ctx, e); err != nil {
			return err
		}
	}
	return nil
}

func shmOnly() collectives.Options {
	o := force(collectives.CollAllreduce, collectives.SharedMemory)
	o.Algorithms[collectives.CollBcast] = collectives.SharedMemory
	o.Algorithms[collectives.CollBarrier] = collectives.SharedMemory
	return o
}

// TestShmPublishesLightly: where this process can fence for its waiters
// (shmsync.Asymmetric), every rank of a region publishes lightly once all
// have said they fence; elsewhere none does.
func TestShmPublishesLightly(t *testing.T) {
	t.Parallel()
	const p = 3
	light := make([]int8, p)
	errs := world(t, p, coltest.Options{Shared: true}, shmOnly(), func(ctx context.Context, e *collectives.Engine, r int) error {
		err := shmMix(ctx, e, r, p, 20)
		light[r] = collectives.ShmLight(e)
		return err
	})
	requireAllOK(t, errs)
	want := int8(-1)
	if shmsync.Asymmetric() {
		want = 1
	}
	require.Equal(t, []int8{want, want, want}, light)
}

// TestShmHeavyBesideRankWithoutFences: a rank whose fences word says it
// does not fence (a process where membarrier(2) is missing) makes every
// rank publish with atomic stores: the others once they have seen it
// publish, itself after its looks run out. The results stay right.
func TestShmHeavyBesideRankWithoutFences(t *testing.T) {
	t.Parallel()
	const p, unfenced = 2, 1
	light := make([]int8, p)
	var ready sync.WaitGroup
	ready.Add(p)
	errs := world(t, p, coltest.Options{Shared: true}, shmOnly(), func(ctx context.Context, e *collectives.Engine, r int) error {
		if r == unfenced {
			atomic.StoreUint32(collectives.ShmFencesWord(e, r), 0)
		}
		ready.Done()
		ready.Wait() // nobody publishes before the word is cleared
		err := shmMix(ctx, e, r, p, 200)
		light[r] = collectives.ShmLight(e)
		return err
	})
	requireAllOK(t, errs)
	require.Equal(t, []int8{-1, -1}, light)
}

// TestShmSleepingWaitersWake: with waits that sleep at once and never wake
// by themselves (a nap of an hour), every wake-up of a shared-memory call
// comes from a peer's publication, light or not: a publication that does
// not ring, or a light one that a sleeper cannot see, leaves the ranks
// asleep until the deadline fails the test.
func TestShmSleepingWaitersWake(t *testing.T) {
	t.Parallel()
	const p = 3
	wo := coltest.Options{Shared: true, SharedPolicy: &shmsync.Policy{Nap: time.Hour}}
	light := make([]int8, p)
	errs := world(t, p, wo, shmOnly(), func(ctx context.Context, e *collectives.Engine, r int) error {
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		err := shmMix(ctx, e, r, p, 300)
		light[r] = collectives.ShmLight(e)
		return err
	})
	requireAllOK(t, errs)
	if shmsync.Asymmetric() {
		require.Equal(t, []int8{1, 1, 1}, light, "the ranks did not publish lightly")
	}
}
