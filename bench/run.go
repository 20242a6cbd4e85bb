package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"runtime/metrics"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/comm"
)

// Methodology (OSU's, as the shared mpibench tool follows it):
//
//   - latency: ping-pong between ranks 0 and 1 with blocking Send/Recv; the
//     figure is half the round trip, averaged over the timed iterations.
//   - bw: rank 0 posts a window of 64 Isends of one buffer, waits for all,
//     then for a 4-byte acknowledgement from rank 1 (which posted 64
//     Irecvs); MB/s = size·64·iterations / time / 10^6. bibw: both ranks
//     post 64 Irecvs and 64 Isends each window; twice the bytes.
//   - put_latency (osu_put_latency, flush synchronisation): rank 0 Puts one
//     buffer into rank 1's window (AllocWin memory, as MPI_Win_allocate)
//     and Flushes, each iteration; the figure is the time per Put+Flush,
//     not halved. Rank 1 takes no part (with -c it waits for a PutSignal,
//     checks the data and acknowledges, outside rank 0's timed interval).
//   - put_bw (osu_put_bw): rank 0 starts a window of 64 Puts, then
//     Flushes; MB/s = size·64·iterations / time / 10^6. All Puts of a
//     window go to offset 0 of the target (OSU spreads them over a window
//     64 times larger), so the target window is the largest size.
//   - iallreduce (osu_iallreduce): t_pure, then the overlap of the
//     collective with a computation as long (see overlap.go).
//   - collectives: every call is timed on its own and followed by an untimed
//     barrier, so that one call's stragglers do not run into the next; each
//     rank's figure is its mean, and the table shows the mean, minimum and
//     maximum over ranks. barrier: back-to-back barriers.
//
// Iteration counts default to OSU's (latency 10000 with 100 warm-up, 1000 and
// 10 above 8 KiB; bw 100/10, 20/2; collectives 1000/100, 100/10), capped so
// that each size takes about --budget (at least 5 timed iterations); rank 0
// decides the counts from a short calibration and broadcasts them, so every
// rank runs the same number of calls. -i and -x fix them instead.
//
// With -c every iteration gets fresh data (a pattern of element index, rank
// and iteration number, small integers so that sums are exact in every
// element type and summation order), receive buffers are cleared first, and
// every result is checked after the call; filling and checking are outside
// the timed interval (each iteration is then timed on its own).

const (
	window      = 64
	largeMsg    = 8192
	tagPingPong = 1
	tagBW       = 100
	tagAck      = 101
)

// errValidation ends a sweep whose results were wrong.
var errValidation = errors.New("validation failed")

// kernel runs n iterations of one test at one size and returns the time this
// rank attributes to the measured operation, in seconds.
type kernel func(ctx context.Context, n int) (float64, error)

type runner[T comm.Element] struct {
	c         *comm.Comm
	win       *comm.Win[T]     // put_latency and put_bw
	pers      *comm.Persistent // allreduce --api persistent: the current size's
	ctx       context.Context  // the sweep's, for put_*'s -c acknowledgements (outside the timed op)
	cfg       config
	send      []T
	recv      []T
	iter      int    // iterations run so far; part of the -c pattern
	algo      string // the algorithm the latest timed collective ran
	errs      int    // wrong results seen at this size
	firstErr  string // the first of them, for the report
	progress  io.Writer
	startedAt time.Time
	warmed    bool   // a size has been measured (see measure)
	allocAtGC uint64 // heap bytes allocated so far at the last collection (see collectIfAllocated)
}

func newRunner[T comm.Element](c *comm.Comm, cfg config, progress io.Writer) *runner[T] {
	es := int(unsafe.Sizeof(T(0)))
	maxCount := cfg.Max / es
	p := c.Size()
	n := maxCount
	switch cfg.Test {
	case "allgather", "alltoall":
		n = maxCount * p
	}
	b := &runner[T]{c: c, cfg: cfg, send: make([]T, n), recv: make([]T, n), progress: progress}
	touch(b.send)
	touch(b.recv)
	return b
}

// touch writes every page of buf once, as OSU's benchmarks (and
// mpibench) memset their buffers before the first size: otherwise each
// size's first calls fault in its new pages, which would go into the
// calibration that sets the iteration count.
func touch[T comm.Element](buf []T) {
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(buf))), len(buf)*int(unsafe.Sizeof(T(0))))
	for i := 0; i < len(b); i += 4096 {
		b[i] = 0
	}
}

// pattern is the -c value of element i from rank r in iteration it.
func pattern[T comm.Element](i, r, it int) T { return T((i+7*r+3*it)%13 + 1) }

func fill[T comm.Element](buf []T, off, r, it int) {
	for i := range buf {
		buf[i] = pattern[T](off+i, r, it)
	}
}

// sumPattern is Σ over p ranks of pattern(i, r, it), converted as the
// library's integer arithmetic wraps.
func sumPattern[T comm.Element](i, p, it int) T {
	s := 0
	for r := range p {
		s += (i+7*r+3*it)%13 + 1
	}
	return T(s)
}

// expect records a wrong element (the first one of a call is enough).
func (b *runner[T]) expect(buf []T, want func(i int) T, what string, it int) {
	for i, v := range buf {
		if w := want(i); v != w {
			b.errs++
			if b.firstErr == "" {
				b.firstErr = fmt.Sprintf("rank %d: %s, iteration %d: element %d is %v, want %v", b.c.Rank(), what, it, i, v, w)
			}
			return
		}
	}
}

// sweep runs the test over every size and calls emit with each finished row
// (on rank 0; the other ranks' rows are nil). It stops at the first error;
// the rows emitted so far stand.
func (b *runner[T]) sweep(ctx context.Context, emit func(Row)) error {
	es := int(unsafe.Sizeof(T(0)))
	sizes := sizeList(b.cfg.Min, b.cfg.Max)
	if b.cfg.Test == "barrier" {
		sizes = []int{0}
	}
	if b.cfg.Test == "put_latency" || b.cfg.Test == "put_bw" {
		w, err := comm.AllocWin[T](ctx, b.c, b.cfg.Max/es)
		if err != nil {
			return err
		}
		b.win = w
		defer w.Close(ctx)
	}
	defer func() {
		if b.pers != nil {
			b.pers.Free()
		}
	}()
	b.ctx = ctx
	b.startedAt = time.Now()
	for idx, size := range sizes {
		count := size / es
		k, osuIters, osuSkip := b.kernel(size, count)
		if k == nil {
			continue // no whole element (or block) at this size
		}
		b.errs, b.firstErr = 0, ""
		t, iters, err := b.measure(ctx, k, osuIters, osuSkip)
		if err != nil {
			return err
		}
		if b.cfg.Validate {
			bad := []int64{int64(b.errs)}
			if err := comm.Allreduce(ctx, b.c, bad, comm.Sum); err != nil {
				return err
			}
			if b.firstErr != "" {
				fmt.Fprintf(b.progress, "rdmabench: %s\n", b.firstErr)
			}
			if bad[0] != 0 {
				return fmt.Errorf("%w: %s at %d bytes: %d wrong results over all ranks", errValidation, b.cfg.Test, size, bad[0])
			}
		}
		row := Row{Size: size, Iters: iters}
		var ov overlapFigures
		if b.cfg.Test == "iallreduce" {
			pure := time.Duration(t * 1e9 / float64(iters))
			if ov, err = b.overlapRun(ctx, count, min(osuSkip, 10), iters, pure); err != nil {
				return err
			}
		}
		switch {
		case b.cfg.Test == "latency":
			row.Latency = t * 1e6 / float64(2*iters)
		case b.cfg.Test == "put_latency":
			row.Latency = t * 1e6 / float64(iters)
		case b.cfg.Test == "bw", b.cfg.Test == "put_bw":
			row.Bandwidth = float64(size) / 1e6 * float64(iters*window) / t
		case b.cfg.Test == "bibw":
			row.Bandwidth = 2 * float64(size) / 1e6 * float64(iters*window) / t
		case b.cfg.Test == "iallreduce":
			// Means over ranks of each figure, then OSU's overlap from them.
			all := make([]float64, 3*b.c.Size())
			mine := []float64{ov.total * 1e6, ov.compute * 1e6, t * 1e6 / float64(iters)}
			if err := comm.Gather(ctx, b.c, mine, all, 0); err != nil {
				return err
			}
			var sum [3]float64
			for i, v := range all {
				sum[i%3] += v
			}
			n := float64(b.c.Size())
			row.Latency, row.Compute, row.Pure = sum[0]/n, sum[1]/n, sum[2]/n
			row.Overlap = overlapPercent(row.Latency, row.Compute, row.Pure)
			row.Algorithm = b.algo
		default:
			lats := make([]float64, b.c.Size())
			if err := comm.Gather(ctx, b.c, []float64{t * 1e6 / float64(iters)}, lats, 0); err != nil {
				return err
			}
			row.Min, row.Max = lats[0], lats[0]
			sum := 0.0
			for _, l := range lats {
				sum += l
				row.Min, row.Max = min(row.Min, l), max(row.Max, l)
			}
			row.Latency = sum / float64(len(lats))
			row.Algorithm = b.algo
			if b.cfg.PerRank {
				row.Ranks = lats
			}
			if b.cfg.BusBW {
				fillBW(&row, b.cfg.Test, b.c.Size())
			}
		}
		if b.c.Rank() == 0 {
			emit(row)
			if el := time.Since(b.startedAt); !b.cfg.Quiet && el > 2*time.Second {
				fmt.Fprintf(b.progress, "rdmabench: %s %d bytes done (%d/%d sizes, %.1fs)\n", b.cfg.Test, size, idx+1, len(sizes), el.Seconds())
			}
		}
	}
	return nil
}

// measure warms up, settles the iteration count and runs the timed loop.
func (b *runner[T]) measure(ctx context.Context, k kernel, osuIters, osuSkip int) (float64, int, error) {
	// The previous size's (or the set-up's) garbage goes now, before the
	// warm-up, which then also absorbs the collection's after-effects.
	b.collectIfAllocated()
	if err := comm.Barrier(ctx, b.c); err != nil {
		return 0, 0, err
	}
	if b.cfg.Iters > 0 && b.cfg.Warmup >= 0 {
		if b.cfg.Warmup > 0 {
			if _, err := k(ctx, b.cfg.Warmup); err != nil {
				return 0, 0, err
			}
		}
		b.collectIfAllocated()
		if err := comm.Barrier(ctx, b.c); err != nil {
			return 0, 0, err
		}
		t, err := k(ctx, b.cfg.Iters)
		return t, b.cfg.Iters, err
	}

	// Calibrate: one call (first touch, connection set-up), then a batch of
	// up to 4 (only 1 if the first was already slow) whose wall time per
	// call sizes the rest.
	t0 := time.Now()
	if _, err := k(ctx, 1); err != nil {
		return 0, 0, err
	}
	w1 := min(osuSkip-1, 4)
	if w1 < 1 || time.Since(t0) > 5*time.Millisecond {
		w1 = 1
	}
	plan := []int64{int64(w1), 0, 0}
	if err := comm.Bcast(ctx, b.c, plan[:1], 0); err != nil {
		return 0, 0, err
	}
	w1 = int(plan[0])
	if err := comm.Barrier(ctx, b.c); err != nil {
		return 0, 0, err
	}
	t0 = time.Now()
	if _, err := k(ctx, w1); err != nil {
		return 0, 0, err
	}
	per := time.Since(t0).Seconds() / float64(w1)
	if !b.warmed && b.cfg.Warmup < 0 {
		var err error
		if per, err = b.warmJob(ctx, k, w1, per); err != nil {
			return 0, 0, err
		}
	}
	if b.c.Rank() == 0 {
		rest, it := b.cfg.counts(osuIters, osuSkip, w1, per)
		plan[1], plan[2] = int64(rest), int64(it)
	}
	if err := comm.Bcast(ctx, b.c, plan[1:], 0); err != nil {
		return 0, 0, err
	}
	// The calibration's garbage goes before the rest of the warm-up, which
	// then absorbs the collection's after-effects (see settleAfterGC).
	b.collectIfAllocated()
	if plan[1] > 0 {
		if _, err := k(ctx, int(plan[1])); err != nil {
			return 0, 0, err
		}
	}
	if err := comm.Barrier(ctx, b.c); err != nil {
		return 0, 0, err
	}
	t, err := k(ctx, int(plan[2]))
	b.warmed = true
	return t, int(plan[2]), err
}

// counts decides a size's further warm-up and timed iterations from OSU's
// counts, the w1 calls of the calibration batch and the time per call it
// measured: the warm-up capped by the warm-up budget, the timed loop by
// the budget (at least 5 calls); -x and -i fix them instead.
func (cfg *config) counts(osuIters, osuSkip, w1 int, per float64) (rest, it int) {
	rest = max(osuSkip-1-w1, 0)
	if per > 0 {
		rest = max(rest, int(math.Ceil(settleAfterGC.Seconds()/per-1e-9)))
	}
	if warm := cfg.warmBudget().Seconds(); per > 0 && float64(rest)*per > warm {
		rest = int(warm / per)
	}
	if cfg.Warmup >= 0 {
		rest = max(cfg.Warmup-1-w1, 0)
	}
	budget := cfg.Budget.Seconds()
	it = osuIters
	if per > 0 && float64(it)*per > budget {
		it = int(budget / per)
	}
	it = max(it, 5)
	if cfg.Iters > 0 {
		it = cfg.Iters
	}
	return rest, it
}

// settleAfterGC is the least warm-up a size runs after measure's
// collection, before its timed loop: a loop of 1000 small calls started
// right after one ran about 1 ms slower in all (the 2-rank iallreduce's
// first size, whose set-up allocates the most, measured 1.3-2.3 µs for a
// 0.6 µs call in two of three runs), as after any pause on a VM.
const settleAfterGC = 2 * time.Millisecond

// gcAfterBytes is how much the set-up and warm-up of a size may allocate
// before measure collects garbage ahead of the timed loop.
const gcAfterBytes = 1 << 20

// collectIfAllocated runs the garbage collector before a timed loop when
// the size's set-up and warm-up allocated more than gcAfterBytes since the
// last collection, so that their garbage is not collected inside the loop
// (what Go's testing package does before each benchmark, but only when
// there is garbage). Collecting before every size cost far more than it
// saved: the collection's pause idles the rank for a moment, and on a VM
// the next milliseconds then run slower (as after any sleep), which a
// 1000-iteration loop never outlasts. The loops of the shm transport
// allocate nothing.
func (b *runner[T]) collectIfAllocated() {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		runtime.GC()
		return
	}
	if a := s[0].Value.Uint64(); a-b.allocAtGC > gcAfterBytes {
		runtime.GC()
		b.allocAtGC = a
	}
}

// warmJob warms the job up on its first size (first touches of memory,
// caches, the runtime's first collections, the host settling the vCPUs):
// batches of doubling size until a whole budget has passed, as rank 0
// decides. It returns the time per call of the last batch, so that the
// iteration count rests on warm figures: calibrated on the cold first
// calls, a sweep's first size ran a few thousand iterations averaging
// 1.6-3 µs for a 0.8 µs ping-pong.
func (b *runner[T]) warmJob(ctx context.Context, k kernel, n int, per float64) (float64, error) {
	spent := per * float64(n)
	for {
		next := []int64{0}
		if b.c.Rank() == 0 && spent < b.cfg.Budget.Seconds() {
			next[0] = int64(2 * n)
		}
		if err := comm.Bcast(ctx, b.c, next, 0); err != nil {
			return 0, err
		}
		if next[0] == 0 {
			return per, nil
		}
		n = int(next[0])
		t0 := time.Now()
		if _, err := k(ctx, n); err != nil {
			return 0, err
		}
		d := time.Since(t0).Seconds()
		per, spent = d/float64(n), spent+d
	}
}

// kernel returns the test's kernel for one size (count elements of T) and
// OSU's iteration and warm-up counts for it; nil if the size holds no whole
// element or block.
func (b *runner[T]) kernel(size, count int) (kernel, int, int) {
	c, rank, p := b.c, b.c.Rank(), b.c.Size()
	large := size > largeMsg
	collIters, collSkip := 1000, 100
	if large {
		collIters, collSkip = 100, 10
	}
	v := b.cfg.Validate
	switch b.cfg.Test {
	case "latency":
		if rank > 1 {
			return idle, 1000, 100
		}
		s, r, peer := b.send[:count], b.recv[:count], 1-rank
		if !v {
			fill(s, 0, rank, 0)
		}
		var op func(ctx context.Context) error
		if rank == 0 {
			op = func(ctx context.Context) error {
				if err := comm.Send(ctx, c, s, peer, tagPingPong); err != nil {
					return err
				}
				_, err := comm.Recv(ctx, c, r, peer, tagPingPong)
				return err
			}
		} else {
			op = func(ctx context.Context) error {
				if _, err := comm.Recv(ctx, c, r, peer, tagPingPong); err != nil {
					return err
				}
				return comm.Send(ctx, c, s, peer, tagPingPong)
			}
		}
		iters, skip := 10000, 100
		if large {
			iters, skip = 1000, 10
		}
		return b.loop(op, func(it int) {
			fill(s, 0, rank, it)
			clear(r)
		}, func(it int) {
			b.expect(r, func(i int) T { return pattern[T](i, peer, it) }, fmt.Sprintf("latency %d bytes from rank %d", size, peer), it)
		}), iters, skip

	case "bw", "bibw":
		if count == 0 || rank > 1 {
			if count == 0 {
				return nil, 0, 0
			}
			return idle, 100, 10
		}
		s, r, peer := b.send[:count], b.recv[:count], 1-rank
		if !v {
			fill(s, 0, rank, 0)
		}
		bi := b.cfg.Test == "bibw"
		reqs := make([]*comm.Request, 0, 2*window)
		ack := make([]T, max(4/int(unsafe.Sizeof(T(0))), 1))
		op := func(ctx context.Context) error {
			reqs = reqs[:0]
			if bi || rank == 1 {
				for range window {
					rq, err := comm.Irecv(ctx, c, r, peer, tagBW)
					if err != nil {
						return err
					}
					reqs = append(reqs, rq)
				}
			}
			if bi || rank == 0 {
				for range window {
					rq, err := comm.Isend(ctx, c, s, peer, tagBW)
					if err != nil {
						return err
					}
					reqs = append(reqs, rq)
				}
			}
			if err := comm.WaitAll(ctx, reqs...); err != nil {
				return err
			}
			comm.ReleaseAll(reqs...) // reused: the loop allocates nothing per message
			if bi {
				return nil
			}
			if rank == 1 {
				return comm.Send(ctx, c, ack, 0, tagAck)
			}
			_, err := comm.Recv(ctx, c, ack, 1, tagAck)
			return err
		}
		iters, skip := 100, 10
		if large {
			iters, skip = 20, 2
		}
		receives := bi || rank == 1
		return b.loop(op, func(it int) {
			fill(s, 0, rank, it)
			clear(r)
		}, func(it int) {
			if receives {
				b.expect(r, func(i int) T { return pattern[T](i, peer, it) }, fmt.Sprintf("%s %d bytes from rank %d", b.cfg.Test, size, peer), it)
			}
		}), iters, skip

	case "put_latency", "put_bw":
		return b.putKernel(size, count)

	case "iallreduce":
		return b.iallreduceKernel(size, count)

	case "barrier":
		return func(ctx context.Context, n int) (float64, error) {
			t0 := time.Now()
			for range n {
				if err := comm.Barrier(ctx, c); err != nil {
					return 0, err
				}
			}
			el := time.Since(t0).Seconds()
			b.algo = c.LastAlgorithm()
			return el, nil
		}, 1000, 100

	case "allreduce", "reduce":
		if count == 0 {
			return nil, 0, 0
		}
		s, r := b.send[:count], b.recv[:count]
		if !v {
			fill(s, 0, rank, 0)
		}
		op := func(ctx context.Context) error { return comm.AllreduceInto(ctx, c, s, r, comm.Sum) }
		prep := func(it int) {
			fill(s, 0, rank, it)
			clear(r)
		}
		switch {
		case b.cfg.Test == "reduce":
			op = func(ctx context.Context) error { return comm.ReduceInto(ctx, c, s, r, comm.Sum, 0) }
		case b.cfg.API == "inplace":
			op = func(ctx context.Context) error { return comm.Allreduce(ctx, c, r, comm.Sum) }
			prep = func(it int) { fill(r, 0, rank, it) }
		case b.cfg.API == "persistent":
			if b.pers != nil {
				b.pers.Free()
			}
			pa, err := comm.AllreduceInit(b.ctx, c, r, comm.Sum)
			if err != nil {
				return b.failing(err), collIters, collSkip
			}
			b.pers = pa
			op = func(ctx context.Context) error {
				if err := pa.Start(ctx); err != nil {
					return err
				}
				return pa.Wait(ctx)
			}
			prep = func(it int) { fill(r, 0, rank, it) }
		}
		return b.collLoop(op, prep, func(it int) {
			if b.cfg.Test == "allreduce" || rank == 0 {
				b.expect(r, func(i int) T { return sumPattern[T](i, p, it) }, fmt.Sprintf("%s %d bytes", b.cfg.Test, size), it)
			}
		}), collIters, collSkip

	case "bcast":
		if count == 0 {
			return nil, 0, 0
		}
		buf := b.recv[:count]
		if rank == 0 {
			buf = b.send[:count]
			if !v {
				fill(buf, 0, 0, 0)
			}
		}
		return b.collLoop(func(ctx context.Context) error { return comm.Bcast(ctx, c, buf, 0) }, func(it int) {
			if rank == 0 {
				fill(buf, 0, 0, it)
			} else {
				clear(buf)
			}
		}, func(it int) {
			b.expect(buf, func(i int) T { return pattern[T](i, 0, it) }, fmt.Sprintf("bcast %d bytes", size), it)
		}), collIters, collSkip

	case "allgather":
		if count == 0 {
			return nil, 0, 0
		}
		s, r := b.send[:count], b.recv[:count*p]
		if !v {
			fill(s, 0, rank, 0)
		}
		return b.collLoop(func(ctx context.Context) error { return comm.Allgather(ctx, c, s, r) }, func(it int) {
			fill(s, 0, rank, it)
			clear(r)
		}, func(it int) {
			b.expect(r, func(i int) T { return pattern[T](i%count, i/count, it) }, fmt.Sprintf("allgather %d bytes", size), it)
		}), collIters, collSkip

	case "alltoall":
		blk := count
		if blk == 0 {
			return nil, 0, 0
		}
		s, r := b.send[:blk*p], b.recv[:blk*p]
		if !v {
			fill(s, 0, rank, 0)
		}
		return b.collLoop(func(ctx context.Context) error { return comm.Alltoall(ctx, c, s, r) }, func(it int) {
			fill(s, 0, rank, it)
			clear(r)
		}, func(it int) {
			// Block src of r is block rank of src's send.
			b.expect(r, func(i int) T { return pattern[T](rank*blk+i%blk, i/blk, it) }, fmt.Sprintf("alltoall %d bytes", size), it)
		}), collIters, collSkip

	case "reduce_scatter":
		blk := count / p
		if blk == 0 {
			return nil, 0, 0
		}
		s, r := b.send[:blk*p], b.recv[:blk]
		if !v {
			fill(s, 0, rank, 0)
		}
		return b.collLoop(func(ctx context.Context) error { return comm.ReduceScatter(ctx, c, s, r, comm.Sum) }, func(it int) {
			fill(s, 0, rank, it)
			clear(r)
		}, func(it int) {
			b.expect(r, func(i int) T { return sumPattern[T](rank*blk+i, p, it) }, fmt.Sprintf("reduce_scatter %d bytes", size), it)
		}), collIters, collSkip
	}
	return nil, 0, 0
}

// testHookAfterOp, when set (by tests only), sees the receive buffer after
// every timed collective call: a test corrupts it to prove -c notices.
var testHookAfterOp func(recv any)

// failing is a kernel that returns err: a set-up that failed while making
// the kernel reports through the sweep.
func (b *runner[T]) failing(err error) kernel {
	return func(context.Context, int) (float64, error) { return 0, err }
}

// idle is the kernel of a rank that sits out a two-rank test.
func idle(context.Context, int) (float64, error) { return 0, nil }

// loop times n calls of op as one interval; with -c, every call is prepared,
// timed on its own and checked.
func (b *runner[T]) loop(op func(context.Context) error, prep, check func(it int)) kernel {
	return func(ctx context.Context, n int) (float64, error) {
		if !b.cfg.Validate {
			t0 := time.Now()
			for range n {
				if err := op(ctx); err != nil {
					return 0, err
				}
			}
			return time.Since(t0).Seconds(), nil
		}
		var acc time.Duration
		for range n {
			it := b.iter
			b.iter++
			// No barrier is needed between prep and op: the peer's next
			// message lands in this rank's buffer only once this rank posts
			// the receive, after prep.
			prep(it)
			t0 := time.Now()
			if err := op(ctx); err != nil {
				return 0, err
			}
			acc += time.Since(t0)
			check(it)
		}
		return acc.Seconds(), nil
	}
}

// collLoop times every call of a collective on its own, followed by an
// untimed barrier; with -c, each call is prepared and checked outside the
// timed interval.
func (b *runner[T]) collLoop(op func(context.Context) error, prep, check func(it int)) kernel {
	return func(ctx context.Context, n int) (float64, error) {
		var acc time.Duration
		for range n {
			it := b.iter
			b.iter++
			if b.cfg.Validate {
				prep(it)
			}
			t0 := time.Now()
			if err := op(ctx); err != nil {
				return 0, err
			}
			acc += time.Since(t0)
			if testHookAfterOp != nil {
				testHookAfterOp(b.recv)
			}
			b.algo = b.c.LastAlgorithm()
			if b.cfg.Validate {
				check(it)
			}
			if err := comm.Barrier(ctx, b.c); err != nil {
				return 0, err
			}
		}
		return acc.Seconds(), nil
	}
}
