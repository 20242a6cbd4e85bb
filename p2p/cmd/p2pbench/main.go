// Command p2pbench measures point-to-point latency and bandwidth between two
// ranks with the OSU methodology and prints OSU-style tables, so that
// shared/tools/osu-compare can set it beside Open MPI's figures.
//
//	p2pbench [-provider shm|tcp|loop|auto] [-procs 2] [-m 4194304] [-t 0.25] latency|bw
//
// latency: ping-pong between rank 0 and 1 with blocking Send/Recv; the
// figure is the half round trip. bw: rank 0 posts a window of 64 Isends,
// waits for all, then for a 4-byte acknowledgement from rank 1, which posted
// 64 Irecvs; MB/s = bytes × 64 × iterations / time / 10^6. Iteration counts
// follow OSU (10000 below 8 KiB, 1000 above for latency; 100 and 20 for
// bw), capped by a time budget per size (-t) with at least 5 iterations.
// Payloads are verified outside the timed loops.
//
// -provider rawtcp is the baseline: the same two loops over one plain
// loopback TCP connection between the two processes (Nagle off), no p2p.
//
// With -procs 2 (the default) the two ranks are two processes: the command
// re-executes itself as rank 1 and the pair meets through a bootstrap
// server on loopback. With -procs 1 they are goroutines of one process.
// -bind pins rank 0 and rank 1 to the first two CPUs this process may use,
// one each, as rdmarun --bind-to core pins ranks (and so GOMAXPROCS is 1 in
// each), for p2p and rawtcp alike: unbound, each process's runtime spreads
// its threads over both CPUs and the two ranks compete for them.
package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/internal/affinity"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
)

var (
	provider = flag.String("provider", "auto", "verbs provider: shm, tcp, loop or auto")
	procs    = flag.Int("procs", 2, "1: ranks are goroutines; 2: ranks are processes")
	maxBytes = flag.Int("m", 4<<20, "largest message size")
	minBytes = flag.Int("min", 0, "smallest message size")
	budget   = flag.Float64("t", 0.25, "seconds of timed loop per size")
	fixIters = flag.Int("iters", 0, "iterations per size, regardless of -t (0: from -t); a fixed count lets perf stat or strace -c count per iteration: run twice with different counts and divide the difference")
	eager    = flag.Int("eager", 0, "eager limit in bytes (0: p2p's default)")
	pipeline = flag.Int("pipeline", 0, "pipeline limit in bytes (0: p2p's default, negative: none)")
	single   = flag.Int("singlecopy", 0, "p2p Options.SingleCopyMin: messages above this go by rendezvous over shm (0: measured, as comm does; negative: never)")
	spin     = flag.Duration("spin", 0, "p2p Options.Spin (0: default)")
	median   = flag.Bool("median", false, "latency: report the median of per-iteration half round trips instead of the mean (shows the steady-state cost on a busy machine)")
	yield    = flag.Duration("yield", 0, "p2p Options.Yield (0: default)")
	pollSpin = flag.Duration("pollspin", 0, "verbs DeviceOptions.PollSpin (0: p2p's default)")
	bind     = flag.Bool("bind", false, "pin rank 0 and rank 1 to one CPU each (as rdmarun --bind-to core)")
)

const window = 64

func main() {
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: p2pbench [flags] latency|bw\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 || (flag.Arg(0) != "latency" && flag.Arg(0) != "bw" && flag.Arg(0) != "lat") {
		flag.Usage()
		os.Exit(2)
	}
	if *bind && *procs == 2 && os.Getenv("P2PBENCH_RANK") == "" && os.Getenv("P2PBENCH_BOUND") == "" {
		err := errors.New("-bind needs two CPUs")
		if cpus, cerr := affinity.CPUs(); cerr != nil {
			err = fmt.Errorf("-bind: %w", cerr)
		} else if len(cpus) >= 2 {
			err = fmt.Errorf("-bind: %w", bindSelf(cpus[0], cpus[1]))
		}
		fmt.Fprintln(os.Stderr, "p2pbench:", err)
		os.Exit(1)
	}
	if err := run(flag.Arg(0)); err != nil {
		fmt.Fprintln(os.Stderr, "p2pbench:", err)
		os.Exit(1)
	}
}

func options() p2p.Options {
	return p2p.Options{Provider: *provider, EagerLimit: *eager, PipelineLimit: *pipeline, SingleCopyMin: *single, Spin: *spin, Yield: *yield,
		Device: verbs.DeviceOptions{PollSpin: *pollSpin}}
}

func run(bench string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if r := os.Getenv("P2PBENCH_RANK"); r != "" {
		if *provider == "rawtcp" {
			return rawChild(bench)
		}
		return child(ctx, bench)
	}
	if *provider == "rawtcp" {
		return rawParent(ctx, bench)
	}
	if *procs == 1 {
		eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: *provider, P2P: options()})
		if err != nil {
			return err
		}
		defer p2ptest.Close(eps)
		errc := make(chan error, 1)
		go func() { errc <- runBench(ctx, eps[1], bench) }()
		if err := runBench(ctx, eps[0], bench); err != nil {
			return err
		}
		return <-errc
	}
	token, err := bootstrap.NewToken()
	if err != nil {
		return err
	}
	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: 2})
	if err != nil {
		return err
	}
	defer srv.Close()
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), "P2PBENCH_RANK=1", "P2PBENCH_ADDR="+srv.Addr(), "P2PBENCH_TOKEN="+hex.EncodeToString(token))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startChild(cmd); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	ep, err := join(ctx, 0, srv.Addr(), token)
	if err != nil {
		return err
	}
	defer ep.Close()
	return runBench(ctx, ep, bench)
}

// printBinding says, with -bind, where the ranks run (rank 0 reads its own
// affinity, so a failed pin shows).
func printBinding() {
	if !*bind {
		return
	}
	cpus, err := affinity.CPUs()
	if err != nil {
		fmt.Printf("# bind: %v\n", err)
		return
	}
	fmt.Printf("# bind: rank 0 on CPUs %v, rank 1 on CPU %s\n", cpus, os.Getenv("P2PBENCH_BOUND"))
}

// startChild starts rank 1, pinned with -bind to the CPU bindSelf left
// for it (rank 0, this process, is pinned to the other).
func startChild(cmd *exec.Cmd) error {
	if !*bind || *procs != 2 {
		return cmd.Start()
	}
	cpu, err := strconv.Atoi(os.Getenv("P2PBENCH_BOUND"))
	if err != nil {
		return fmt.Errorf("-bind: no CPU for rank 1 (P2PBENCH_BOUND %q)", os.Getenv("P2PBENCH_BOUND"))
	}
	if err := affinity.StartPinned(cmd, cpu); err != nil {
		return fmt.Errorf("-bind: %w", err)
	}
	return nil
}

func join(ctx context.Context, rank int, addr string, token []byte) (*p2p.Endpoint, error) {
	c, err := bootstrap.Dial(ctx, bootstrap.ClientOptions{Addr: addr, Token: token, Rank: rank, Size: 2, Version: "p2pbench"})
	if err != nil {
		return nil, err
	}
	return p2p.New(ctx, c, options())
}

func child(ctx context.Context, bench string) error {
	token, err := hex.DecodeString(os.Getenv("P2PBENCH_TOKEN"))
	if err != nil {
		return err
	}
	ep, err := join(ctx, 1, os.Getenv("P2PBENCH_ADDR"), token)
	if err != nil {
		return err
	}
	defer ep.Close()
	return runBench(ctx, ep, bench)
}

func sizes() []int {
	var s []int
	if *minBytes == 0 {
		s = append(s, 0)
	}
	for n := max(1, *minBytes); n <= *maxBytes; n *= 2 {
		s = append(s, n)
	}
	return s
}

func runBench(ctx context.Context, ep *p2p.Endpoint, bench string) error {
	me := ep.Rank()
	if *single == 0 {
		// As comm's Init does for a host's ranks with CPUs of their own.
		n, err := ep.MeasureCopy(ctx, 1-me, p2p.CopyProbeOptions{})
		if err != nil {
			return fmt.Errorf("measuring copies: %w", err)
		}
		ep.SetSingleCopyMin(n)
	}
	if me == 0 {
		printBinding()
		fmt.Printf("# p2pbench (OSU-style)  provider: %s  transport to rank 1: %s  eager limit: %d  single copy above: %d\n",
			*provider, ep.Transport(1), ep.EagerLimit(1), ep.SingleCopyMin(1))
	}
	sbuf := make([]byte, *maxBytes)
	rbuf := make([]byte, *maxBytes)
	for i := range sbuf {
		sbuf[i] = byte(i*13 + 1)
	}
	first := true
	if bench == "bw" {
		if me == 0 {
			fmt.Printf("# BENCH bw (rank 0 -> 1, window=%d Isend, 4-byte ack)\n# Size      Bandwidth (MB/s)       Iters\n", window)
		}
		for _, n := range sizes() {
			if n == 0 {
				continue
			}
			iters := 100
			if n > 8192 {
				iters = 20
			}
			t, k, err := measure(ctx, ep, &first, iters, func(k int) error { return bw(ctx, ep, sbuf[:n], rbuf, k) })
			if err != nil {
				return fmt.Errorf("bw %d bytes: %w", n, err)
			}
			if me == 1 && !bytes.Equal(rbuf[:n], sbuf[:n]) {
				return fmt.Errorf("bw %d bytes: payload differs", n)
			}
			if me == 0 {
				fmt.Printf("%-10d %18.2f %11d\n", n, float64(n)*float64(k)*window/t.Seconds()/1e6, k)
			}
		}
		return nil
	}
	if me == 0 {
		fmt.Printf("# BENCH latency (ping-pong rank 0 <-> 1, half round trip)\n# Size          Avg Latency(us)       Iters\n")
	}
	for _, n := range sizes() {
		iters := 10000
		if n > 8192 {
			iters = 1000
		}
		clear(rbuf[:n])
		var laps []time.Duration
		t, k, err := measure(ctx, ep, &first, iters, func(k int) error {
			if !*median || ep.Rank() != 0 {
				return pingPong(ctx, ep, sbuf[:n], rbuf[:n], k)
			}
			laps = laps[:0]
			for range k {
				start := time.Now()
				if err := pingPong(ctx, ep, sbuf[:n], rbuf[:n], 1); err != nil {
					return err
				}
				laps = append(laps, time.Since(start))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("latency %d bytes: %w", n, err)
		}
		if !bytes.Equal(rbuf[:n], sbuf[:n]) {
			return fmt.Errorf("latency %d bytes: payload differs", n)
		}
		if me == 0 {
			v := t.Seconds() * 1e6 / float64(2*k)
			if *median {
				slices.Sort(laps)
				v = laps[len(laps)/2].Seconds() * 1e6 / 2
			}
			fmt.Printf("%-10d %24.2f %11d\n", n, v, k)
		}
	}
	return nil
}

// measure warms up, lets rank 0 pick the iteration count from the budget,
// tells rank 1, and times the loop. *first is set until the rank's first
// size has been measured: that size warms up for a whole untimed pass,
// because a fresh endpoint is slower for a while, which would otherwise
// inflate the first size's figure. Raw TCP shows no such difference, but
// rawBench does the same so that both are measured alike.
// iterCount is how many timed iterations a size runs: -iters when set,
// else iters capped by the -t budget at per each (at least 5).
func iterCount(iters int, per time.Duration) int {
	if *fixIters > 0 {
		return *fixIters
	}
	k := iters
	if b := time.Duration(*budget * float64(time.Second)); per > 0 && time.Duration(k)*per > b {
		k = max(5, int(b/per))
	}
	return k
}

func measure(ctx context.Context, ep *p2p.Endpoint, first *bool, iters int, loop func(k int) error) (time.Duration, int, error) {
	start := time.Now()
	warm := 1
	if err := loop(warm); err != nil {
		return 0, 0, err
	}
	per := time.Since(start)
	if err := loop(min(4, iters)); err != nil {
		return 0, 0, err
	}
	per = min(per, time.Since(start)/time.Duration(1+min(4, iters)))
	k := iterCount(iters, per)
	var cnt [8]byte
	if ep.Rank() == 0 {
		binary.LittleEndian.PutUint64(cnt[:], uint64(k))
		if err := ep.Send(ctx, 1, 99, cnt[:]); err != nil {
			return 0, 0, err
		}
	} else {
		if _, err := ep.Recv(ctx, 0, 99, cnt[:]); err != nil {
			return 0, 0, err
		}
		k = int(binary.LittleEndian.Uint64(cnt[:]))
	}
	// Warm-up, then the timed loop.
	if err := loop(warmCount(k, first)); err != nil {
		return 0, 0, err
	}
	start = time.Now()
	if err := loop(k); err != nil {
		return 0, 0, err
	}
	return time.Since(start), k, nil
}

func pingPong(ctx context.Context, ep *p2p.Endpoint, s, r []byte, k int) error {
	for range k {
		if ep.Rank() == 0 {
			if err := ep.Send(ctx, 1, 1, s); err != nil {
				return err
			}
			if _, err := ep.Recv(ctx, 1, 1, r); err != nil {
				return err
			}
		} else {
			if _, err := ep.Recv(ctx, 0, 1, r); err != nil {
				return err
			}
			if err := ep.Send(ctx, 0, 1, s); err != nil {
				return err
			}
		}
	}
	return nil
}

func bw(ctx context.Context, ep *p2p.Endpoint, s, r []byte, k int) error {
	reqs := make([]*p2p.Request, window)
	var ack [4]byte
	for range k {
		if ep.Rank() == 0 {
			for i := range reqs {
				var err error
				if reqs[i], err = ep.Isend(1, 2, s); err != nil {
					return err
				}
			}
			if err := waitRelease(ctx, reqs); err != nil {
				return err
			}
			if _, err := ep.Recv(ctx, 1, 3, ack[:]); err != nil {
				return err
			}
		} else {
			for i := range reqs {
				var err error
				if reqs[i], err = ep.Irecv(0, 2, r[:len(s)]); err != nil {
					return err
				}
			}
			if err := waitRelease(ctx, reqs); err != nil {
				return err
			}
			if err := ep.Send(ctx, 0, 3, ack[:]); err != nil {
				return err
			}
		}
	}
	return nil
}

// warmCount is how many untimed iterations come before a timed loop of k:
// a tenth of them, or all of them for the first size (*first, cleared
// here; see measure).
func warmCount(k int, first *bool) int {
	if *first {
		*first = false
		return k
	}
	return max(1, k/10)
}

// waitRelease waits for reqs and gives them back to the endpoint's pool,
// as rdmabench does: a loop that drops its requests allocates 64 of them
// per window and leaves them to the garbage collector, which is not what
// a program that means to send fast does.
func waitRelease(ctx context.Context, reqs []*p2p.Request) error {
	if err := p2p.WaitAll(ctx, reqs...); err != nil {
		return err
	}
	for i, r := range reqs {
		r.Release()
		reqs[i] = nil
	}
	return nil
}

// rawParent is rank 0 of the raw TCP baseline.
func rawParent(ctx context.Context, bench string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	cmd := exec.Command(os.Args[0], os.Args[1:]...)
	cmd.Env = append(os.Environ(), "P2PBENCH_RANK=1", "P2PBENCH_ADDR="+ln.Addr().String())
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startChild(cmd); err != nil {
		return err
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	c, err := ln.Accept()
	if err != nil {
		return err
	}
	defer c.Close()
	return rawBench(c, 0, bench)
}

func rawChild(bench string) error {
	c, err := net.Dial("tcp", os.Getenv("P2PBENCH_ADDR"))
	if err != nil {
		return err
	}
	defer c.Close()
	return rawBench(c, 1, bench)
}

func rawBench(c net.Conn, me int, bench string) error {
	sbuf := make([]byte, *maxBytes)
	rbuf := make([]byte, *maxBytes*window)
	for i := range sbuf {
		sbuf[i] = byte(i*13 + 1)
	}
	first := true
	var cnt [8]byte
	agree := func(k int) (int, error) {
		if me == 0 {
			binary.LittleEndian.PutUint64(cnt[:], uint64(k))
			_, err := c.Write(cnt[:])
			return k, err
		}
		_, err := io.ReadFull(c, cnt[:])
		return int(binary.LittleEndian.Uint64(cnt[:])), err
	}
	var loop func(n, k int) error
	if bench == "bw" {
		if me == 0 {
			printBinding()
			fmt.Printf("# p2pbench raw TCP baseline\n# BENCH bw (rank 0 -> 1, window=%d writes, 4-byte ack)\n# Size      Bandwidth (MB/s)       Iters\n", window)
		}
		loop = func(n, k int) error {
			for range k {
				if me == 0 {
					for range window {
						if _, err := c.Write(sbuf[:n]); err != nil {
							return err
						}
					}
					if _, err := io.ReadFull(c, cnt[:4]); err != nil {
						return err
					}
				} else {
					if _, err := io.ReadFull(c, rbuf[:n*window]); err != nil {
						return err
					}
					if _, err := c.Write(cnt[:4]); err != nil {
						return err
					}
				}
			}
			return nil
		}
	} else {
		if me == 0 {
			printBinding()
			fmt.Printf("# p2pbench raw TCP baseline\n# BENCH latency (ping-pong rank 0 <-> 1, half round trip)\n# Size          Avg Latency(us)       Iters\n")
		}
		loop = func(n, k int) error {
			for range k {
				if me == 0 {
					if _, err := c.Write(sbuf[:n]); err != nil {
						return err
					}
					if _, err := io.ReadFull(c, rbuf[:n]); err != nil {
						return err
					}
				} else {
					if _, err := io.ReadFull(c, rbuf[:n]); err != nil {
						return err
					}
					if _, err := c.Write(sbuf[:n]); err != nil {
						return err
					}
				}
			}
			return nil
		}
	}
	for _, n := range sizes() {
		if bench == "bw" && n == 0 {
			continue
		}
		iters := 10000
		if n > 8192 {
			iters = 1000
		}
		if bench == "bw" {
			iters = 100
			if n > 8192 {
				iters = 20
			}
		}
		start := time.Now()
		if err := loop(n, 5); err != nil {
			return err
		}
		per := time.Since(start) / 5
		k := iterCount(iters, per)
		k, err := agree(k)
		if err != nil {
			return err
		}
		if err := loop(n, warmCount(k, &first)); err != nil {
			return err
		}
		start = time.Now()
		if err := loop(n, k); err != nil {
			return err
		}
		t := time.Since(start)
		if me == 0 {
			if bench == "bw" {
				fmt.Printf("%-10d %18.2f %11d\n", n, float64(n)*float64(k)*window/t.Seconds()/1e6, k)
			} else {
				fmt.Printf("%-10d %24.2f %11d\n", n, t.Seconds()*1e6/float64(2*k), k)
			}
		}
	}
	return nil
}
