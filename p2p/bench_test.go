package p2p_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/cputime"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// BenchmarkPingPong is the OSU latency loop between two goroutine ranks:
// one op is a full round trip (report ns/op / 2 as latency). The raw TCP
// baseline is the same ping-pong over a loopback TCP connection between two
// goroutines, measured in the same run. The ranks wait under Background,
// and at 8 bytes also under a context that can end (ctx=cancellable), as
// most callers' are.
func BenchmarkPingPong(b *testing.B) {
	for _, size := range []int{8, 4096, 65536, 1 << 20} {
		for _, prov := range []string{"loop", "shm", "tcp"} {
			b.Run(fmt.Sprintf("provider=%s/bytes=%d", prov, size), func(b *testing.B) {
				benchPingPong(b, context.Background(), prov, size)
			})
			if size == 8 {
				b.Run(fmt.Sprintf("provider=%s/bytes=%d/ctx=cancellable", prov, size), func(b *testing.B) {
					ctx, cancel := context.WithCancel(context.Background())
					defer cancel()
					benchPingPong(b, ctx, prov, size)
				})
			}
		}
		b.Run(fmt.Sprintf("provider=rawtcp/bytes=%d", size), func(b *testing.B) { benchRawTCP(b, size) })
	}
}

func benchPingPong(b *testing.B, ctx context.Context, prov string, size int) {
	o := p2ptest.Options{Provider: prov}
	if d, err := time.ParseDuration(os.Getenv("P2P_BENCH_SPIN")); err == nil {
		o.P2P.Spin = d // to study the spin/yield/block trade-off
	}
	eps, err := p2ptest.Start(ctx, 2, o)
	if err != nil {
		b.Fatal(err)
	}
	defer p2ptest.Close(eps)
	// The echo stops on a message with tag 2, which the main loop sends
	// after its last round (a stop channel raced with the last round).
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, size)
		for {
			st, err := eps[1].Recv(ctx, 0, p2p.AnyTag, buf)
			if err != nil {
				done <- err
				return
			}
			if st.Tag == 2 {
				done <- nil
				return
			}
			if err := eps[1].Send(ctx, 0, 1, buf); err != nil {
				done <- err
				return
			}
		}
	}()
	s, r := make([]byte, size), make([]byte, size)
	b.SetBytes(int64(2 * size))
	b.ReportAllocs()
	for b.Loop() {
		if err := eps[0].Send(ctx, 1, 1, s); err != nil {
			b.Fatal(err)
		}
		if _, err := eps[0].Recv(ctx, 1, 1, r); err != nil {
			b.Fatal(err)
		}
	}
	if err := eps[0].Send(ctx, 1, 2, nil); err != nil {
		b.Fatal(err)
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
}

func benchRawTCP(b *testing.B, size int) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	s, r := make([]byte, size), make([]byte, size)
	b.SetBytes(int64(2 * size))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Write(s); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, r); err != nil {
			b.Fatal(err)
		}
	}
}

var _ = p2p.AnySource

// BenchmarkOverhead is the software cost of one 8-byte ping-pong round
// (two Sends, two Recvs) with both ranks driven by one goroutine over shm:
// no cache line crosses cores, so this is p2p's and the provider's own
// instruction count, the floor under the cross-process ping-pong
// (compare verbs/shm's BenchmarkOverhead for the provider alone).
func BenchmarkOverhead(b *testing.B) {
	ctx := context.Background()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	if err != nil {
		b.Fatal(err)
	}
	defer p2ptest.Close(eps)
	s, r := make([]byte, 8), make([]byte, 8)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	for b.Loop() {
		if err := eps[0].Send(ctx, 1, 1, s); err != nil {
			b.Fatal(err)
		}
		if _, err := eps[1].Recv(ctx, 0, 1, r); err != nil {
			b.Fatal(err)
		}
		if err := eps[1].Send(ctx, 0, 1, r); err != nil {
			b.Fatal(err)
		}
		if _, err := eps[0].Recv(ctx, 1, 1, s); err != nil {
			b.Fatal(err)
		}
	}
	cputime.Report(b, cpu0)
}

// BenchmarkWindowOverhead is the software cost of one window of the OSU
// message-rate loop (bench's bw row): rank 1 posts 64 Irecvs, rank 0 64
// Isends, both wait for all and release their requests, all driven by one
// goroutine over shm as in BenchmarkOverhead. cpu-ns/op / 64 is the cost
// of one message on both sides together; allocs/op should be 0. The
// requests go back one Release each, or in one ReleaseAll (releaseAll).
func BenchmarkWindowOverhead(b *testing.B) {
	for _, size := range []int{8, 2048, 4096, 16384} {
		for _, all := range []bool{false, true} {
			b.Run(fmt.Sprintf("bytes=%d/releaseAll=%v", size, all), func(b *testing.B) { benchWindowOverhead(b, size, all) })
		}
	}
}

func benchWindowOverhead(b *testing.B, size int, all bool) {
	const window = 64
	ctx := context.Background()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm"})
	if err != nil {
		b.Fatal(err)
	}
	defer p2ptest.Close(eps)
	s, r := make([]byte, size), make([]byte, size)
	reqs := make([]*p2p.Request, 0, 2*window)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	b.ReportAllocs()
	cpu0 := cputime.Thread()
	for b.Loop() {
		reqs = reqs[:0]
		for range window {
			rq, err := eps[1].Irecv(0, 1, r)
			if err != nil {
				b.Fatal(err)
			}
			reqs = append(reqs, rq)
		}
		for range window {
			rq, err := eps[0].Isend(1, 1, s)
			if err != nil {
				b.Fatal(err)
			}
			reqs = append(reqs, rq)
		}
		for _, rq := range reqs {
			if _, err := rq.Wait(ctx); err != nil {
				b.Fatal(err)
			}
		}
		if all {
			p2p.ReleaseAll(reqs)
		} else {
			for _, rq := range reqs {
				rq.Release()
			}
		}
	}
	cputime.Report(b, cpu0)
}
