//go:build linux && cgo && rdma

package ibv_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// The benchmarks mirror perftest on the same device (the rxe-vm script runs
// both in one VM): BenchmarkWriteBW is ib_write_bw (64 KiB RDMA WRITEs, 128
// in flight, one in 64 signaled), BenchmarkSendLat is ib_send_lat (2-byte
// inline SENDs ping-ponged, both sides busy-polling; the reported one-way
// latency is half the round trip, as perftest's).

func BenchmarkWriteBW(b *testing.B) {
	// As ib_write_bw's defaults: 64 KiB, tx depth 128, a completion
	// requested every 64 WRITEs (perftest's cq_mod is 100; a power of two
	// divides the depth).
	const size, depth, every = 64 << 10, 128, 64
	p := newPair(b, verbs.QPCap{MaxSendWR: depth, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	src, err := p.pd.AllocMR(size, verbs.AccessLocalWrite)
	require.NoError(b, err)
	dst, err := p.pd.AllocMR(size, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(b, err)
	wr := verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(src, 0, size)},
		RemoteAddr: dst.Addr(), RKey: dst.RKey()}
	wcs := make([]verbs.WC, 16)
	posted, completed := 0, 0 // in WRITEs; a completion retires `every` of them
	deadline := time.Now().Add(5 * time.Minute)
	drain := func(max int) {
		for posted-completed > max {
			n := p.cqA.Poll(wcs)
			for _, wc := range wcs[:n] {
				if wc.Status != verbs.StatusSuccess {
					b.Fatalf("write completion: %v", wc.Err())
				}
			}
			completed += n * every
			if time.Now().After(deadline) {
				b.Fatal("writes did not complete")
			}
		}
	}
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		drain(depth - 1)
		wr.Flags = 0
		if (posted+1)%every == 0 {
			wr.Flags = verbs.SendSignaled
		}
		if err := p.a.PostSend(wr); err != nil {
			b.Fatal(err)
		}
		posted++
	}
	for posted%every != 0 { // pad to a signaled request that covers the tail
		wr.Flags = 0
		if (posted+1)%every == 0 {
			wr.Flags = verbs.SendSignaled
		}
		require.NoError(b, p.a.PostSend(wr))
		posted++
	}
	drain(0)
	b.ReportMetric(float64(size)*float64(b.N)*8/b.Elapsed().Seconds()/1e9, "Gb/s")
}

func BenchmarkSendLat(b *testing.B) {
	const size = 2
	p := newPair(b, verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64})
	msg := []byte{1, 2}
	recvA := verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, 64)}}
	recvB := verbs.RecvWR{ID: 2, SGL: []verbs.SGE{verbs.SGEOf(p.mrB, 0, 64)}}
	for range 8 {
		require.NoError(b, p.a.PostRecv(recvA))
		require.NoError(b, p.b.PostRecv(recvB))
	}
	send := verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendSignaled | verbs.SendInline, Inline: msg}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// waitRecv busy-polls cq for one receive, consuming send completions on the way.
	waitRecv := func(cq verbs.CQ, qp verbs.QP, recv verbs.RecvWR) error {
		var wcs [4]verbs.WC
		for {
			n := cq.Poll(wcs[:])
			for _, wc := range wcs[:n] {
				if err := wc.Err(); err != nil {
					return err
				}
				if wc.Opcode == verbs.WCRecv {
					return qp.PostRecv(recv)
				}
			}
			if n == 0 && ctx.Err() != nil {
				return ctx.Err()
			}
		}
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var echoErr error
	wg.Add(1)
	go func() { // the responder: echo every message
		defer wg.Done()
		for {
			if echoErr = waitRecv(p.cqB, p.b, recvB); echoErr != nil {
				return
			}
			if echoErr = p.b.PostSend(send); echoErr != nil {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	rtts := make([]time.Duration, 0, 1<<16)
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if err := p.a.PostSend(send); err != nil {
			b.Fatal(err)
		}
		if err := waitRecv(p.cqA, p.a, recvA); err != nil {
			b.Fatal(err)
		}
		if len(rtts) < cap(rtts) {
			rtts = append(rtts, time.Since(t0))
		}
	}
	// perftest's t_avg and t_typical (median) are half round trips.
	slices.Sort(rtts)
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/2, "us-avg/one-way")
	b.ReportMetric(float64(rtts[len(rtts)/2].Nanoseconds())/2e3, "us-typical/one-way")
	close(stop)
	// One more round trip releases the echo goroutine from its poll.
	_ = p.a.PostSend(send)
	wg.Wait()
	require.NoError(b, echoErr)
}
