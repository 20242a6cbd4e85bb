package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/comm"
)

// iallreduce follows OSU's non-blocking collective benchmarks
// (osu_iallreduce): first t_pure, the time of Iallreduce+Wait alone (timed
// per call, each followed by an untimed barrier, as rdmabench's other
// collective rows); then, with as many calls, each call starts the
// Iallreduce, computes (a busy loop) for this rank's t_pure, and waits:
// t_total is the whole call's time and t_compute the computation's. Each
// figure is averaged over the calls and then over ranks, and
//
//	overlap % = max(0, 100·(1 − (t_total − t_compute)/t_pure))
//
// is the share of the collective hidden behind the computation: 100 when
// it cost nothing beyond the computation, 0 when it did not progress
// until Wait.

// overlapFigures are one rank's per-call means at one size, in seconds.
type overlapFigures struct{ total, compute float64 }

// iallreduceKernel is the t_pure kernel: Iallreduce then Wait.
func (b *runner[T]) iallreduceKernel(size, count int) (kernel, int, int) {
	if count == 0 {
		return nil, 0, 0
	}
	c, rank, p := b.c, b.c.Rank(), b.c.Size()
	s, r := b.send[:count], b.recv[:count]
	if !b.cfg.Validate {
		fill(s, 0, rank, 0)
	}
	iters, skip := 1000, 100
	if size > largeMsg {
		iters, skip = 100, 10
	}
	op := func(ctx context.Context) error {
		rq, err := comm.IallreduceInto(ctx, c, s, r, comm.Sum)
		if err != nil {
			return err
		}
		_, err = rq.Wait(ctx)
		return err
	}
	return b.collLoop(op, func(it int) {
		fill(s, 0, rank, it)
		clear(r)
	}, func(it int) {
		b.expect(r, func(i int) T { return sumPattern[T](i, p, it) }, fmt.Sprintf("iallreduce %d bytes", size), it)
	}), iters, skip
}

// overlapRun runs n calls of Iallreduce, compute for pure, Wait (after
// skip untimed ones), each followed by an untimed barrier, and returns the
// mean time of a call and of its computation. With -c each result is
// checked, outside the timed interval.
func (b *runner[T]) overlapRun(ctx context.Context, count, skip, n int, pure time.Duration) (overlapFigures, error) {
	c, rank, p := b.c, b.c.Rank(), b.c.Size()
	s, r := b.send[:count], b.recv[:count]
	var total, compute time.Duration
	for i := range skip + n {
		it := b.iter
		b.iter++
		if b.cfg.Validate {
			fill(s, 0, rank, it)
			clear(r)
		}
		t0 := time.Now()
		rq, err := comm.IallreduceInto(ctx, c, s, r, comm.Sum)
		if err != nil {
			return overlapFigures{}, err
		}
		tc := busy(pure)
		if _, err := rq.Wait(ctx); err != nil {
			return overlapFigures{}, err
		}
		if i >= skip {
			total += time.Since(t0)
			compute += tc
		}
		if b.cfg.Validate {
			b.expect(r, func(i int) T { return sumPattern[T](i, p, it) }, fmt.Sprintf("iallreduce %d bytes (overlapped)", count), it)
		}
		if err := comm.Barrier(ctx, c); err != nil {
			return overlapFigures{}, err
		}
	}
	return overlapFigures{total: total.Seconds() / float64(n), compute: compute.Seconds() / float64(n)}, nil
}

// busySink keeps busy's arithmetic from being optimised away.
var busySink atomic.Uint64

// busy computes (integer arithmetic, no calls into the runtime that could
// yield) for about d and returns how long it took. It reads the clock
// every few hundred operations, as OSU's dummy compute loop does its
// matrix work in slices.
func busy(d time.Duration) time.Duration {
	t0 := time.Now()
	x := busySink.Load() | 1
	for time.Since(t0) < d {
		for range 256 {
			x = x*6364136223846793005 + 1442695040888963407
		}
	}
	busySink.Store(x)
	return time.Since(t0)
}

// overlapPercent is OSU's overlap from per-call means (any one unit).
func overlapPercent(total, compute, pure float64) float64 {
	if pure <= 0 {
		return 0
	}
	return max(0, 100*(1-(total-compute)/pure))
}
