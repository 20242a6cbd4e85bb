package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// requireMismatch checks that every rank failed with a count mismatch that
// names the odd rank and both counts.
func requireMismatch(t *testing.T, errs []error, odd int, counts ...int64) {
	t.Helper()
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		require.ErrorIs(t, err, collectives.ErrMismatch, "rank %d", r)
		var m *collectives.MismatchError
		require.ErrorAs(t, err, &m, "rank %d", r)
		require.Equal(t, "count", m.What, "rank %d: %v", r, err)
		assert.True(t, m.Rank == odd || m.Peer == odd, "rank %d: %v does not name rank %d", r, err, odd)
		assert.ElementsMatch(t, counts, []int64{m.Value, m.PeerValue}, "rank %d: %v", r, err)
		var ce *collectives.Error
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, r, ce.Rank)
	}
}

// TestCountMismatch: one rank passes a different count; every rank gets an
// error naming the ranks and both counts, for every algorithm, including
// counts so different that the cost model would pick different algorithms.
func TestCountMismatch(t *testing.T) {
	t.Parallel()
	type cs struct {
		coll collectives.Collective
		run  func(ctx context.Context, e *collectives.Engine, n int) error
	}
	cases := []cs{
		{collectives.CollAllreduce, func(ctx context.Context, e *collectives.Engine, n int) error {
			return collectives.Allreduce(ctx, e, make([]float32, n), reduce.Sum)
		}},
		{collectives.CollBcast, func(ctx context.Context, e *collectives.Engine, n int) error {
			return collectives.Bcast(ctx, e, make([]int16, n), 0)
		}},
		{collectives.CollAllgather, func(ctx context.Context, e *collectives.Engine, n int) error {
			return collectives.Allgather(ctx, e, make([]int32, n), make([]int32, n*e.Size()))
		}},
		{collectives.CollReduceScatter, func(ctx context.Context, e *collectives.Engine, n int) error {
			return collectives.ReduceScatter(ctx, e, make([]int32, n*e.Size()), make([]int32, n), reduce.Sum)
		}},
		{collectives.CollAlltoall, func(ctx context.Context, e *collectives.Engine, n int) error {
			return collectives.Alltoall(ctx, e, make([]int32, n*e.Size()), make([]int32, n*e.Size()))
		}},
		{collectives.CollScan, func(ctx context.Context, e *collectives.Engine, n int) error {
			return collectives.Scan(ctx, e, make([]int32, n), reduce.Sum)
		}},
		{collectives.CollReduce, func(ctx context.Context, e *collectives.Engine, n int) error {
			return collectives.Reduce(ctx, e, make([]int32, n), reduce.Sum, 0)
		}},
	}
	for _, c := range cases {
		algs := append([]collectives.Algorithm{collectives.Auto}, collectives.Algorithms(c.coll)...)
		for _, alg := range algs {
			ps := []int{2, 3, 5, 8}
			if raceEnabled && !long {
				ps = []int{2, 5}
			}
			// Auto also runs with shared memory, where the ranks with the
			// large count leave the shared-memory algorithms for another.
			shared := []bool{false}
			if alg == collectives.Auto {
				shared = append(shared, true)
			}
			for _, p := range ps {
				for _, nn := range [][2]int{{7, 8}, {1000, 3}, {0, 1}, {1, 1 << 16}} {
					for _, sh := range shared {
						t.Run(name("coll", c.coll, "alg", alg, "p", p, "n", nn, "shared", sh), func(t *testing.T) {
							odd := p - 1
							if c.coll == collectives.CollBcast || c.coll == collectives.CollReduce {
								odd = p / 2 // not the root, which may finish before anyone checks
							}
							wo := worldFor(alg, p)
							wo.Shared = wo.Shared || sh
							errs := world(t, p, wo, force(c.coll, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
								n := nn[0]
								if r == odd {
									n = nn[1]
								}
								// A second call afterwards must work again (sequence numbers stay in step).
								err := c.run(ctx, e, n)
								if err2 := collectives.Barrier(ctx, e); err2 != nil {
									return fmt.Errorf("barrier after mismatch: %w (first error %v)", err2, err)
								}
								return err
							})
							if c.coll == collectives.CollBcast || c.coll == collectives.CollReduce || c.coll == collectives.CollScan {
								// One-way data flow: the ranks that receive from a
								// rank with another count fail; a rank whose part
								// was done before (a pure sender, a scan prefix
								// that does not include the odd rank) may finish.
								// Nobody hangs. Debug makes every rank fail.
								failed := 0
								for r, err := range errs {
									if err != nil {
										failed++
										require.ErrorIs(t, err, collectives.ErrMismatch, "rank %d", r)
										require.NotErrorIs(t, err, context.DeadlineExceeded, "rank %d", r)
									}
								}
								require.NotZero(t, failed)
								return
							}
							requireMismatch(t, errs, odd, int64(nn[0]), int64(nn[1]))
						})
					}
				}
			}
		}
	}
}

func TestDebugFingerprint(t *testing.T) {
	t.Parallel()
	debug := collectives.Options{Debug: true}
	t.Run("op", func(t *testing.T) {
		errs := world(t, 4, coltest.Options{}, debug, func(ctx context.Context, e *collectives.Engine, r int) error {
			op := reduce.Sum
			if r == 2 {
				op = reduce.Max
			}
			return collectives.Allreduce(ctx, e, []int32{1, 2}, op)
		})
		for r, err := range errs {
			var m *collectives.MismatchError
			require.ErrorAs(t, err, &m, "rank %d", r)
			require.Equal(t, "op", m.What)
			require.Equal(t, 0, m.Rank)
			require.Equal(t, 2, m.Peer)
			require.ErrorContains(t, err, "op mismatch: rank 0 has sum, rank 2 has max")
		}
	})
	t.Run("root", func(t *testing.T) {
		errs := world(t, 3, coltest.Options{}, debug, func(ctx context.Context, e *collectives.Engine, r int) error {
			root := 0
			if r == 1 {
				root = 2
			}
			return collectives.Bcast(ctx, e, []int32{1, 2}, root)
		})
		for r, err := range errs {
			require.ErrorContains(t, err, "root mismatch: rank 0 has 0, rank 1 has 2", "rank %d", r)
		}
	})
	t.Run("type", func(t *testing.T) {
		errs := world(t, 2, coltest.Options{}, debug, func(ctx context.Context, e *collectives.Engine, r int) error {
			if r == 1 {
				return collectives.Bcast(ctx, e, []float32{1, 2}, 0)
			}
			return collectives.Bcast(ctx, e, []int32{1, 2}, 0)
		})
		for r, err := range errs {
			require.ErrorContains(t, err, "type mismatch: rank 0 has int32, rank 1 has float32", "rank %d", r)
		}
	})
	t.Run("count in bcast reaches every rank", func(t *testing.T) {
		errs := world(t, 5, coltest.Options{}, debug, func(ctx context.Context, e *collectives.Engine, r int) error {
			n := 10
			if r == 3 {
				n = 11
			}
			return collectives.Bcast(ctx, e, make([]int32, n), 0)
		})
		for r, err := range errs {
			require.ErrorContains(t, err, "count mismatch: rank 0 has 10 elements, rank 3 has 11 elements", "rank %d", r)
		}
	})
	t.Run("agreeing calls pass", func(t *testing.T) {
		errs := world(t, 3, coltest.Options{}, debug, func(ctx context.Context, e *collectives.Engine, r int) error {
			buf := []int64{int64(r)}
			if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
				return err
			}
			if buf[0] != 3 {
				return fmt.Errorf("got %d", buf[0])
			}
			return nil
		})
		requireAllOK(t, errs)
	})
}

// TestInvalidArgumentOnOneRank: a rank with bad arguments fails at once and
// the others learn it instead of waiting.
func TestInvalidArgumentOnOneRank(t *testing.T) {
	t.Parallel()
	errs := world(t, 4, coltest.Options{}, collectives.Options{}, func(ctx context.Context, e *collectives.Engine, r int) error {
		recv := make([]int32, 8)
		if r == 1 {
			recv = recv[:5]
		}
		err := collectives.Allgather(ctx, e, []int32{1, 2}, recv)
		if err2 := collectives.Barrier(ctx, e); err2 != nil {
			return fmt.Errorf("barrier afterwards: %w", err2)
		}
		return err
	})
	require.ErrorIs(t, errs[1], collectives.ErrInvalidArgument)
	require.ErrorContains(t, errs[1], "recv has 5 elements, want 8")
	for _, r := range []int{0, 2, 3} {
		var pe *collectives.PeerError
		require.ErrorAs(t, errs[r], &pe, "rank %d", r)
		require.Equal(t, 1, pe.Rank)
		require.ErrorIs(t, errs[r], collectives.ErrInvalidArgument)
	}
	// Bad root, unsupported op, non-commutative op with a forced ring.
	errs = world(t, 2, coltest.Options{}, force(collectives.CollAllreduce, collectives.Ring), func(ctx context.Context, e *collectives.Engine, r int) error {
		if err := collectives.Bcast(ctx, e, []int32{1}, 5); !errors.Is(err, collectives.ErrInvalidArgument) {
			return fmt.Errorf("bad root: %v", err)
		}
		if err := collectives.Allreduce(ctx, e, []float32{1}, reduce.BXor); !errors.Is(err, collectives.ErrUnsupported) {
			return fmt.Errorf("bxor on float32: %v", err)
		}
		last := reduce.Func("last", false, func(a, b []int32) { copy(a, b) })
		if err := collectives.Allreduce(ctx, e, []int32{1}, last); !errors.Is(err, collectives.ErrInvalidArgument) {
			return fmt.Errorf("non-commutative on ring: %v", err)
		}
		return nil
	})
	requireAllOK(t, errs)
}

// TestPeerLost kills a rank in the middle of a stream of collectives; every
// survivor must fail with an error naming it, and nobody may hang.
func TestPeerLost(t *testing.T) {
	t.Parallel()
	type op func(ctx context.Context, e *collectives.Engine) error
	ops := map[string]op{
		"allreduce": func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Allreduce(ctx, e, make([]float64, 1000), reduce.Sum)
		},
		"bcast": func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Bcast(ctx, e, make([]float64, 1000), 0)
		},
		"alltoall": func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Alltoall(ctx, e, make([]int32, 4*e.Size()), make([]int32, 4*e.Size()))
		},
		"barrier": func(ctx context.Context, e *collectives.Engine) error { return collectives.Barrier(ctx, e) },
	}
	for opName, f := range ops {
		for _, alg := range append([]collectives.Algorithm{collectives.Auto}, collectives.Algorithms(collectives.CollAllreduce)...) {
			if opName != "allreduce" && alg != collectives.Auto {
				continue
			}
			for _, p := range []int{2, 5, 8} {
				for _, after := range []int{1, 3, 17} {
					t.Run(name("op", opName, "alg", alg, "p", p, "after", after), func(t *testing.T) {
						dead := p / 2
						if opName == "bcast" {
							dead = 0 // the root: the only rank that sends to rank 1 when p=2
						}
						wo := worldFor(alg, p)
						wo.FailRank, wo.FailAfter = dead, after
						var errs []error
						if alg == collectives.SharedMemory {
							// No messages to count: the dead rank dies
							// after its after-th call instead.
							errs = shmWorld(t, p, wo, force(collectives.CollAllreduce, alg), dead, after, f)
						} else {
							errs = world(t, p, wo, force(collectives.CollAllreduce, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
								for i := 0; i < 100; i++ { // until the death is noticed
									if err := f(ctx, e); err != nil {
										return err
									}
								}
								return nil
							})
						}
						for r, err := range errs {
							require.Error(t, err, "rank %d", r)
							require.False(t, errors.Is(err, context.DeadlineExceeded), "rank %d hung: %v", r, err)
							var pl *coltest.PeerLostError
							require.ErrorAs(t, err, &pl, "rank %d: %v", r, err)
							require.Equal(t, dead, pl.Rank)
						}
					})
				}
			}
		}
	}
}

// TestDeadlineNamesPeer: a rank that never joins makes the others time out
// with an error that says whom they were waiting for.
func TestDeadlineNamesPeer(t *testing.T) {
	t.Parallel()
	w := coltest.NewWorld(2, coltest.Options{})
	e, err := collectives.New(w.Group(0), collectives.Options{})
	require.NoError(t, err)
	defer e.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err = collectives.Allreduce(ctx, e, []int32{1}, reduce.Sum)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var ce *collectives.Error
	require.ErrorAs(t, err, &ce)
	require.Equal(t, 1, ce.Peer, "%v", err)
	require.ErrorContains(t, err, "peer 1: context deadline exceeded: had not arrived")
}

// TestConcurrentCallsRejected: the Engine refuses a second collective while
// one runs (the concurrency contract), instead of cross-matching messages.
func TestConcurrentCallsRejected(t *testing.T) {
	t.Parallel()
	w := coltest.NewWorld(2, coltest.Options{})
	e, err := collectives.New(w.Group(0), collectives.Options{})
	require.NoError(t, err)
	defer e.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- collectives.Barrier(ctx, e) }() // rank 1 never comes
	// The barrier must be the call that runs: a Bcast that began first
	// would find no peer needed and end, and the barrier be the one refused.
	require.Eventually(t, func() bool {
		a := e.Activity()
		return a.Running && a.Op == "barrier"
	}, 5*time.Second, time.Millisecond)
	require.Eventually(t, func() bool {
		err := collectives.Bcast(context.Background(), e, []int32{1}, 0)
		return errors.Is(err, collectives.ErrInvalidArgument)
	}, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	require.NoError(t, e.Close())
	require.ErrorIs(t, collectives.Barrier(context.Background(), e), collectives.ErrClosed)
}

// shmWorld is world for a shared-memory group whose rank dead is killed
// (coltest.World.Kill) once it has made after calls of f.
func shmWorld(t *testing.T, p int, wo coltest.Options, eo collectives.Options, dead, after int, f func(context.Context, *collectives.Engine) error) []error {
	t.Helper()
	w := coltest.NewWorld(p, wo)
	return runWorld(w, eo, func(ctx context.Context, e *collectives.Engine, rank int) error {
		for i := 0; i < 100; i++ {
			if rank == dead && i == after {
				w.Kill(dead)
			}
			if err := f(ctx, e); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestPanickingOpReleasesEngine: a user op that panics takes the panic
// to the caller, and the call still ends: the Engine closes instead of
// waiting forever for the call's locks.
func TestPanickingOpReleasesEngine(t *testing.T) {
	t.Parallel()
	boom := reduce.Func("boom", true, func(a, b []int32) { panic("boom") })
	for _, alg := range []collectives.Algorithm{collectives.SharedMemory, collectives.RecursiveDoubling} {
		t.Run(alg.String(), func(t *testing.T) {
			done := make(chan []error, 1)
			go func() {
				done <- world(t, 2, worldFor(alg, 2), force(collectives.CollAllreduce, alg), func(ctx context.Context, e *collectives.Engine, r int) (err error) {
					defer func() {
						if p := recover(); p != nil {
							err = fmt.Errorf("panicked: %v", p)
						}
					}()
					return collectives.Allreduce(ctx, e, make([]int32, 100), boom)
				})
			}()
			select {
			case errs := <-done:
				for r, err := range errs {
					require.ErrorContains(t, err, "panicked: boom", "rank %d", r)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("the ranks did not return (and close their Engines) after the op panicked")
			}
		})
	}
}

// TestSharedMemoryCallAfterLoss: once the group has failed, a shared-memory
// call fails at its start on every rank, even when all ranks are there to
// finish it (their waits would never look at the group).
func TestSharedMemoryCallAfterLoss(t *testing.T) {
	t.Parallel()
	for _, p := range []int{2, 3} {
		t.Run(name("p", p), func(t *testing.T) {
			w := coltest.NewWorld(p, worldFor(collectives.SharedMemory, p))
			w.Kill(p - 1)
			errs := runWorld(w, force(collectives.CollAllreduce, collectives.SharedMemory), func(ctx context.Context, e *collectives.Engine, r int) error {
				return collectives.Allreduce(ctx, e, []float64{1, 2, 3}, reduce.Sum)
			})
			for r, err := range errs {
				var pl *coltest.PeerLostError
				require.ErrorAs(t, err, &pl, "rank %d: %v", r, err)
				require.Equal(t, p-1, pl.Rank)
			}
		})
	}
}

// TestCloseEndsWaitingSharedMemoryCall: Close while a shared-memory call
// waits for a peer that never comes makes the call give up with
// ErrClosed; Close returns only after the call has let go of the region,
// and later calls fail with ErrClosed.
func TestCloseEndsWaitingSharedMemoryCall(t *testing.T) {
	t.Parallel()
	w := coltest.NewWorld(2, coltest.Options{Shared: true})
	e, err := collectives.New(w.Group(0), force(collectives.CollAllreduce, collectives.SharedMemory))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- collectives.Allreduce(ctx, e, []int32{1}, reduce.Sum) }() // rank 1 never comes
	require.Eventually(t, func() bool {
		a := e.Activity()
		return a.Running && a.Op == "allreduce" && a.Peer == 1
	}, 10*time.Second, time.Millisecond)
	closed := make(chan error, 1)
	go func() { closed <- e.Close() }()
	select {
	case err := <-done:
		require.ErrorIs(t, err, collectives.ErrClosed)
		require.Equal(t, "shared_memory", e.LastAlgorithm().String())
	case <-ctx.Done():
		t.Fatal("the waiting call did not end after Close")
	}
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("Close did not return")
	}
	require.ErrorIs(t, collectives.Allreduce(ctx, e, []int32{1}, reduce.Sum), collectives.ErrClosed)
}
