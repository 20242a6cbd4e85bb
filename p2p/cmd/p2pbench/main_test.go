//go:build linux

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/affinity"
)

// buildP2PBench builds the command into a temporary directory.
func buildP2PBench(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "p2pbench")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// TestRuns runs both benchmarks over p2p (loop and tcp) and raw TCP, and
// with -bind checks that rank 0 reports a single CPU of its own and rank
// 1 another.
func TestRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	bin := buildP2PBench(t)
	for _, tc := range []struct {
		args []string
		bind bool
	}{
		{[]string{"-provider", "tcp", "latency"}, false},
		{[]string{"-provider", "tcp", "bw"}, false},
		{[]string{"-provider", "rawtcp", "latency"}, false},
		{[]string{"-provider", "loop", "-procs", "1", "latency"}, false},
		{[]string{"-bind", "-provider", "tcp", "latency"}, true},
		{[]string{"-bind", "-provider", "rawtcp", "bw"}, true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			cpus, err := affinity.CPUs()
			require.NoError(t, err)
			if tc.bind && len(cpus) < 2 {
				t.Skip("needs two CPUs")
			}
			args := append([]string{"-t", "0.01", "-min", "1", "-m", "4096"}, tc.args...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			var rows int
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) == 3 && !strings.HasPrefix(l, "#") {
					rows++
				}
			}
			require.Equal(t, 13, rows, "sizes 1..4096:\n%s", out) // 1, 2, 4, ..., 4096
			if tc.bind {
				require.Regexp(t, `# bind: rank 0 on CPUs \[\d+\], rank 1 on CPU \d+`, string(out))
			}
		})
	}
}

// TestBindNeedsTwoCPUs: -bind on one CPU is an error that says so.
func TestBindNeedsTwoCPUs(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	bin := buildP2PBench(t)
	cpus, err := affinity.CPUs()
	require.NoError(t, err)
	cmd := exec.Command(bin, "-bind", "-provider", "rawtcp", "latency")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, affinity.StartPinned(cmd, cpus[0]))
	require.Error(t, cmd.Wait())
	require.Contains(t, out.String(), "-bind needs two CPUs")
}

// TestItersFixesTheCount: with -iters every size runs exactly that many
// iterations, over p2p and raw TCP, in both benchmarks, whatever -t says
// (a budget of 1 ns would otherwise give the minimum of 5).
func TestItersFixesTheCount(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the command")
	}
	bin := buildP2PBench(t)
	for _, args := range [][]string{
		{"-provider", "tcp", "latency"},
		{"-provider", "tcp", "bw"},
		{"-provider", "rawtcp", "latency"},
		{"-provider", "rawtcp", "bw"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			args := append([]string{"-t", "0.000000001", "-iters", "7", "-min", "1024", "-m", "2048"}, args...)
			out, err := exec.Command(bin, args...).CombinedOutput()
			require.NoError(t, err, "%s", out)
			var iters []string
			for _, l := range strings.Split(string(out), "\n") {
				if f := strings.Fields(l); len(f) == 3 && !strings.HasPrefix(l, "#") {
					iters = append(iters, f[2])
				}
			}
			require.Equal(t, []string{"7", "7"}, iters, "sizes 1024 and 2048:\n%s", out)
		})
	}
}
