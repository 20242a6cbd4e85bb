package comm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/comm"
)

// TestPersistentAllreduce: a persistent allreduce started many times over
// one buffer gives each run's reduction, interleaves with other
// collectives in call order, completes in the background without Wait
// (Test only), works through WaitAny, and refuses misuse.
func TestPersistentAllreduce(t *testing.T) {
	for _, tr := range transports {
		for _, p := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/ranks=%d", tr, p), func(t *testing.T) {
				runOK(t, p, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
					for _, n := range []int{0, 1, 5000} {
						if err := persistentRuns(ctx, c, n); err != nil {
							return fmt.Errorf("n=%d: %w", n, err)
						}
					}
					return nil
				})
			})
		}
	}
}

func persistentRuns(ctx context.Context, c *comm.Comm, n int) error {
	p, me := c.Size(), c.Rank()
	buf := make([]int64, n)
	pa, err := comm.AllreduceInit(ctx, c, buf, comm.Sum)
	if err != nil {
		return err
	}
	defer pa.Free()
	if err := pa.Wait(ctx); err != nil { // never started: nothing to wait for
		return fmt.Errorf("Wait before any Start: %w", err)
	}
	other := make([]int64, 3)
	for run := range 6 {
		copy(buf, input(me, n, 50+run))
		if err := pa.Start(ctx); err != nil {
			return err
		}
		if err := pa.Start(ctx); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("a second Start while active: %v", err)
		}
		if err := pa.Free(); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("Free while active: %v", err)
		}
		switch run % 3 {
		case 0: // Wait at once
			err = pa.Wait(ctx)
		case 1: // nobody waits: the background worker must finish it
			for {
				done, terr := pa.Test()
				if done {
					err = terr
					break
				}
				if ctx.Err() != nil {
					return fmt.Errorf("run %d never completed without Wait: %w", run, ctx.Err())
				}
				runtime.Gosched()
			}
		case 2: // with another collective behind it, through WaitAny
			copy(other, input(me, 3, 60+run))
			r, ierr := comm.Iallreduce(ctx, c, other, comm.Max)
			if ierr != nil {
				return ierr
			}
			reqs := []*comm.Request{pa.Request(), r}
			for range 2 {
				i, _, werr := comm.WaitAny(ctx, reqs...)
				if werr != nil {
					return werr
				}
				reqs[i] = nil
			}
			if err := eq("iallreduce behind the persistent one", other, fold(p, 3, 60+run, p, func(a, b int64) int64 { return max(a, b) })); err != nil {
				return err
			}
		}
		if err != nil {
			return fmt.Errorf("run %d: %w", run, err)
		}
		if err := eq(fmt.Sprintf("run %d", run), buf, fold(p, n, 50+run, p, add)); err != nil {
			return err
		}
		// A blocking collective between runs keeps its place in the order.
		if err := comm.Bcast(ctx, c, other, p-1); err != nil {
			return err
		}
	}
	if err := pa.Free(); err != nil {
		return err
	}
	if err := pa.Start(ctx); !errors.Is(err, comm.ErrInvalidArgument) {
		return fmt.Errorf("Start after Free: %v", err)
	}
	return nil
}

// TestPersistentErrors: an op the type does not have fails at
// AllreduceInit; a count that differs between ranks fails every run on
// every rank with ErrMismatch naming the counts, and the communicator
// stays usable.
func TestPersistentErrors(t *testing.T) {
	runOK(t, 3, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		if _, err := comm.AllreduceInit(ctx, c, make([]float32, 4), comm.BAnd); err == nil {
			return errors.New("AllreduceInit of a bitwise and over float32 succeeded")
		}
		n := 4
		if c.Rank() == 1 {
			n = 5
		}
		pa, err := comm.AllreduceInit(ctx, c, make([]int32, n), comm.Sum)
		if err != nil {
			return err
		}
		defer pa.Free()
		for run := range 2 {
			if err := pa.Start(ctx); err != nil {
				return err
			}
			err := pa.Wait(ctx)
			if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "rank 1 has 5 elements") {
				return fmt.Errorf("run %d: want a count mismatch naming rank 1, got %v", run, err)
			}
		}
		return comm.Barrier(ctx, c)
	})
}

// TestBatch: sends and receives posted together complete as one request,
// with per-operation statuses; a batch starts again; bad peers and tags
// fail when added; Cancel ends a batch whose receive nobody matches; a
// batch and a collective mix in WaitAny.
func TestBatch(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 3, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				p, me := c.Size(), c.Rank()
				next, prev := (me+1)%p, (me+p-1)%p
				b := comm.NewBatch(c)
				if err := comm.BatchSend(b, []int32{1}, p, 0); !errors.Is(err, comm.ErrInvalidRank) {
					return fmt.Errorf("BatchSend to rank %d: %v", p, err)
				}
				if err := comm.BatchRecv(b, []int32{1}, 0, -3); !errors.Is(err, comm.ErrInvalidTag) {
					return fmt.Errorf("BatchRecv with tag -3: %v", err)
				}
				if b.Len() != 0 {
					return fmt.Errorf("bad operations were added: %d", b.Len())
				}
				// A halo exchange on a ring: both neighbours, both ways,
				// with a large message among them (rendezvous).
				toNext, toPrev := []int64{int64(me), 1}, make([]int64, 70000)
				for i := range toPrev {
					toPrev[i] = int64(me*100000 + i)
				}
				fromPrev, fromNext := make([]int64, 2), make([]int64, 70000)
				for _, add := range []error{
					comm.BatchSend(b, toNext, next, 1),
					comm.BatchSend(b, toPrev, prev, 2),
					comm.BatchRecv(b, fromPrev, prev, 1),
					comm.BatchRecv(b, fromNext, comm.AnySource, 2),
				} {
					if add != nil {
						return add
					}
				}
				for round := range 2 {
					r, err := b.Start(ctx)
					if err != nil {
						return err
					}
					if _, err := r.Wait(ctx); err != nil {
						return fmt.Errorf("round %d: %w", round, err)
					}
					sts := r.Statuses()
					if len(sts) != 4 || sts[2].Source != prev || sts[2].Count != 2 || sts[3].Source != next || sts[3].Count != 70000 || sts[0].Count != 2 {
						return fmt.Errorf("round %d: statuses %+v", round, sts)
					}
					if fromPrev[0] != int64(prev) || fromNext[69999] != int64(next*100000+69999) {
						return fmt.Errorf("round %d: got %v and ...%v", round, fromPrev, fromNext[69999])
					}
					fromPrev[0], fromNext[69999] = -1, -1
				}
				// Cancel: a receive from the next rank that never sends it.
				lone := comm.NewBatch(c)
				if err := comm.BatchRecv(lone, make([]byte, 4), next, 9); err != nil {
					return err
				}
				r, err := lone.Start(ctx)
				if err != nil {
					return err
				}
				if _, done, _ := r.Test(); done {
					return errors.New("a batch whose receive nobody matches is done")
				}
				r.Cancel()
				if _, err := r.Wait(ctx); !errors.Is(err, comm.ErrCanceled) {
					return fmt.Errorf("canceled batch: %v", err)
				}
				// WaitAny over a batch and a collective.
				pair := comm.NewBatch(c)
				got := make([]int32, 1)
				if err := comm.BatchRecv(pair, got, prev, 3); err != nil {
					return err
				}
				if err := comm.BatchSend(pair, []int32{int32(me)}, next, 3); err != nil {
					return err
				}
				br, err := pair.Start(ctx)
				if err != nil {
					return err
				}
				ar, err := comm.Ibarrier(ctx, c)
				if err != nil {
					return err
				}
				reqs := []*comm.Request{br, ar}
				for range 2 {
					i, _, err := comm.WaitAny(ctx, reqs...)
					if err != nil {
						return err
					}
					reqs[i] = nil
				}
				if got[0] != int32(prev) {
					return fmt.Errorf("batch in WaitAny: got %d from %d", got[0], prev)
				}
				return comm.Barrier(ctx, c)
			})
		})
	}
}

// TestPersistentWorkerModes: a run nobody waits for completes in the
// background whichever way the worker watches for runs: asleep (after a
// Start+Wait, once it has found nothing to run for a while; Start must
// kick it) and napping (right after it ran one; Start does not kick).
func TestPersistentWorkerModes(t *testing.T) {
	for _, tr := range []string{"loop", "shm"} {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 2, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				const n = 100
				me := c.Rank()
				buf := make([]int64, n)
				pa, err := comm.AllreduceInit(ctx, c, buf, comm.Sum)
				if err != nil {
					return err
				}
				defer pa.Free()
				background := func(run int) error {
					copy(buf, input(me, n, run))
					if err := pa.Start(ctx); err != nil {
						return err
					}
					for {
						done, err := pa.Test()
						if done {
							if err != nil {
								return err
							}
							return eq(fmt.Sprintf("run %d", run), buf, fold(2, n, run, 2, add))
						}
						if ctx.Err() != nil {
							return fmt.Errorf("run %d never completed without Wait: %w", run, ctx.Err())
						}
						runtime.Gosched()
					}
				}
				copy(buf, input(me, n, 0))
				if err := pa.Start(ctx); err != nil {
					return err
				}
				if err := pa.Wait(ctx); err != nil {
					return err
				}
				for !pa.WorkerAsleep() { // it napped after the kick; it sleeps once idle
					if ctx.Err() != nil {
						return fmt.Errorf("the worker never went back to sleep: %w", ctx.Err())
					}
					time.Sleep(time.Millisecond)
				}
				if err := background(1); err != nil { // Start kicks the sleeping worker
					return err
				}
				return background(2) // the napping worker finds it (Start does not kick)
			})
		})
	}
}
