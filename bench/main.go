// Command rdmabench measures whole rdmago jobs the way the OSU
// micro-benchmarks and nccl-tests measure MPI and NCCL: point-to-point
// latency and bandwidth, and every collective, over a sweep of message sizes,
// with tables that OSU-parsing scripts read.
//
//	go build -o rdmabench ./bench
//	rdmarun -np 2 ./rdmabench latency
//	rdmarun -np 4 ./rdmabench allreduce -m 4:64M --busbw -c --json ar.json --plot ar.png
//	rdmarun -np 4 ./rdmabench allreduce --algo ring -t float64
//	rdmabench plot -o cmp.png ring.json=ring rabenseifner.json=rabenseifner osu.txt=OpenMPI
//	rdmabench linelat       # how long a cache line takes between two CPUs
//
// (go run ./cmd/rdmarun -np 2 ./bench latency builds and runs it in one step.)
// Run without rdmarun, it is a one-rank job. The first lines of the output
// ("#") say what ran: library and Go version, test, ranks, element type,
// algorithm, the transport between every pair of ranks, the host's CPU and
// its vector features. Then one row per size: "Size  Latency (us)" for
// latency and put_latency, "Size  Bandwidth (MB/s)" for bw, bibw and put_bw, "Size  Avg Latency(us)
// Min Max Iters" for collectives (plus nccl-tests' algbw and busbw with
// --busbw, the algorithm that ran, and with --per-rank every rank's own
// average). The methodology is in run.go.
//
// Progress goes to stderr once a sweep runs longer than 2 s. Ctrl-C
// (SIGINT, SIGTERM; rdmarun forwards them) stops the sweep; the rows
// finished so far are printed and written to --json and --plot, and the
// exit status is 130.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/cpuid/v2"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// firstRank reports whether this process is rank 0 of its job, joining
// the job to learn it (every rank of the job calls it, as every rank got
// the same command line). A process that cannot join reports true: it has
// nobody to leave the reporting to.
func firstRank(ctx context.Context) bool {
	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		return true
	}
	defer c.Close()
	return c.Rank() == 0
}

// subcommands run in one process, outside any job: their function and
// the exit status when it fails.
var subcommands = map[string]struct {
	run    func(args []string, stdout, stderr io.Writer) error
	failed int
}{
	"plot":    {plotCmd, 2},    // bad input files, like a bad command line
	"linelat": {linelatCmd, 1}, // the measurement failed
}

// run is the whole command; it returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		if sub, ok := subcommands[args[0]]; ok {
			if err := sub.run(args[1:], stdout, stderr); err != nil {
				if errors.Is(err, flag.ErrHelp) {
					return 0
				}
				fmt.Fprintf(stderr, "rdmabench %s: %v\n", args[0], err)
				return sub.failed
			}
			return 0
		}
	}
	var parsed bytes.Buffer // the usage and the flag package's complaints
	cfg, err := parseArgs(args, &parsed)
	if err != nil {
		// Every rank of a job parses the same command line: rank 0 alone
		// says what is wrong (or prints the usage), once for the job.
		if firstRank(ctx) {
			stderr.Write(parsed.Bytes())
			if !errors.Is(err, flag.ErrHelp) {
				fmt.Fprintf(stderr, "rdmabench: %v\n(rdmabench -h for usage)\n", err)
			}
		}
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}

	opts := comm.Options{Singleton: true, Transport: cfg.Transport}
	if cfg.Algo != "" {
		coll, _ := collective(cfg.Test)
		a, _ := collectives.ParseAlgorithm(cfg.Algo)
		opts.Collectives.Algorithms = map[collectives.Collective]collectives.Algorithm{coll: a}
	}
	c, err := comm.FromEnv(ctx, opts)
	if err != nil {
		fmt.Fprintf(stderr, "rdmabench: %v\n", err)
		return 1
	}
	defer c.Close()
	if isP2P(cfg.Test) && c.Size() < 2 {
		fmt.Fprintf(stderr, "rdmabench: %s needs 2 ranks, this job has %d (run: rdmarun -np 2 rdmabench %s)\n", cfg.Test, c.Size(), cfg.Test)
		return 2
	}

	if cfg.CPUProf != "" {
		stopProf, err := startCPUProfile(fmt.Sprintf("%s.%d", cfg.CPUProf, c.Rank()))
		if err != nil {
			fmt.Fprintf(stderr, "rdmabench: --cpuprofile: %v\n", err)
			return 1
		}
		defer stopProf()
	}

	res, err := describe(ctx, c, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "rdmabench: %v\n", err)
		return 1
	}
	root := c.Rank() == 0
	if root {
		writeHeader(stdout, res)
		ranks := 0
		if cfg.PerRank {
			ranks = c.Size()
		}
		writeColumns(stdout, cfg.Test, cfg.BusBW, ranks)
	}
	emit := func(r Row) {
		res.Rows = append(res.Rows, r)
		writeRow(stdout, cfg.Test, cfg.BusBW, r)
	}
	switch {
	case isP2P(cfg.Test):
		err = newRunner[byte](c, cfg, stderr).sweep(ctx, emit)
	case cfg.Type == "float64":
		err = newRunner[float64](c, cfg, stderr).sweep(ctx, emit)
	case cfg.Type == "int32":
		err = newRunner[int32](c, cfg, stderr).sweep(ctx, emit)
	case cfg.Type == "int64":
		err = newRunner[int64](c, cfg, stderr).sweep(ctx, emit)
	default:
		err = newRunner[float32](c, cfg, stderr).sweep(ctx, emit)
	}
	if err != nil && ctx.Err() == nil && (errors.Is(err, comm.ErrClosed) || errors.Is(err, comm.ErrPeerLost)) {
		// rdmarun forwards Ctrl-C to every rank at once; a peer that
		// reacted first has closed its end. Give this rank's own signal a
		// moment to arrive so that it, too, reports an interruption and
		// keeps its rows, rather than a failure.
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	code := 0
	switch {
	case ctx.Err() != nil:
		res.Interrupted = true
		if root {
			fmt.Fprintf(stdout, "# interrupted after %d sizes\n", len(res.Rows))
		}
		code = 130
	case errors.Is(err, errValidation):
		if root {
			fmt.Fprintf(stdout, "# VALIDATION FAILED: %v\n", err)
		}
		fmt.Fprintf(stderr, "rdmabench: %v\n", err)
		code = 1
	case err != nil:
		fmt.Fprintf(stderr, "rdmabench: %v\n", err)
		return 1
	}
	if root {
		if cfg.JSON != "" {
			if err := writeJSON(cfg.JSON, res); err != nil {
				fmt.Fprintf(stderr, "rdmabench: --json: %v\n", err)
				return 1
			}
		}
		if cfg.Plot != "" && len(res.Rows) > 0 {
			if err := drawPlot(cfg.Plot, "", []series{seriesOf(res, "")}); err != nil {
				fmt.Fprintf(stderr, "rdmabench: --plot: %v\n", err)
				return 1
			}
		}
	}
	return code
}

// describe fills the run's header: versions, CPU, and the transport between
// every pair of ranks, gathered on rank 0 (one byte per peer).
func describe(ctx context.Context, c *comm.Comm, cfg config) (*Result, error) {
	res := &Result{
		Tool: "rdmabench", Version: comm.Version, Go: runtime.Version(),
		Date: time.Now().UTC().Format(time.RFC3339), Test: cfg.Test, Ranks: c.Size(),
		Type: cfg.Type, Algo: cfg.Algo, API: cfg.API, Transport: cfg.Transport, Validated: cfg.Validate,
		CPU: fmt.Sprintf("%s (%d logical cores)", cpuid.CPU.BrandName, runtime.NumCPU()), CPUFeatures: cpuFeatures(),
	}
	if isP2P(cfg.Test) {
		res.Type = "byte"
	}
	if res.Algo == "" {
		res.Algo = "auto"
	}
	if res.Transport == "" {
		res.Transport = os.Getenv("RDMARUN_TRANSPORT")
		if res.Transport == "" {
			res.Transport = "auto"
		}
	}
	res.Host, _ = os.Hostname()

	names := []string{"?", "self", "shm", "tcp", "ibv", "loop"}
	p := c.Size()
	mine := make([]byte, p)
	for j := range p {
		if i := slices.Index(names, c.Transport(j)); i > 0 {
			mine[j] = byte(i)
		}
	}
	var all []byte
	if c.Rank() == 0 {
		all = make([]byte, p*p)
	}
	if err := comm.Gather(ctx, c, mine, all, 0); err != nil {
		return nil, fmt.Errorf("gathering the transports: %w", err)
	}
	if c.Rank() == 0 {
		res.Links = linkEstimates(c)
		if lat, bw, ok := c.MeasuredNetwork(); ok {
			res.Network = &Link{Peer: -1, LatencyUS: float64(lat) / float64(time.Microsecond), GBps: bw / 1e9}
		}
		res.SingleCopy = c.SingleCopyMin()
		res.Transports = make([][]string, p)
		for i := range p {
			res.Transports[i] = make([]string, p)
			for j := range p {
				res.Transports[i][j] = names[all[i*p+j]]
			}
		}
	}
	return res, nil
}

// linkEstimates is this rank's cost-model estimate of its links to the
// first peer on its host and the first on another host (Result.Links).
func linkEstimates(c *comm.Comm) []Link {
	var out []Link
	me, err := c.Peer(c.Rank())
	if err != nil {
		return nil
	}
	seen := map[bool]bool{}
	for j := range c.Size() {
		p, err := c.Peer(j)
		if err != nil || j == c.Rank() {
			continue
		}
		same := p.HostIndex == me.HostIndex
		if seen[same] {
			continue
		}
		seen[same] = true
		out = append(out, Link{Peer: j, SameHost: same, LatencyUS: float64(p.Latency) / float64(time.Microsecond), GBps: p.Bandwidth / 1e9})
	}
	return out
}

// cpuFeatures lists the features that matter to reductions and copies.
func cpuFeatures() []string {
	var out []string
	for _, f := range []cpuid.FeatureID{cpuid.SSE2, cpuid.SSE4, cpuid.SSE42, cpuid.AVX, cpuid.AVX2, cpuid.FMA3,
		cpuid.F16C, cpuid.AVX512F, cpuid.AVX512BW, cpuid.AVX512VL, cpuid.AVX512BF16, cpuid.AVX512FP16,
		cpuid.ERMS, cpuid.FSRM, cpuid.ASIMD, cpuid.SVE} {
		if cpuid.CPU.Supports(f) {
			out = append(out, strings.ToLower(f.String()))
		}
	}
	return out
}

// startCPUProfile profiles this rank into path until the returned func runs.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}
