package comm

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkIallreduceOverlap measures how much of an Iallreduce is hidden
// behind computation, as OSU's non-blocking collective benchmarks
// (osu_iallreduce) do: t_pure is the time of Iallreduce+Wait alone; then
// each iteration starts the Iallreduce, computes (a busy loop) for t_pure,
// and waits; t_total is that iteration's time and t_cpu the computation's.
// overlap_% = 100·(1 − (t_total − t_cpu)/t_pure), clamped to [0, 100]:
// 100 when the collective cost nothing beyond the computation, 0 when it
// was not overlapped at all. mode=blocking is the reference in the same
// run: the computation followed by a blocking Allreduce, which can hide
// nothing. Two ranks in this process over shm; both compute at once, so on
// a two-core machine the collectives' goroutines compete with the
// computations for the cores, as two processes of one host would.
//
//	go test -run '^$' -bench IallreduceOverlap -benchtime 50x ./comm
//
// peer=idle is the same with rank 1 not computing (it only takes part in
// the collectives): then a core is free for the progress of both ranks'
// collectives while rank 0 computes, as on a machine with a core to spare
// per rank, and the figure shows what the background progress can hide.
func BenchmarkIallreduceOverlap(b *testing.B) {
	for _, peer := range []string{"computes", "idle"} {
		for _, n := range []int{16 << 10, 256 << 10, 4 << 20} {
			for _, mode := range []string{"blocking", "nonblocking"} {
				b.Run(fmt.Sprintf("transport=shm/peer=%s/mode=%s/bytes=%d", peer, mode, 4*n), func(b *testing.B) {
					overlapPair(b, "shm", n, mode == "nonblocking", peer == "idle")
				})
			}
		}
	}
}

func overlapPair(b *testing.B, transport string, n int, nonblocking, idlePeer bool) {
	ctx := context.Background()
	comms := initPair(b, transport)
	iters := b.N
	pureIters := max(iters, 10)
	// Both ranks run the same schedule; rank 0's figures are reported.
	type result struct{ pure, total, cpu time.Duration }
	res := make([]result, 2)
	rank := func(c *Comm) (result, error) {
		buf := make([]float32, n)
		var res result
		var err error // each rank's own: the two run at once
		step := func() error {
			r, err := Iallreduce(ctx, c, buf, Sum)
			if err != nil {
				return err
			}
			_, err = r.Wait(ctx)
			return err
		}
		for range 3 { // warm up: connections, registrations
			if err := step(); err != nil {
				return res, err
			}
		}
		if err := Barrier(ctx, c); err != nil {
			return res, err
		}
		t0 := time.Now()
		for range pureIters {
			if err := step(); err != nil {
				return res, err
			}
		}
		res.pure = time.Since(t0) / time.Duration(pureIters)
		// Both ranks compute for rank 0's t_pure.
		target := []int64{int64(res.pure)}
		if err := Bcast(ctx, c, target, 0); err != nil {
			return res, err
		}
		work := time.Duration(target[0])
		if err := Barrier(ctx, c); err != nil {
			return res, err
		}
		t0 = time.Now()
		for range iters {
			var r *Request
			if nonblocking {
				if r, err = Iallreduce(ctx, c, buf, Sum); err != nil {
					return res, err
				}
			}
			if !idlePeer || c.Rank() == 0 {
				res.cpu += compute(work)
			}
			if nonblocking {
				_, err = r.Wait(ctx)
			} else {
				err = Allreduce(ctx, c, buf, Sum)
			}
			if err != nil {
				return res, err
			}
		}
		res.total = time.Since(t0) / time.Duration(iters)
		res.cpu /= time.Duration(iters)
		return res, nil
	}
	errs := make([]error, 2)
	var wg sync.WaitGroup
	wg.Go(func() { res[1], errs[1] = rank(comms[1]) })
	res[0], errs[0] = rank(comms[0])
	wg.Wait()
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	r := res[0]
	overlap := 100 * (1 - float64(r.total-r.cpu)/float64(r.pure))
	b.ReportMetric(min(max(overlap, 0), 100), "overlap_%")
	b.ReportMetric(float64(r.pure.Nanoseconds()), "pure_ns")
	b.ReportMetric(float64(r.total.Nanoseconds()), "ns/op") // t_total, not the setup
	b.ReportMetric(float64(r.cpu.Nanoseconds()), "cpu_ns")
}

// compute busies the CPU for d (a stand-in for the caller's work, as
// OSU's dummy compute) and returns how long it ran.
func compute(d time.Duration) time.Duration {
	t0 := time.Now()
	x := 1.0
	for time.Since(t0) < d {
		for range 200 {
			x = x*1.0000001 + 1e-9
		}
	}
	sink.Store(math.Float64bits(x)) // atomic: both ranks compute at once
	return time.Since(t0)
}

// sink keeps the busy loop from being optimised away.
var sink atomic.Uint64
