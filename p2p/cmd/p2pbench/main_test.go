//go:build linux

package main

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
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
			var set unix.CPUSet
			require.NoError(t, unix.SchedGetaffinity(0, &set))
			if tc.bind && set.Count() < 2 {
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
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	cpu := -1
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpu = c
			break
		}
	}
	cmd := exec.Command(bin, "-bind", "-provider", "rawtcp", "latency")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	runtime.LockOSThread()
	_, err := pinThread(cpu)
	require.NoError(t, err)
	err = cmd.Start()
	require.NoError(t, unix.SchedSetaffinity(0, &set))
	runtime.UnlockOSThread()
	require.NoError(t, err)
	require.Error(t, cmd.Wait())
	require.Contains(t, out.String(), "-bind needs two CPUs")
}
