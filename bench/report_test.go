package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestBusFactor(t *testing.T) {
	for _, tc := range []struct {
		test string
		p    int
		want float64
	}{
		{"allreduce", 2, 1}, {"allreduce", 4, 1.5}, {"allreduce", 8, 1.75},
		{"allgather", 4, 0.75}, {"reduce_scatter", 4, 0.75}, {"alltoall", 8, 0.875},
		{"bcast", 4, 1}, {"reduce", 3, 1},
		{"barrier", 4, 0}, {"allreduce", 1, 0},
	} {
		assert.InDelta(t, tc.want, busFactor(tc.test, tc.p), 1e-12, "%s p=%d", tc.test, tc.p)
	}
}

func TestFillBW(t *testing.T) {
	// 1 MB allreduce in 1 ms on 4 ranks: algbw 1 GB/s, busbw 1.5 GB/s.
	r := Row{Size: 1e6, Latency: 1000}
	fillBW(&r, "allreduce", 4)
	assert.InDelta(t, 1.0, r.AlgBW, 1e-9)
	assert.InDelta(t, 1.5, r.BusBW, 1e-9)
	// allgather: nccl-tests' size is the whole output, p times the OSU size.
	r = Row{Size: 1e6, Latency: 1000}
	fillBW(&r, "allgather", 4)
	assert.InDelta(t, 4.0, r.AlgBW, 1e-9)
	assert.InDelta(t, 3.0, r.BusBW, 1e-9)
	r = Row{Size: 0, Latency: 3}
	fillBW(&r, "barrier", 4)
	assert.Zero(t, r.AlgBW)
}

func sampleResult() *Result {
	return &Result{
		Tool: "rdmabench", Version: "rdmago/comm 0.1", Go: "go1.26", Date: "2026-11-30T07:00:00Z",
		Test: "allreduce", Ranks: 2, Type: "float32", Algo: "auto", Transport: "auto",
		Transports: [][]string{{"self", "shm"}, {"shm", "self"}}, Host: "vm", CPU: "cpu (2 logical cores)",
		CPUFeatures: []string{"avx2"}, Validated: true,
		Links:      []Link{{Peer: 1, SameHost: true, LatencyUS: 0.15, GBps: 20}, {Peer: 2, LatencyUS: 20, GBps: 1}},
		Network:    &Link{Peer: -1, LatencyUS: 11.25, GBps: 5.125},
		SingleCopy: 9307,
		Rows: []Row{
			{Size: 4, Iters: 1000, Latency: 1.5, Min: 1.25, Max: 1.75, AlgBW: 0.001, BusBW: 0.001, Algorithm: "recursive_doubling"},
			{Size: 1048576, Iters: 100, Latency: 210.126, Min: 200, Max: 220, AlgBW: 4.99, BusBW: 4.99, Algorithm: "ring"},
		},
	}
}

func TestTableFormat(t *testing.T) {
	var b bytes.Buffer
	writeTable(&b, sampleResult(), true)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// Every descriptive line is an OSU comment; the data rows follow.
	for _, l := range lines[:len(lines)-2] {
		assert.True(t, strings.HasPrefix(l, "#"), "header line %q", l)
	}
	assert.Contains(t, out, "# rdmabench rdmago/comm 0.1 (go1.26) 2026-11-30T07:00:00Z\n")
	assert.Contains(t, out, "# test allreduce, 2 ranks, type float32, algorithm auto, transport auto, every result validated\n")
	assert.Contains(t, out, "# rank 0 peers 1=shm\n# rank 1 peers 0=shm\n")
	assert.Contains(t, out, "# cpu features avx2\n")
	assert.Contains(t, out, "# rank 0 link estimates 1 (same host) 0.15us 20.00GB/s 2 (other host) 20.00us 1.00GB/s\n")
	assert.Contains(t, out, "# network between hosts measured at start-up: 11.25us 5.12GB/s\n")
	assert.Contains(t, out, "# one kernel copy beat two through shared memory, measured at start-up, above 9307 bytes\n")
	assert.Regexp(t, `(?m)^# Size\s+Avg Latency\(us\)\s+Min Latency\(us\)\s+Max Latency\(us\)\s+Iters\s+algbw\(GB/s\)\s+busbw\(GB/s\)\s+Algorithm$`, out)
	assert.Regexp(t, `(?m)^1048576\s+210\.13\s+200\.00\s+220\.00\s+100\s+4\.990\s+4\.990\s+ring$`, out)

	// What osu-compare and "rdmabench plot" read back: size and average.
	s, err := parseOSU(strings.NewReader(out), "x")
	require.NoError(t, err)
	assert.Equal(t, []float64{4, 1048576}, s.X)
	assert.Equal(t, []float64{1.5, 210.13}, s.Y)
	assert.Equal(t, metricLatency, s.Metric)

	// --per-rank: every rank's average after the algorithm, where OSU
	// parsers, which read the size and the average, do not look.
	b.Reset()
	writeColumns(&b, "reduce", false, 3)
	writeRow(&b, "reduce", false, Row{Size: 8, Latency: 14, Min: 10, Max: 20, Iters: 100, Algorithm: "binomial", Ranks: []float64{20, 10, 12}})
	assert.Regexp(t, `(?m)^# Size\s+Avg Latency\(us\)\s+Min Latency\(us\)\s+Max Latency\(us\)\s+Iters\s+Algorithm\s+rank0\(us\)\s+rank1\(us\)\s+rank2\(us\)$`, b.String())
	assert.Regexp(t, `(?m)^8\s+14\.00\s+10\.00\s+20\.00\s+100\s+binomial\s+20\.00\s+10\.00\s+12\.00$`, b.String())
	s, err = parseOSU(strings.NewReader(b.String()), "r")
	require.NoError(t, err)
	assert.Equal(t, []float64{8}, s.X)
	assert.Equal(t, []float64{14}, s.Y)

	b.Reset()
	writeColumns(&b, "latency", false, 0)
	writeRow(&b, "latency", false, Row{Size: 8, Latency: 0.456, Iters: 10000})
	assert.Equal(t, "# Size             Latency (us)       Iters\n8                          0.46       10000\n", b.String())
	b.Reset()
	writeColumns(&b, "bw", true, 0) // no busbw columns for p2p
	writeRow(&b, "bw", true, Row{Size: 4194304, Bandwidth: 12345.678, Iters: 20})
	assert.Equal(t, "# Size         Bandwidth (MB/s)       Iters\n4194304                12345.68          20\n", b.String())
	s, err = parseOSU(&b, "bw")
	require.NoError(t, err)
	assert.Equal(t, metricBandwidth, s.Metric)
}

func TestJSONRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run.json")
	in := sampleResult()
	in.Interrupted = true
	in.Rows[0].Ranks = []float64{1.75, 1.25}
	require.NoError(t, writeJSON(path, in))
	out, err := readJSON(path)
	require.NoError(t, err)
	assert.Equal(t, in, out)

	require.NoError(t, writeJSON(path, &Result{}))
	_, err = readJSON(path)
	assert.ErrorContains(t, err, "not an rdmabench JSON file")
}

func TestParseOSUMpibench(t *testing.T) {
	// mpibench's output: several tables; the first one is read.
	const text = `# mpibench (OSU-style)  library: Open MPI v4.1.4
# np=2 budget=0.25s/size warmup_budget=0.05s min_iters=5
# BENCH latency (ping-pong rank 0 <-> 1, half round trip)
# Size          Avg Latency(us)       Iters
0                          0.21       10000
1                          0.23       10000
# VERIFY latency OK (0 errors)
# BENCH bw (rank 0 -> 1, window=64 MPI_Isend, 4-byte ack)
# Size      Bandwidth (MB/s)       Iters
1                          3.10         100
`
	s, err := parseOSU(strings.NewReader(text), "ompi")
	require.NoError(t, err)
	assert.Equal(t, series{Label: "ompi", Metric: metricLatency, X: []float64{0, 1}, Y: []float64{0.21, 0.23}}, s)
	_, err = parseOSU(strings.NewReader("# nothing\n"), "x")
	assert.ErrorContains(t, err, "no OSU-style rows")
}

// TestOverlapPercent: OSU's overlap is the share of the pure collective
// time hidden behind the computation, clamped at 0.
func TestOverlapPercent(t *testing.T) {
	assert.InDelta(t, 100, overlapPercent(100, 100, 40), 1e-9) // nothing beyond the computation
	assert.InDelta(t, 50, overlapPercent(120, 100, 40), 1e-9)
	assert.InDelta(t, 0, overlapPercent(140, 100, 40), 1e-9) // not overlapped at all
	assert.InDelta(t, 0, overlapPercent(300, 100, 40), 1e-9) // worse than serial: clamped
	assert.InDelta(t, 0, overlapPercent(100, 100, 0), 1e-9)  // no pure time measured
	var b bytes.Buffer
	writeColumns(&b, "iallreduce", false, 0)
	writeRow(&b, "iallreduce", false, Row{Size: 8, Latency: 12.5, Compute: 10, Pure: 5, Overlap: 50, Iters: 7, Algorithm: "ring"})
	assert.Regexp(t, `(?m)^8\s+12\.50\s+10\.00\s+5\.00\s+50\.00\s+7  ring$`, b.String())
}
