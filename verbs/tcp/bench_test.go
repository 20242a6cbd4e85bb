package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// Benchmarks compare the provider with the raw Go TCP it runs on, measured
// in the same run on the same loopback:
//
//	go test -run '^$' -bench . -count 6 ./verbs/tcp | tee bench.txt
//	go run golang.org/x/perf/cmd/benchstat@latest bench.txt
//
// BenchmarkPingPong is a round trip of n bytes (RDMA WRITE_WITH_IMM each way,
// the receiver waiting on its CQ; or a raw write/read pair each way).
// BenchmarkWriteBandwidth streams RDMA WRITEs of one size (a window of
// requests in flight, every 8th signaled) against a raw TCP stream written
// in the same chunk size, each chunk read into an n-byte buffer.

type benchEnd struct {
	dev verbs.Device
	qp  verbs.QP
	scq verbs.CQ
	rcq verbs.CQ
	mr  verbs.MR
}

func benchPair(b *testing.B, mrSize, depth int) (*benchEnd, *benchEnd) {
	b.Helper()
	ctx := context.Background()
	mk := func() *benchEnd {
		dev, err := Open(ctx, Options{Token: []byte("bench")})
		require.NoError(b, err)
		b.Cleanup(func() { _ = dev.Close() })
		pd, err := dev.AllocPD()
		require.NoError(b, err)
		e := &benchEnd{dev: dev}
		e.scq, err = dev.CreateCQ(depth)
		require.NoError(b, err)
		e.rcq, err = dev.CreateCQ(depth)
		require.NoError(b, err)
		e.qp, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq,
			Cap: verbs.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
		require.NoError(b, err)
		e.mr, err = pd.AllocMR(mrSize, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		require.NoError(b, err)
		return e
	}
	a, c := mk(), mk()
	o := verbs.DefaultConnectOptions()
	require.NoError(b, verbs.Connect(a.qp, c.qp.Address(), o))
	require.NoError(b, verbs.Connect(c.qp, a.qp.Address(), o))
	return a, c
}

// waitOne waits for and returns one completion, failing on an error status.
func waitOne(ctx context.Context, cq verbs.CQ, wc []verbs.WC) error {
	for {
		if cq.Poll(wc[:1]) == 1 {
			return wc[0].Err()
		}
		if err := cq.Wait(ctx); err != nil {
			return err
		}
	}
}

func BenchmarkPingPong(b *testing.B) {
	for _, n := range []int{8, 1 << 10, 64 << 10, 256 << 10, 1 << 20} {
		benchPingPong(b, n)
	}
}

func benchPingPong(b *testing.B, n int) {
	b.Run(fmt.Sprintf("rdma-write-imm/bytes=%d", n), func(b *testing.B) {
		const depth = 64
		a, c := benchPair(b, max(4096, n), depth)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		for _, e := range []*benchEnd{a, c} {
			for i := range depth {
				require.NoError(b, e.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
			}
		}
		// writeImm sends 8 bytes to the peer's region; every 16th is
		// signaled so the send queue's slots are retired.
		// Requests are built once per direction and reused, so that
		// allocs/op counts the provider's allocations, not the benchmark's.
		type dir struct {
			wr  []verbs.SendWR
			sge []verbs.SGE
			rwr []verbs.RecvWR
		}
		mkDir := func(from, to *benchEnd) *dir {
			d := &dir{sge: []verbs.SGE{verbs.SGEOf(from.mr, 0, n)}, rwr: make([]verbs.RecvWR, 1)}
			d.wr = []verbs.SendWR{{Opcode: verbs.OpRDMAWriteWithImm, SGL: d.sge, RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}}
			return d
		}
		dirs := map[*benchEnd]*dir{a: mkDir(a, c), c: mkDir(c, a)}
		writeImm := func(from, to *benchEnd, i int, wc []verbs.WC) error {
			d := dirs[from]
			wr := &d.wr[0]
			wr.ID, wr.Imm, wr.Flags = uint64(i), uint32(i), 0
			if i%16 == 15 {
				wr.Flags = verbs.SendSignaled
			}
			if err := from.qp.PostSend(d.wr...); err != nil {
				return err
			}
			if i%16 == 15 {
				return waitOne(ctx, from.scq, wc)
			}
			return nil
		}
		echoErr := make(chan error, 1)
		stop := make(chan struct{})
		go func() {
			var wc [1]verbs.WC
			for i := 0; ; i++ {
				if err := waitOne(ctx, c.rcq, wc[:]); err != nil {
					select {
					case <-stop:
						echoErr <- nil
					default:
						echoErr <- err
					}
					return
				}
				dc := dirs[c]
				dc.rwr[0].ID = wc[0].ID
				if err := c.qp.PostRecv(dc.rwr...); err != nil {
					echoErr <- err
					return
				}
				if err := writeImm(c, a, i, wc[:]); err != nil {
					echoErr <- err
					return
				}
			}
		}()
		var wc [1]verbs.WC
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := writeImm(a, c, i, wc[:]); err != nil {
				b.Fatal(err)
			}
			if err := waitOne(ctx, a.rcq, wc[:]); err != nil {
				b.Fatal(err)
			}
			da := dirs[a]
			da.rwr[0].ID = wc[0].ID
			if err := a.qp.PostRecv(da.rwr...); err != nil {
				b.Fatal(err)
			}
			i++
		}
		close(stop)
		_ = c.rcq.Close()
		require.NoError(b, <-echoErr)
	})
	b.Run(fmt.Sprintf("raw-tcp/bytes=%d", n), func(b *testing.B) {
		x, y := rawConns(b)
		go func() {
			buf := make([]byte, n)
			for {
				if _, err := io.ReadFull(y, buf); err != nil {
					return
				}
				if _, err := y.Write(buf); err != nil {
					return
				}
			}
		}()
		buf := make([]byte, n)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := x.Write(buf); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(x, buf); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// rawConns is a connected pair of loopback TCP connections, closed when
// the test or benchmark ends.
func rawConns(b testing.TB) (net.Conn, net.Conn) {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(b, err)
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			close(acc)
			return
		}
		acc <- c
	}()
	x, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(b, err)
	y, ok := <-acc
	require.True(b, ok)
	b.Cleanup(func() { _ = x.Close(); _ = y.Close() })
	return x, y
}

var bandwidthSizes = []struct {
	name string
	n    int
}{
	{"1KiB", 1 << 10}, {"4KiB", 4 << 10}, {"16KiB", 16 << 10}, {"64KiB", 64 << 10},
	{"256KiB", 256 << 10}, {"1MiB", 1 << 20}, {"4MiB", 4 << 20}, {"16MiB", 16 << 20},
}

func BenchmarkWriteBandwidth(b *testing.B) {
	for _, sz := range bandwidthSizes {
		b.Run("rdma/bytes="+sz.name, func(b *testing.B) { benchRDMAWrite(b, sz.n) })
		b.Run("raw-tcp/bytes="+sz.name, func(b *testing.B) { benchRawStream(b, sz.n) })
	}
}

func benchRDMAWrite(b *testing.B, n int) {
	const depth = 1024
	// Keep about 64 MiB or 512 requests in flight, whichever is fewer: a
	// raw TCP stream has its whole socket buffer in flight too.
	window := max(2, min(512, (64<<20)/n))
	a, c := benchPair(b, n, depth)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	wrs := []verbs.SendWR{{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, n)},
		RemoteAddr: c.mr.Addr(), RKey: c.mr.RKey()}}
	var wc [1]verbs.WC
	// Every 8th request (and the one that fills the window) is signaled; its
	// completion retires the unsignaled ones before it. groups holds the
	// number of requests each outstanding signaled completion stands for.
	var groups []int
	inflight, unsig := 0, 0
	post := func() {
		wr := &wrs[0]
		wr.Flags = 0
		if unsig == 7 || inflight+1 >= window {
			wr.Flags = verbs.SendSignaled
		}
		if err := a.qp.PostSend(wrs...); err != nil {
			b.Fatal(err)
		}
		inflight++
		unsig++
		if wr.Flags != 0 {
			groups = append(groups, unsig)
			unsig = 0
		}
	}
	reap := func() {
		if err := waitOne(ctx, a.scq, wc[:]); err != nil {
			b.Fatal(err)
		}
		inflight -= groups[0]
		groups = groups[1:]
	}
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		post()
		for inflight >= window {
			reap()
		}
	}
	// Drain: a last signaled zero-length WRITE covers the unsignaled tail.
	if unsig > 0 {
		wrs[0].SGL = nil
		unsig = 7 // forces the signal
		post()
	}
	for len(groups) > 0 {
		reap()
	}
}

func benchRawStream(b *testing.B, n int) {
	x, y := rawConns(b)
	got := make(chan int64, 1)
	go func() {
		// Each message lands in an n-byte buffer, as a WRITE lands in an
		// n-byte region (reading everything into one small cache-hot buffer
		// would flatter the baseline).
		buf := make([]byte, n)
		var total int64
		for {
			k, err := io.ReadFull(y, buf)
			total += int64(k)
			if err != nil {
				break
			}
		}
		got <- total
	}()
	buf := make([]byte, n)
	var sent int64
	b.SetBytes(int64(n))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := x.Write(buf); err != nil {
			b.Fatal(err)
		}
		sent += int64(n)
	}
	// The stream is done when the reader has everything, as an RDMA WRITE
	// is done when the target has placed it.
	require.NoError(b, x.(*net.TCPConn).CloseWrite())
	if total := <-got; total != sent {
		b.Fatalf("reader got %d of %d bytes", total, sent)
	}
}
