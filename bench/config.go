package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdmago/collectives"
)

// Tests are the benchmarks rdmabench runs, in the order the usage lists them.
var tests = []string{"latency", "bw", "bibw", "put_latency", "put_bw", "allreduce", "iallreduce", "bcast", "barrier", "reduce", "allgather", "reduce_scatter", "alltoall"}

// types are the element types of -t.
var types = []string{"float32", "float64", "int32", "int64"}

// config is one rdmabench run, as parsed from the command line.
type config struct {
	Test      string
	Min, Max  int           // message sizes in bytes, both inclusive
	Iters     int           // timed iterations per size; 0 = OSU default capped by Budget
	Warmup    int           // untimed iterations per size; -1 = OSU default capped by Budget
	Validate  bool          // -c: check every result
	Type      string        // element type of the collectives
	Algo      string        // --algo: forced algorithm, "" = the cost model's choice
	API       string        // --api (allreduce): "" or "into", "inplace", "persistent"
	Transport string        // --transport, "" = the launcher's (RDMARUN_TRANSPORT)
	BusBW     bool          // --busbw: nccl-tests algbw/busbw columns
	PerRank   bool          // --per-rank: every rank's own average, after the algorithm
	JSON      string        // --json FILE
	Plot      string        // --plot FILE.png|svg
	Budget    time.Duration // time per size that caps the default iteration counts
	Warm      time.Duration // --warmup-budget: caps the default warm-up; 0 = Budget/5
	Quiet     bool          // -q: no progress on stderr
	CPUProf   string        // --cpuprofile PREFIX: each rank writes PREFIX.RANK
}

// warmBudget is the time per size that caps the default warm-up.
func (cfg *config) warmBudget() time.Duration {
	if cfg.Warm > 0 {
		return cfg.Warm
	}
	return cfg.Budget / 5
}

// isP2P reports whether the test is a point-to-point one (bytes, 2 ranks).
func isP2P(test string) bool {
	return test == "latency" || test == "bw" || test == "bibw" || test == "put_latency" || test == "put_bw"
}

// isLatency reports whether the test is a point-to-point latency one.
func isLatency(test string) bool { return test == "latency" || test == "put_latency" }

// isBW reports whether the test reports bandwidth rather than latency.
func isBW(test string) bool { return test == "bw" || test == "bibw" || test == "put_bw" }

// collective maps a collective test to the collectives package's name, for
// --algo.
func collective(test string) (collectives.Collective, bool) {
	if test == "iallreduce" {
		test = "allreduce" // the same algorithms, started non-blocking
	}
	c, err := collectives.ParseCollective(test)
	return c, err == nil
}

const usageText = `usage: rdmarun -np N rdmabench TEST [flags]
       rdmabench plot [-o FILE.png|svg] [-title T] FILE[=LABEL]...
       rdmabench linelat [-cpus A,B]   (a cache line's trip between two CPUs)

TEST is one of: latency bw bibw put_latency put_bw allreduce iallreduce bcast barrier reduce allgather reduce_scatter alltoall

Flags:
  -m [MIN:]MAX     message sizes in bytes, powers of two from MIN to MAX (K, M, G suffixes:
                   4K = 4096); default 0:4M for latency, 1:4M for bw/bibw/put_*, 4:1M for collectives
  -i N             timed iterations per size (default: OSU's counts, capped by -budget)
  -x N             warm-up iterations per size (default: OSU's counts, capped by -budget)
  -c               validate every result (checks run outside the timed interval)
  -t TYPE          element type of collectives: float32 (default), float64, int32, int64
  --algo NAME      force the collective's algorithm (e.g. ring; see "Algorithms" below)
  --api A          allreduce only: into (default: AllreduceInto, send to recv), inplace
                   (Allreduce on one buffer) or persistent (AllreduceInit once per size,
                   then Start+Wait on that buffer, in place)
  --transport T    auto, shm, tcp or ibv (default: rdmarun's --transport)
  --busbw          add nccl-tests algbw and busbw columns (GB/s)
  --per-rank       collectives: add every rank's own average time a call (us), by rank,
                   after the algorithm (which rank the Min and Max are)
  --json FILE      also write the rows as JSON to FILE
  --plot FILE      draw the sweep into FILE (.png or .svg), log axes; with --busbw
                   the bus bandwidth too, in a second panel
  --budget D       time per size that caps the default iteration counts (default 250ms)
  --warmup-budget D  time per size that caps the default warm-up (default: a fifth of
                   --budget; mpibench's -w, so that both warm up alike at any budget)
  -q               no progress lines on stderr
  --cpuprofile P   write each rank's CPU profile to P.RANK (go tool pprof reads it)
`

// parseArgs parses rdmabench's command line (without the program name).
// The test name may come before, after or between the flags.
func parseArgs(args []string, stderr io.Writer) (config, error) {
	cfg := config{Warmup: -1, Type: "float32", Budget: 250 * time.Millisecond}
	fs := flag.NewFlagSet("rdmabench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fmt.Fprintln(stderr, "\nAlgorithms:")
		for _, c := range collectives.Collectives() {
			fmt.Fprintf(stderr, "  %-15s %v\n", c, collectives.Algorithms(c))
		}
	}
	sizes := fs.String("m", "", "")
	fs.IntVar(&cfg.Iters, "i", 0, "")
	fs.IntVar(&cfg.Warmup, "x", -1, "")
	fs.BoolVar(&cfg.Validate, "c", false, "")
	fs.StringVar(&cfg.Type, "t", "float32", "")
	fs.StringVar(&cfg.Algo, "algo", "", "")
	fs.StringVar(&cfg.API, "api", "", "")
	fs.StringVar(&cfg.Transport, "transport", "", "")
	fs.BoolVar(&cfg.BusBW, "busbw", false, "")
	fs.BoolVar(&cfg.PerRank, "per-rank", false, "")
	fs.StringVar(&cfg.JSON, "json", "", "")
	fs.StringVar(&cfg.Plot, "plot", "", "")
	fs.DurationVar(&cfg.Budget, "budget", cfg.Budget, "")
	fs.DurationVar(&cfg.Warm, "warmup-budget", 0, "")
	fs.BoolVar(&cfg.Quiet, "q", false, "")
	fs.StringVar(&cfg.CPUProf, "cpuprofile", "", "")

	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			return cfg, err
		}
		if fs.NArg() == 0 {
			break
		}
		positional = append(positional, fs.Arg(0))
		args = fs.Args()[1:]
	}
	switch len(positional) {
	case 0:
		return cfg, fmt.Errorf("no TEST given (one of %s)", strings.Join(tests, ", "))
	case 1:
	default:
		return cfg, fmt.Errorf("one TEST at a time, got %q", positional)
	}
	cfg.Test = positional[0]
	if !slices.Contains(tests, cfg.Test) {
		return cfg, fmt.Errorf("unknown TEST %q (want one of %s)", cfg.Test, strings.Join(tests, ", "))
	}
	if !slices.Contains(types, cfg.Type) {
		return cfg, fmt.Errorf("-t %q: want one of %s", cfg.Type, strings.Join(types, ", "))
	}
	if cfg.Iters < 0 {
		return cfg, fmt.Errorf("-i %d: iterations must be >= 1", cfg.Iters)
	}
	if cfg.Warmup < -1 {
		return cfg, fmt.Errorf("-x %d: warm-up iterations must be >= 0", cfg.Warmup)
	}
	if cfg.Budget <= 0 {
		return cfg, fmt.Errorf("--budget %v: must be positive", cfg.Budget)
	}
	if cfg.Warm < 0 {
		return cfg, fmt.Errorf("--warmup-budget %v: must not be negative", cfg.Warm)
	}
	switch cfg.Transport {
	case "", "auto", "shm", "tcp", "ibv":
	default:
		return cfg, fmt.Errorf("--transport %q: want auto, shm, tcp or ibv", cfg.Transport)
	}
	if cfg.Plot != "" && !strings.HasSuffix(cfg.Plot, ".png") && !strings.HasSuffix(cfg.Plot, ".svg") {
		return cfg, fmt.Errorf("--plot %q: the file name must end in .png or .svg", cfg.Plot)
	}
	switch cfg.API {
	case "":
	case "into", "inplace", "persistent":
		if cfg.Test != "allreduce" {
			return cfg, fmt.Errorf("--api %q: only allreduce has other forms, not %s", cfg.API, cfg.Test)
		}
	default:
		return cfg, fmt.Errorf("--api %q: want into, inplace or persistent", cfg.API)
	}
	if cfg.PerRank && (isP2P(cfg.Test) || cfg.Test == "iallreduce") {
		return cfg, fmt.Errorf("--per-rank: %s has no per-rank times (the collectives other than iallreduce have)", cfg.Test)
	}
	if cfg.Algo != "" {
		if err := checkAlgo(cfg.Test, cfg.Algo); err != nil {
			return cfg, err
		}
	}

	cfg.Min, cfg.Max = defaultSizes(cfg.Test)
	if *sizes != "" {
		lo, hi, err := parseSizes(*sizes, cfg.Min)
		if err != nil {
			return cfg, fmt.Errorf("-m %q: %w", *sizes, err)
		}
		cfg.Min, cfg.Max = lo, hi
	}
	return cfg, nil
}

func checkAlgo(test, algo string) error {
	c, ok := collective(test)
	if !ok {
		return fmt.Errorf("--algo %q: %s is not a collective", algo, test)
	}
	a, err := collectives.ParseAlgorithm(algo)
	if err != nil {
		return fmt.Errorf("--algo %q: %w (%s has %v)", algo, err, c, collectives.Algorithms(c))
	}
	if a != collectives.Auto && !slices.Contains(collectives.Algorithms(c), a) {
		return fmt.Errorf("--algo %q: %s has no such algorithm (have %v)", algo, c, collectives.Algorithms(c))
	}
	return nil
}

// defaultSizes are OSU's default ranges.
func defaultSizes(test string) (lo, hi int) {
	switch test {
	case "latency":
		return 0, 4 << 20
	case "bw", "bibw", "put_latency", "put_bw":
		return 1, 4 << 20
	case "barrier":
		return 0, 0
	}
	return 4, 1 << 20
}

// parseSizes parses "MAX", "MIN:MAX", ":MAX" or "MIN:"; a missing MIN is
// defMin, a missing MAX is MIN.
func parseSizes(s string, defMin int) (lo, hi int, err error) {
	a, b, two := strings.Cut(s, ":")
	if !two {
		hi, err = parseBytes(a)
		return min(defMin, hi), hi, err
	}
	lo = defMin
	if a != "" {
		if lo, err = parseBytes(a); err != nil {
			return 0, 0, err
		}
	}
	hi = lo
	if b != "" {
		if hi, err = parseBytes(b); err != nil {
			return 0, 0, err
		}
	}
	if lo > hi {
		return 0, 0, fmt.Errorf("MIN %d is larger than MAX %d", lo, hi)
	}
	return lo, hi, nil
}

// parseBytes parses a byte count with an optional K, M or G (powers of 1024).
func parseBytes(s string) (int, error) {
	mult := 1
	t := strings.TrimSpace(s)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult, t = 1<<10, t[:n-1]
		case 'm', 'M':
			mult, t = 1<<20, t[:n-1]
		case 'g', 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.Atoi(t)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("size %q: want a non-negative byte count such as 64, 4K or 1M", s)
	}
	if v > (1<<34)/mult {
		return 0, fmt.Errorf("size %q: larger than 16 GiB", s)
	}
	return v * mult, nil
}

// sizeList is the sweep: 0 (if MIN is 0), then powers of two from MIN
// (rounded up to a power of two) to MAX.
func sizeList(lo, hi int) []int {
	var out []int
	if lo == 0 {
		out = append(out, 0)
		lo = 1
	}
	s := 1
	for s < lo {
		s *= 2
	}
	for ; s <= hi; s *= 2 {
		out = append(out, s)
	}
	return out
}
