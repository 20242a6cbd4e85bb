//go:build linux

package shm_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/shm"
)

// benchPair is two connected endpoints on two devices of this process.
type benchEnd struct {
	dev      *shm.Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	mr       verbs.MR
}

func newBenchPair(tb testing.TB, mrSize int, opts shm.Options) (a, b *benchEnd) {
	tb.Helper()
	ctx := context.Background()
	mk := func() *benchEnd {
		e := &benchEnd{}
		var err error
		e.dev, err = shm.Open(ctx, opts)
		require.NoError(tb, err)
		e.pd, _ = e.dev.AllocPD()
		e.scq, _ = e.dev.CreateCQ(1024)
		e.rcq, _ = e.dev.CreateCQ(1024)
		e.mr, err = e.pd.AllocMR(mrSize, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
		require.NoError(tb, err)
		e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq,
			Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
		require.NoError(tb, err)
		tb.Cleanup(func() { e.dev.Close() })
		return e
	}
	a, b = mk(), mk()
	var wg sync.WaitGroup
	var ea, eb error
	wg.Add(2)
	go func() { defer wg.Done(); ea = verbs.Connect(a.qp, b.qp.Address(), verbs.DefaultConnectOptions()) }()
	go func() { defer wg.Done(); eb = verbs.Connect(b.qp, a.qp.Address(), verbs.DefaultConnectOptions()) }()
	wg.Wait()
	require.NoError(tb, ea)
	require.NoError(tb, eb)
	return a, b
}

// pollOne busy-polls cq until one completion arrives and checks it.
func pollOne(cq verbs.CQ, wc []verbs.WC) error {
	for cq.Poll(wc[:1]) == 0 {
	}
	if wc[0].Status != verbs.StatusSuccess {
		return wc[0].Err()
	}
	return nil
}

// BenchmarkPingPong measures the half round trip of an 8-byte message
// between two goroutines (two devices, two QPs): write-imm is an 8-byte
// RDMA WRITE_WITH_IMM answered by another, each side busy-polling its
// receive CQ and re-posting its receive; flag is the bare shared-memory
// baseline, two cache lines flipped by the same two goroutines.
func BenchmarkPingPong(b *testing.B) {
	if runtime.GOMAXPROCS(0) < 2 {
		b.Skip("needs GOMAXPROCS >= 2: both sides busy-poll")
	}
	b.Run("write-imm/bytes=8", func(b *testing.B) {
		x, y := newBenchPair(b, 4096, shm.Options{})
		const depth = 64
		for _, e := range []*benchEnd{x, y} {
			for i := 0; i < depth; i++ {
				require.NoError(b, e.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
			}
		}
		wrTo := func(from, to *benchEnd) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.OpRDMAWriteWithImm, Imm: 7,
				SGL:        []verbs.SGE{verbs.SGEOf(from.mr, 0, 8)},
				RemoteAddr: to.mr.Addr() + 64, RKey: to.mr.RKey()}
		}
		stop := make(chan struct{})
		var echoErr atomic.Value
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { // the echo side
			defer wg.Done()
			var wc [1]verbs.WC
			wrs := []verbs.SendWR{wrTo(y, x)}
			rwrs := []verbs.RecvWR{{}}
			for {
				for y.rcq.Poll(wc[:]) == 0 {
					select {
					case <-stop:
						return
					default:
					}
				}
				if wc[0].Status != verbs.StatusSuccess {
					echoErr.Store(wc[0].Err())
					return
				}
				// Answer first, re-post the receive after: the re-post is
				// off the critical path (64 receives stay posted).
				if err := y.qp.PostSend(wrs...); err != nil {
					echoErr.Store(err)
					return
				}
				rwrs[0].ID = wc[0].ID
				if err := y.qp.PostRecv(rwrs...); err != nil {
					echoErr.Store(err)
					return
				}
			}
		}()
		var wc [1]verbs.WC
		// Posting from reused slices (PostSend(wrs...)) keeps the
		// interface call allocation-free.
		wrs := []verbs.SendWR{wrTo(x, y)}
		rwrs := []verbs.RecvWR{{}}
		var bt batchTimer
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		n := 0
		bt.start()
		for b.Loop() {
			bt.tick()
			if err := x.qp.PostSend(wrs...); err != nil {
				b.Fatal(err)
			}
			if err := pollOne(x.rcq, wc[:]); err != nil {
				b.Fatal(err)
			}
			rwrs[0].ID = wc[0].ID
			if err := x.qp.PostRecv(rwrs...); err != nil {
				b.Fatal(err)
			}
			n++
		}
		el := time.Since(start)
		b.StopTimer()
		close(stop)
		wg.Wait()
		if e := echoErr.Load(); e != nil {
			b.Fatal(e)
		}
		b.ReportMetric(float64(el.Nanoseconds())/float64(2*n), "ns/halfrtt")
		bt.report(b)
	})
	b.Run("flag/bytes=8", func(b *testing.B) {
		// Two words on separate cache lines: ping written by this side,
		// pong by the echo side, each waiting for the other's value.
		var lines [3 * 64]byte
		base := (uintptr(unsafePointer(&lines[0])) + 63) &^ 63
		off := int(base - uintptr(unsafePointer(&lines[0])))
		ping := (*atomic.Uint64)(unsafePointer(&lines[off]))
		pong := (*atomic.Uint64)(unsafePointer(&lines[off+64]))
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := uint64(1); ; i++ {
				for ping.Load() < i {
				}
				if ping.Load() == ^uint64(0) {
					return
				}
				pong.Store(i)
			}
		}()
		var bt batchTimer
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		var i uint64
		bt.start()
		for b.Loop() {
			bt.tick()
			i++
			ping.Store(i)
			for pong.Load() < i {
			}
		}
		el := time.Since(start)
		b.StopTimer()
		ping.Store(^uint64(0))
		wg.Wait()
		b.ReportMetric(float64(el.Nanoseconds())/float64(2*i), "ns/halfrtt")
		bt.report(b)
	})
}

// batchTimer times round trips in batches of 256. On a shared machine a
// spinning ping-pong is sometimes descheduled for milliseconds, which
// dominates the mean; the median batch is the latency when both sides run,
// reported as ns/halfrtt-med beside the mean.
type batchTimer struct {
	n   int
	t0  time.Time
	lat []time.Duration
}

const batchLen = 256

func (bt *batchTimer) start() {
	if bt.lat == nil {
		bt.lat = make([]time.Duration, 0, 1<<14)
	}
	bt.t0 = time.Now()
}

func (bt *batchTimer) tick() {
	bt.n++
	if bt.n%batchLen == 0 && len(bt.lat) < cap(bt.lat) {
		now := time.Now()
		bt.lat = append(bt.lat, now.Sub(bt.t0))
		bt.t0 = now
	}
}

func (bt *batchTimer) report(b *testing.B) {
	if len(bt.lat) == 0 {
		return
	}
	slices.Sort(bt.lat)
	med := bt.lat[len(bt.lat)/2]
	b.ReportMetric(float64(med.Nanoseconds())/float64(2*batchLen), "ns/halfrtt-med")
}

var bwSizes = []int{1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprint(n)
}

// BenchmarkWriteBandwidth is a signaled RDMA WRITE of the given size from
// one device's MR into another's, completion polled, beside a single
// memcpy (Go copy) of the same size between two buffers.
func BenchmarkWriteBandwidth(b *testing.B) {
	for _, n := range bwSizes {
		b.Run("shm/bytes="+sizeName(n), func(b *testing.B) {
			x, y := newBenchPair(b, n, shm.Options{})
			wrs := []verbs.SendWR{{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{verbs.SGEOf(x.mr, 0, n)}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}}
			var wc [1]verbs.WC
			// Touch both regions once so page faults stay out of the loop.
			clear(x.mr.Bytes())
			clear(y.mr.Bytes())
			require.NoError(b, x.qp.PostSend(wrs...))
			require.NoError(b, pollOne(x.scq, wc[:]))
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if err := x.qp.PostSend(wrs...); err != nil {
					b.Fatal(err)
				}
				if err := pollOne(x.scq, wc[:]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("memcpy/bytes="+sizeName(n), func(b *testing.B) {
			src, dst := make([]byte, n), make([]byte, n)
			copy(dst, src)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				copy(dst, src)
			}
		})
	}
}

// BenchmarkOverhead is the software cost of one 8-byte WRITE_WITH_IMM
// (post, target poll, re-post of the receive) with both sides on one
// goroutine: no cache line crosses cores, so this is the provider's own
// instruction count, the floor under the ping-pong.
func BenchmarkOverhead(b *testing.B) {
	x, y := newBenchPair(b, 4096, shm.Options{})
	require.NoError(b, y.qp.PostRecv(verbs.RecvWR{ID: 1}))
	wrs := []verbs.SendWR{{Opcode: verbs.OpRDMAWriteWithImm, Imm: 7,
		SGL: []verbs.SGE{verbs.SGEOf(x.mr, 0, 8)}, RemoteAddr: y.mr.Addr() + 64, RKey: y.mr.RKey()}}
	rwrs := []verbs.RecvWR{{ID: 1}}
	var wc [1]verbs.WC
	b.ReportAllocs()
	for b.Loop() {
		if err := x.qp.PostSend(wrs...); err != nil {
			b.Fatal(err)
		}
		if err := pollOne(y.rcq, wc[:]); err != nil {
			b.Fatal(err)
		}
		if err := y.qp.PostRecv(rwrs...); err != nil {
			b.Fatal(err)
		}
	}
}
