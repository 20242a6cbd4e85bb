package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunOneRank runs every collective in this process as a one-rank job
// (comm's singleton mode) with validation on, through run, the whole
// command.
func TestRunOneRank(t *testing.T) {
	clearJobEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, test := range []string{"allreduce", "bcast", "barrier", "reduce", "allgather", "reduce_scatter", "alltoall"} {
		path := filepath.Join(t.TempDir(), test+".json")
		var stdout, stderr bytes.Buffer
		code := run(ctx, []string{test, "-m", "2:4K", "-c", "-i", "3", "-x", "1", "-t", "int32", "--busbw", "--json", path}, &stdout, &stderr)
		require.Equal(t, 0, code, "%s:\n%s\n%s", test, stdout.String(), stderr.String())
		res, err := readJSON(path)
		require.NoError(t, err)
		wantRows := 11 // 4 B .. 4 KiB (2 B holds no int32)
		if test == "barrier" {
			wantRows = 1
		}
		require.Len(t, res.Rows, wantRows, test)
		assert.Equal(t, 1, res.Ranks)
		assert.True(t, res.Validated)
		for _, r := range res.Rows {
			assert.Equal(t, 3, r.Iters, "%s %d", test, r.Size)
			assert.Positive(t, r.Latency, "%s %d", test, r.Size)
			assert.NotEmpty(t, r.Algorithm, "%s %d", test, r.Size)
		}
		assert.Contains(t, stdout.String(), "# test "+test+", 1 ranks, type int32")
	}

	var stdout, stderr bytes.Buffer
	assert.Equal(t, 2, run(ctx, []string{"latency"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), "latency needs 2 ranks, this job has 1")
	stderr.Reset()
	assert.Equal(t, 2, run(ctx, []string{"allreduce", "-t", "complex64"}, &stdout, &stderr))
	assert.Contains(t, stderr.String(), `-t "complex64"`)
}

func clearJobEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "RDMARUN_") || strings.HasPrefix(k, "RDMAGO_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
}

var rdmarunBin, bench string

// binaries builds rdmarun and rdmabench once per test binary.
func binaries(t *testing.T) {
	t.Helper()
	bins := testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/bench")
	rdmarunBin, bench = bins[0], bins[1]
}

func TestMain(m *testing.M) { testbin.Main(m) }

// job runs rdmarun -np np rdmabench args... and returns stdout, stderr and
// the exit status.
func job(t *testing.T, np int, args ...string) (string, string, int) {
	t.Helper()
	r := testbin.Run(t, 60*time.Second, jobEnv(), rdmarunBin, append([]string{"-np", fmt.Sprint(np), "--timeout", "50s", "--stdin", "none", bench}, args...)...)
	return r.Stdout, r.Stderr, r.Code
}

// jobEnv is the test's environment without an enclosing job's or the
// developer's RDMARUN_* and RDMAGO_* variables.
func jobEnv() []string { return testbin.Environ("RDMARUN_*", "RDMAGO_*") }

// rows returns the data rows of the first table as fields.
func rows(out string) [][]string {
	var rs [][]string
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			if len(rs) > 0 {
				break
			}
			continue
		}
		rs = append(rs, f)
	}
	return rs
}

// TestJobs runs rdmabench under the real launcher with validation on: every
// test with 2 ranks, a few with 3 (a rank count that does not divide the
// sizes), a forced algorithm, and the tcp transport.
func TestJobs(t *testing.T) {
	binaries(t)
	for _, tc := range []struct {
		np   int
		args []string
		rows int
		re   []string
	}{
		{2, []string{"latency", "-m", "0:4K", "-i", "20", "-x", "2"}, 14, []string{`(?m)^# Size\s+Latency \(us\)\s+Iters$`, `(?m)^# rank 0 peers 1=shm$`}},
		{2, []string{"bw", "-m", "1:64K", "-i", "3", "-x", "1"}, 17, []string{`(?m)^# Size\s+Bandwidth \(MB/s\)\s+Iters$`}},
		{2, []string{"bibw", "-m", "16K:256K", "-i", "3", "-x", "1"}, 5, nil},
		// From 128 KiB a rendezvous over shm splits the copy between the
		// receiver's READ and the sender's process_vm_writev.
		{2, []string{"latency", "-m", "64K:2M", "-i", "5", "-x", "1"}, 6, nil},
		{2, []string{"bw", "-m", "256K:1M", "-i", "2", "-x", "1"}, 3, nil},
		// Up to 1 MiB: the shared-memory algorithms' block-folding allreduce
		// and split bcast (process_vm_readv/writev) between processes.
		{2, []string{"allreduce", "-m", "4:1M", "--busbw"}, 19, []string{`busbw\(GB/s\)`, `(?m)^1048576 .* shared_memory$`}},
		{2, []string{"bcast", "-m", "1:1M", "-t", "float64"}, 18, []string{`(?m)^1048576 .* shared_memory$`}},
		{2, []string{"barrier"}, 1, nil},
		{2, []string{"reduce", "-m", "4:16K", "-t", "int64"}, 12, nil},
		{2, []string{"allgather", "-m", "4:16K"}, 13, nil},
		{2, []string{"reduce_scatter", "-m", "4:16K"}, 12, nil},
		{2, []string{"alltoall", "-m", "4:16K", "-t", "int32"}, 13, nil},
		{3, []string{"allreduce", "--algo", "ring", "-t", "float64", "-m", "8:256K"}, 16, []string{`(?m)^262144 .* ring$`, `algorithm ring`}},
		{3, []string{"reduce_scatter", "-m", "4:64K", "-t", "int32"}, 13, nil}, // 4 and 8 B hold no block of 3
		{3, []string{"alltoall", "-m", "4:16K"}, 13, nil},
		{2, []string{"latency", "--transport", "tcp", "-m", "0:1K", "-i", "10", "-x", "1"}, 12, []string{`(?m)^# rank 0 peers 1=tcp$`, `transport tcp`}},
		{2, []string{"put_latency", "-m", "1:64K", "-i", "20", "-x", "2"}, 17, []string{`(?m)^# Size\s+Latency \(us\)\s+Iters$`, `test put_latency`}},
		{2, []string{"put_bw", "-m", "1:256K"}, 19, []string{`(?m)^# Size\s+Bandwidth \(MB/s\)\s+Iters$`}},
		{3, []string{"put_bw", "--transport", "tcp", "-m", "8:4K"}, 10, []string{`transport tcp`}},
		{2, []string{"allreduce", "--api", "persistent", "-m", "4:1M"}, 19, []string{`(?m)^# test allreduce, api persistent,`, `(?m)^1048576 .* shared_memory$`}},
		{3, []string{"allreduce", "--api", "persistent", "--transport", "tcp", "-t", "int64", "-m", "8:64K"}, 14, nil},
		{3, []string{"allreduce", "--api", "inplace", "-t", "int32", "-m", "4:64K"}, 15, []string{`api inplace`}},
		{2, []string{"iallreduce", "-m", "4:64K"}, 15, []string{`(?m)^# Size\s+Overall\(us\)\s+Compute\(us\)\s+Pure Comm\.\(us\)\s+Overlap\(%\)\s+Iters\s+Algorithm$`}},
		{3, []string{"iallreduce", "--algo", "ring", "-t", "int64", "-m", "8:64K"}, 14, []string{`(?m)^65536 .* ring$`}},
	} {
		t.Run(fmt.Sprintf("np=%d/%s", tc.np, strings.Join(tc.args, " ")), func(t *testing.T) {
			args := append([]string{}, tc.args...)
			if !strings.Contains(strings.Join(args, " "), "-i ") {
				args = append(args, "-i", "3", "-x", "1")
			}
			args = append(args, "-c", "-q")
			stdout, stderr, code := job(t, tc.np, args...)
			require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
			assert.Contains(t, stdout, "every result validated")
			assert.NotContains(t, stdout, "VALIDATION FAILED")
			rs := rows(stdout)
			require.Len(t, rs, tc.rows, stdout)
			for _, re := range tc.re {
				assert.Regexp(t, regexp.MustCompile(re), stdout)
			}
		})
	}
}

// TestPerRank runs a 3-rank reduce with --per-rank: every row carries each
// rank's own average, by rank, in the JSON and after the algorithm in the
// table, and those are the figures the row's Min, Max and average come from.
func TestPerRank(t *testing.T) {
	binaries(t)
	path := filepath.Join(t.TempDir(), "r.json")
	stdout, stderr, code := job(t, 3, "reduce", "-m", "4:256", "-i", "20", "-x", "2", "-c", "-q", "--per-rank", "--json", path)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Regexp(t, `(?m)^# Size .*Algorithm\s+rank0\(us\)\s+rank1\(us\)\s+rank2\(us\)$`, stdout)
	res, err := readJSON(path)
	require.NoError(t, err)
	require.Len(t, res.Rows, 7) // 4 B .. 256 B
	text := rows(stdout)
	require.Len(t, text, len(res.Rows))
	for i, r := range res.Rows {
		require.Len(t, r.Ranks, 3, "%d bytes", r.Size)
		sum := 0.0
		for _, v := range r.Ranks {
			assert.Positive(t, v, "%d bytes", r.Size)
			sum += v
		}
		assert.Equal(t, slices.Min(r.Ranks), r.Min, "%d bytes", r.Size)
		assert.Equal(t, slices.Max(r.Ranks), r.Max, "%d bytes", r.Size)
		assert.InDelta(t, sum/3, r.Latency, 1e-9, "%d bytes", r.Size)
		// The table: size, average, min, max, iters, algorithm, then ranks 0-2.
		f := text[i]
		require.Len(t, f, 9, "%q", f)
		for k, v := range r.Ranks {
			assert.Equal(t, fmt.Sprintf("%.2f", v), f[6+k], "%d bytes, rank %d", r.Size, k)
		}
	}
}

// TestJobInterrupt stops a long sweep with SIGINT to rdmarun: the rows done
// so far are printed and saved, and the job ends with status 130.
func TestJobInterrupt(t *testing.T) {
	binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := filepath.Join(t.TempDir(), "partial.json")
	cmd := exec.CommandContext(ctx, rdmarunBin, "-np", "2", "--stdin", "none", bench, "latency", "-m", "0:4M", "-i", "100000", "-x", "0", "--json", path)
	cmd.Env = jobEnv()
	var e testbin.Buffer
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = pw, &e
	require.NoError(t, cmd.Start())
	pw.Close()
	// Wait for the column header: the sweep starts right after it, and both
	// ranks handle SIGINT from the start of main, so a signal from here on
	// interrupts the sweep wherever it is (its first size takes seconds).
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(out.String(), "# Size") {
		n, err := pr.Read(buf)
		out.Write(buf[:n])
		require.NoError(t, err, "output so far:\n%s\n%s", out.String(), e.String())
	}
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	rest := make(chan []byte)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(pr)
		rest <- b.Bytes()
	}()
	err = cmd.Wait()
	out.Write(<-rest)
	require.NoError(t, ctx.Err())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "stdout:\n%s\nstderr:\n%s", out.String(), e.String())
	assert.Equal(t, 130, ee.ExitCode(), "stdout:\n%s\nstderr:\n%s", out.String(), e.String())
	assert.Contains(t, out.String(), "# interrupted after")
	res, err := readJSON(path)
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out.String(), e.String())
	assert.True(t, res.Interrupted)
	assert.Less(t, len(res.Rows), 24)
}

// TestValidationCatchesCorruption corrupts one element of one allreduce
// result: -c must report it (rank, size, iteration, element, got and want)
// and the command must fail.
func TestValidationCatchesCorruption(t *testing.T) {
	clearJobEnv(t)
	calls := 0
	testHookAfterOp = func(recv any) {
		calls++
		if calls == 9 {
			recv.([]int32)[2] += 5
		}
	}
	defer func() { testHookAfterOp = nil }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"allreduce", "-m", "4:64", "-c", "-i", "3", "-x", "1", "-t", "int32", "-q"}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	// 4 calls (1 warm-up + 3) per size: call 9 is the first of 16 bytes,
	// a warm-up call, which is checked like every other.
	assert.Contains(t, stdout.String(), "# VALIDATION FAILED: validation failed: allreduce at 16 bytes: 1 wrong results over all ranks")
	assert.Regexp(t, `rank 0: allreduce 16 bytes, iteration 8: element 2 is \d+, want \d+`, stderr.String())
	assert.Len(t, rows(stdout.String()), 2, "the sizes before the failure stay")

	// Without -c nothing is checked (and nothing fails).
	calls = 0
	stdout.Reset()
	assert.Equal(t, 0, run(ctx, []string{"allreduce", "-m", "4:64", "-i", "3", "-x", "1", "-t", "int32", "-q"}, &stdout, &stderr))
}

func TestPattern(t *testing.T) {
	// Consecutive iterations give different data everywhere, so a stale
	// result is caught; sums match a brute-force sum.
	for i := range 50 {
		for r := range 5 {
			assert.NotEqual(t, pattern[int32](i, r, 4), pattern[int32](i, r, 5))
		}
		var s float32
		for r := range 7 {
			s += pattern[float32](i, r, 3)
		}
		assert.Equal(t, s, sumPattern[float32](i, 7, 3))
	}
}

// --cpuprofile P writes this rank's CPU profile to P.RANK; an unwritable
// path fails the command before it measures anything.
func TestCPUProfile(t *testing.T) {
	clearJobEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := filepath.Join(t.TempDir(), "prof")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"barrier", "-i", "3", "-x", "1", "-q", "--cpuprofile", prefix}, &stdout, &stderr)
	require.Equal(t, 0, code, "%s\n%s", stdout.String(), stderr.String())
	f, err := os.Open(prefix + ".0")
	require.NoError(t, err)
	defer f.Close()
	// A pprof profile is a gzip-compressed protocol buffer.
	z, err := gzip.NewReader(f)
	require.NoError(t, err, "rank 0's profile is not gzip data")
	data, err := io.ReadAll(z)
	require.NoError(t, err)
	require.NotEmpty(t, data)

	stdout.Reset()
	stderr.Reset()
	code = run(ctx, []string{"barrier", "-q", "--cpuprofile", filepath.Join(t.TempDir(), "no", "such", "dir", "p")}, &stdout, &stderr)
	assert.Equal(t, 1, code)
	assert.Contains(t, stderr.String(), "--cpuprofile")
	assert.NotContains(t, stdout.String(), "# Size", "nothing was measured")
}

// TestCalibratedJob runs without -i: the first size warms the job up for a
// budget and every size sizes its timed loop from a calibration. Each row
// ran at least the 5 iterations the calibration guarantees, and at most
// OSU's count; the sweep of two 30 ms budgets per size finishes well
// within the job's timeout.
func TestCalibratedJob(t *testing.T) {
	binaries(t)
	stdout, stderr, code := job(t, 2, "latency", "-m", "0:64", "--budget", "30ms", "-c", "-q")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", stdout, stderr)
	assert.Contains(t, stdout, "every result validated")
	rs := rows(stdout)
	require.Len(t, rs, 8, stdout)
	for _, r := range rs {
		iters, err := strconv.Atoi(r[len(r)-1])
		require.NoError(t, err, "row %v", r)
		assert.True(t, iters >= 5 && iters <= 10000, "row %v: %d iterations", r, iters)
	}
}
