package comm

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/internal/cputime"
)

// BenchmarkAllreduce measures what the comm layer adds to a collective:
// api=comm is comm.Allreduce, api=engine calls collectives.Allreduce on
// the same communicator's engine directly (the baseline), in the same run.
// Two ranks in this process over the loop or shm transport; rank 0 drives
// b.Loop and element 0 of every vector tells rank 1 whether to go on. The
// allocation count per call is the figure to watch here; times of two
// ranks in one process say little about two processes.
//
//	go test -run '^$' -bench Allreduce -benchtime 2000x ./comm
func BenchmarkAllreduce(b *testing.B) {
	for _, tr := range []string{"loop", "shm"} {
		for _, n := range []int{2, 1024, 256 << 10} {
			for _, api := range []string{"engine", "comm"} {
				b.Run(fmt.Sprintf("transport=%s/api=%s/bytes=%d", tr, api, 4*n), func(b *testing.B) {
					benchPair(b, tr, func(ctx context.Context, c *Comm, buf []float32) error {
						if api == "comm" {
							return Allreduce(ctx, c, buf, Sum)
						}
						return collectives.Allreduce(ctx, c.eng, buf, Sum)
					}, n)
				})
			}
		}
	}
}

// initPair joins two ranks of a communicator in this process over
// transport; they are closed when the benchmark ends.
func initPair(b testing.TB, transport string) []*Comm {
	b.Helper()
	return initPairWith(b, Options{Transport: transport})
}

// initPairWith is initPair with options (Store and NoEnv are set here).
func initPairWith(b testing.TB, o Options) []*Comm {
	b.Helper()
	return initWorldWith(b, 2, o)
}

// initWorldWith joins the n ranks of a world in this process with options
// o (Store and NoEnv are set here); they are closed when the test or
// benchmark ends.
func initWorldWith(b testing.TB, n int, o Options) []*Comm {
	b.Helper()
	ctx := context.Background()
	stores, err := bootstrap.NewMemory(n)
	if err != nil {
		b.Fatal(err)
	}
	comms := make([]*Comm, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			o := o
			o.Store, o.NoEnv = stores[r], true
			comms[r], errs[r] = Init(ctx, o)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() {
		for r := range n {
			comms[r].Close()
			stores[r].Close()
		}
	})
	return comms
}

func benchPair(b *testing.B, transport string, step func(ctx context.Context, c *Comm, buf []float32) error, n int) {
	ctx := context.Background()
	comms := initPair(b, transport)
	var peerErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]float32, n)
		for {
			buf[0] = 0
			if peerErr = step(ctx, comms[1], buf); peerErr != nil || buf[0] == 0 {
				return
			}
		}
	}()
	buf := make([]float32, n)
	b.SetBytes(int64(4 * n))
	b.ReportAllocs()
	for b.Loop() {
		buf[0] = 1
		if err := step(ctx, comms[0], buf); err != nil {
			b.Fatal(err)
		}
	}
	buf[0] = 0
	if err := step(ctx, comms[0], buf); err != nil {
		b.Fatal(err)
	}
	<-done
	if peerErr != nil {
		b.Fatal(peerErr)
	}
}

// BenchmarkBcast is BenchmarkAllreduce for a bcast from rank 0 (whose
// element 0 tells rank 1 whether to go on), at sizes that take each of the
// two-rank shared-memory forms: slots (4 KiB, 2 MiB) and the split copy
// (256 KiB, 4 MiB).
//
//	go test -run '^$' -bench Bcast -benchtime 2000x ./comm
func BenchmarkBcast(b *testing.B) {
	for _, n := range []int{1024, 64 << 10, 512 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("transport=shm/bytes=%d", 4*n), func(b *testing.B) {
			benchPair(b, "shm", func(ctx context.Context, c *Comm, buf []float32) error {
				return Bcast(ctx, c, buf, 0)
			}, n)
		})
	}
}

// BenchmarkGeneralPath measures collectives that run over p2p messages
// (the collectives engine's general path, which every collective of a
// multi-host job takes): a 16-byte call between two ranks is nearly all
// fixed per-call and per-message cost, which is what the allocation count
// and a CPU profile of this benchmark show. Over tcp every call blocks in
// the transport's CQ once per rank (0 allocations; 13 when each such wait
// made a context).
//
//	go test -run '^$' -bench GeneralPath -benchtime 20000x ./comm
func BenchmarkGeneralPath(b *testing.B) {
	const n = 4 // float32s: 16 bytes per block
	var send, recv [2][]float32
	for r := range 2 {
		send[r], recv[r] = make([]float32, 2*n), make([]float32, 2*n)
	}
	colls := []struct {
		name string
		step func(ctx context.Context, c *Comm, buf []float32) error
	}{
		{"allgather", func(ctx context.Context, c *Comm, buf []float32) error {
			r := c.Rank()
			if err := Allgather(ctx, c, buf, recv[r][:2*n]); err != nil {
				return err
			}
			buf[0] = recv[r][0] // rank 0's element 0: go on or stop
			return nil
		}},
		{"alltoall", func(ctx context.Context, c *Comm, buf []float32) error {
			r := c.Rank()
			send[r][0], send[r][n] = buf[0], buf[0]
			if err := Alltoall(ctx, c, send[r], recv[r]); err != nil {
				return err
			}
			buf[0] = recv[r][0]
			return nil
		}},
		{"reduce_scatter", func(ctx context.Context, c *Comm, buf []float32) error {
			r := c.Rank()
			send[r][0], send[r][n] = buf[0], buf[0]
			if err := ReduceScatter(ctx, c, send[r], recv[r][:n], Max); err != nil {
				return err
			}
			buf[0] = recv[r][0]
			return nil
		}},
	}
	for _, tr := range []string{"loop", "shm", "tcp"} {
		for _, cl := range colls {
			b.Run(fmt.Sprintf("transport=%s/coll=%s/bytes=%d", tr, cl.name, 4*n), func(b *testing.B) {
				benchPair(b, tr, cl.step, n)
			})
		}
	}
}

// BenchmarkWindowOverhead is the software cost of one window of the OSU
// message-rate loop through comm (bench's bw row): rank 1 posts 64 Irecvs,
// rank 0 64 Isends of 8 bytes, and one goroutine waits for all and
// releases them (ReleaseAll), over shm, so that no cache line crosses
// cores: cpu-ns/op / 64 (the thread's CPU time, which a busy machine
// disturbs less than ns/op) is one message's software on both sides, comm's
// wrapping included (compare p2p's BenchmarkWindowOverhead).
//
//	go test -run '^$' -bench WindowOverhead -benchtime 20000x ./comm
func BenchmarkWindowOverhead(b *testing.B) {
	const window = 64
	ctx := context.Background()
	comms := initPair(b, "shm")
	s, r := make([]byte, 8), make([]byte, 8)
	reqs := make([]*Request, 0, 2*window)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	for b.Loop() {
		reqs = reqs[:0]
		for range window {
			rq, err := Irecv(ctx, comms[1], r, 0, 1)
			if err != nil {
				b.Fatal(err)
			}
			reqs = append(reqs, rq)
		}
		for range window {
			rq, err := Isend(ctx, comms[0], s, 1, 1)
			if err != nil {
				b.Fatal(err)
			}
			reqs = append(reqs, rq)
		}
		if err := WaitAll(ctx, reqs...); err != nil {
			b.Fatal(err)
		}
		ReleaseAll(reqs...)
	}
	cputime.Report(b, cpu0)
}

// BenchmarkOverhead is the software cost of one 8-byte ping-pong round
// through comm (two Sends, two Recvs) with both ranks driven by one
// goroutine over shm: no cache line crosses cores, so cpu-ns/op is comm's,
// p2p's and the provider's own instructions, the floor under the
// cross-process latency (compare p2p's BenchmarkOverhead).
//
//	go test -run '^$' -bench '^BenchmarkOverhead$' -benchtime 200000x ./comm
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	comms := initPair(b, "shm")
	s, r := make([]byte, 8), make([]byte, 8)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	for b.Loop() {
		if err := Send(ctx, comms[0], s, 1, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := Recv(ctx, comms[1], r, 0, 1); err != nil {
			b.Fatal(err)
		}
		if err := Send(ctx, comms[1], r, 0, 1); err != nil {
			b.Fatal(err)
		}
		if _, err := Recv(ctx, comms[0], s, 1, 1); err != nil {
			b.Fatal(err)
		}
	}
	cputime.Report(b, cpu0)
}

// BenchmarkPutFlush is the software cost of bench's put_latency kernel
// over shm: rank 0 Puts 8 bytes into rank 1's AllocWin window and Flushes,
// in this process (a Put into a window this process maps is a plain copy,
// so cpu-ns/op is comm's and p2p's own instructions per Put+Flush).
//
//	go test -run '^$' -bench PutFlush -benchtime 1000000x ./comm
func BenchmarkPutFlush(b *testing.B) {
	ctx := context.Background()
	comms := initPair(b, "shm")
	wins := make([]*Win[byte], 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() { wins[r], errs[r] = AllocWin[byte](ctx, comms[r], 64) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	src := make([]byte, 8)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	for b.Loop() {
		if err := wins[0].Put(1, 0, src); err != nil {
			b.Fatal(err)
		}
		if err := wins[0].Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cputime.Report(b, cpu0)
	b.StopTimer()
	for r := range 2 {
		wg.Go(func() { errs[r] = wins[r].Close(ctx) })
	}
	wg.Wait()
}

// BenchmarkPutWindow is bench's put_bw kernel over tcp between two ranks
// of this process: puts Puts of 2048/puts bytes each (the same bytes in
// more or fewer Puts) and a Flush. ns/op is one window, system calls
// included; puts-ns/op the Puts alone, which over tcp go into a run
// of writes posted at the Flush (p2p's inline writes). The gap between
// puts=64 and puts=1 is what each small Put costs beyond its bytes.
//
//	go test -run '^$' -bench PutWindow -benchtime 50000x ./comm
func BenchmarkPutWindow(b *testing.B) {
	for _, puts := range []int{64, 16, 1} {
		b.Run(fmt.Sprintf("puts=%d", puts), func(b *testing.B) { benchPutWindow(b, puts) })
	}
}

func benchPutWindow(b *testing.B, puts int) {
	ctx := context.Background()
	comms := initPair(b, "tcp")
	wins := make([]*Win[byte], 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for r := range 2 {
		wg.Go(func() { wins[r], errs[r] = AllocWin[byte](ctx, comms[r], 4096) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	src := make([]byte, 2048/puts)
	var putTime time.Duration
	for b.Loop() {
		t0 := time.Now()
		for range puts {
			if err := wins[0].Put(1, 0, src); err != nil {
				b.Fatal(err)
			}
		}
		putTime += time.Since(t0)
		if err := wins[0].Flush(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(putTime.Nanoseconds())/float64(b.N), "puts-ns/op")
	b.StopTimer()
	for r := range 2 {
		wg.Go(func() { errs[r] = wins[r].Close(ctx) })
	}
	wg.Wait()
}
