package comm_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

// shrinkJob runs n ranks over an in-memory rendezvous like run, but gives
// fn the rank's store, so that a rank can leave the job (close its
// communicator and its store, as a dead process's connection closes).
func shrinkJob(t *testing.T, n int, transport string, fn func(ctx context.Context, c *comm.Comm, store *bootstrap.Memory) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stores, err := bootstrap.NewMemory(n)
	require.NoError(t, err)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			c, err := comm.Init(ctx, comm.Options{Store: stores[r], Transport: transport, NoEnv: true})
			if err != nil {
				errs[r] = err
				return
			}
			errs[r] = fn(ctx, c, stores[r])
			c.Close()
			stores[r].Close()
		})
	}
	wg.Wait()
	require.NoError(t, ctx.Err(), "the job did not finish in time")
	return errs
}

// leave makes this rank leave the job as a dead one would.
func leave(c *comm.Comm, s *bootstrap.Memory) error {
	c.Close()
	s.Close()
	return errLeft
}

var errLeft = errors.New("left the job")

// sumOfWorldRanks is an allreduce that proves the communicator works and
// says who is in it.
func sumOfWorldRanks(ctx context.Context, c *comm.Comm, world int) (int64, error) {
	v := []int64{int64(world)}
	err := comm.Allreduce(ctx, c, v, comm.Sum)
	return v[0], err
}

// Survivors of a rank that left get the same communicator of the others,
// in the old order, and compute on it; a second departure shrinks it
// again.
func TestShrinkSurvivorsCarryOn(t *testing.T) {
	for _, tr := range []string{"loop", "tcp", "shm"} {
		t.Run(tr, func(t *testing.T) { testShrinkSurvivorsCarryOn(t, tr) })
	}
}

func testShrinkSurvivorsCarryOn(t *testing.T, transport string) {
	errs := shrinkJob(t, 4, transport, func(ctx context.Context, c *comm.Comm, s *bootstrap.Memory) error {
		me := c.Rank()
		if _, err := sumOfWorldRanks(ctx, c, me); err != nil {
			return err
		}
		if me == 2 {
			return leave(c, s)
		}
		nc, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		defer nc.Close()
		want := map[int]int{0: 0, 1: 1, 3: 2}[me]
		if nc.Size() != 3 || nc.Rank() != want {
			return fmt.Errorf("shrunk to rank %d of %d, want %d of 3", nc.Rank(), nc.Size(), want)
		}
		if sum, err := sumOfWorldRanks(ctx, nc, me); err != nil || sum != 0+1+3 {
			return fmt.Errorf("allreduce on the shrunk communicator: %d, %v", sum, err)
		}
		if me == 3 {
			nc.Close()
			return leave(c, s)
		}
		nc2, err := nc.Shrink(ctx)
		if err != nil {
			return err
		}
		defer nc2.Close()
		if nc2.Size() != 2 || nc2.Rank() != me {
			return fmt.Errorf("second shrink: rank %d of %d, want %d of 2", nc2.Rank(), nc2.Size(), me)
		}
		if sum, err := sumOfWorldRanks(ctx, nc2, me); err != nil || sum != 1 {
			return fmt.Errorf("allreduce after the second shrink: %d, %v", sum, err)
		}
		return nil
	})
	for r, err := range errs {
		if r == 2 || r == 3 {
			assert.ErrorIs(t, err, errLeft, "rank %d", r)
		} else {
			assert.NoError(t, err, "rank %d", r)
		}
	}
}

// A rank that dies during the shrink, after it announced itself, makes
// the others start over without it: they still agree.
func TestShrinkRankDiesDuringShrink(t *testing.T) {
	for _, tr := range []string{"loop", "tcp", "shm"} {
		t.Run(tr, func(t *testing.T) { testShrinkRankDiesDuringShrink(t, tr) })
	}
}

func testShrinkRankDiesDuringShrink(t *testing.T, transport string) {
	var stores sync.Map
	defer comm.SetShrinkHook(func(c *comm.Comm, point string) error {
		if point == "in" && c.Rank() == 1 {
			s, _ := stores.Load(1)
			c.Close()
			s.(*bootstrap.Memory).Close()
			return errLeft
		}
		return nil
	})()
	errs := shrinkJob(t, 4, transport, func(ctx context.Context, c *comm.Comm, s *bootstrap.Memory) error {
		me := c.Rank()
		stores.Store(me, s)
		if me == 3 {
			return leave(c, s)
		}
		nc, err := c.Shrink(ctx)
		if err != nil {
			return err
		}
		defer nc.Close()
		if nc.Size() != 2 || nc.Rank() != me/2 {
			return fmt.Errorf("shrunk to rank %d of %d, want %d of 2", nc.Rank(), nc.Size(), me/2)
		}
		if sum, err := sumOfWorldRanks(ctx, nc, me); err != nil || sum != 0+2 {
			return fmt.Errorf("allreduce on the shrunk communicator: %d, %v", sum, err)
		}
		return nil
	})
	assert.NoError(t, errs[0])
	assert.ErrorIs(t, errs[1], errLeft)
	assert.NoError(t, errs[2])
	assert.ErrorIs(t, errs[3], errLeft)
}

// A live rank that does not take part is waited for until ctx ends, and
// the error names it.
func TestShrinkWaitsForLiveRankAndNamesIt(t *testing.T) {
	// Rank 1 stays until both others have given up: its departure would
	// end their wait.
	var others sync.WaitGroup
	others.Add(2)
	errs := shrinkJob(t, 3, "loop", func(ctx context.Context, c *comm.Comm, s *bootstrap.Memory) error {
		if c.Rank() == 1 {
			others.Wait()
			return nil
		}
		defer others.Done()
		sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		nc, err := c.Shrink(sctx)
		if err == nil {
			nc.Close()
			return errors.New("Shrink succeeded without rank 1")
		}
		return err
	})
	for _, r := range []int{0, 2} {
		require.Error(t, errs[r])
		assert.ErrorIs(t, errs[r], context.DeadlineExceeded, "rank %d", r)
		assert.Contains(t, errs[r].Error(), "rank 1 (job rank 1)", "rank %d", r)
	}
}

// Agree gives every survivor the same AND of the survivors' flags and the
// same list of ranks that left, on a communicator that lost a rank.
func TestAgree(t *testing.T) {
	type answer struct {
		all    bool
		failed []int
	}
	got := make([][]answer, 4)
	errs := shrinkJob(t, 4, "loop", func(ctx context.Context, c *comm.Comm, s *bootstrap.Memory) error {
		me := c.Rank()
		if me == 1 {
			return leave(c, s)
		}
		for _, flag := range []bool{true, me != 2} {
			all, failed, err := c.Agree(ctx, flag)
			if err != nil {
				return err
			}
			got[me] = append(got[me], answer{all, failed})
		}
		return nil
	})
	want := []answer{{true, []int{1}}, {false, []int{1}}}
	for _, r := range []int{0, 2, 3} {
		assert.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, want, got[r], "rank %d", r)
	}
}

// Shrinking a shrunk communicator again and again works (its names must
// not grow with each generation) and, without a failure, keeps every rank.
func TestShrinkRepeatedly(t *testing.T) {
	errs := shrinkJob(t, 3, "loop", func(ctx context.Context, c *comm.Comm, s *bootstrap.Memory) error {
		me := c.Rank()
		cur := c
		for gen := range 20 {
			nc, err := cur.Shrink(ctx)
			if err != nil {
				return fmt.Errorf("generation %d: %w", gen, err)
			}
			if cur != c {
				cur.Close()
			}
			cur = nc
			if cur.Size() != 3 || cur.Rank() != me {
				return fmt.Errorf("generation %d: rank %d of %d", gen, cur.Rank(), cur.Size())
			}
			if sum, err := sumOfWorldRanks(ctx, cur, me); err != nil || sum != 3 {
				return fmt.Errorf("generation %d: allreduce %d, %v", gen, sum, err)
			}
		}
		return cur.Close()
	})
	requireOK(t, errs)
}
