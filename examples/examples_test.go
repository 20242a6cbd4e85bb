package examples_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestExamples runs every example under the real launcher (cmd/rdmarun) with
// 1, 2 and 4 ranks and checks each one's result line, including the numbers
// that follow from the rank count.
func TestExamples(t *testing.T) {
	if testing.Short() {
		t.Skip("builds rdmarun and the examples and runs 18 jobs; skipped with -short")
	}
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// One go build for rdmarun and all examples (each main package lands in
	// bin under its directory's name).
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator),
		"github.com/rdmago/rdmago/cmd/rdmarun",
		"github.com/rdmago/rdmago/examples/...").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)

	cases := []struct {
		name string
		args []string
		want func(np int) string // a regexp the output must match
	}{
		{"hello", nil, func(np int) string {
			return fmt.Sprintf(`(?m)^hello: %d ranks OK$`, np)
		}},
		{"ring", []string{"-laps", "3"}, func(np int) string {
			w := 3 * np * (np - 1) / 2
			return fmt.Sprintf(`(?m)^ring: 3 laps over %d ranks, token %d \(want %d\) OK$`, np, w, w)
		}},
		{"allreduce", []string{"-n", "100003"}, func(np int) string {
			// Σ_i p(p+1)/2·(1+i mod 7) over 100003 elements.
			var s int64
			for i := range 100003 {
				s += int64(np*(np+1)/2) * int64(1+i%7)
			}
			return fmt.Sprintf(`(?m)^allreduce: 100003 float64 over %d ranks, sum of result %d, 0 wrong elements OK$`, np, s)
		}},
		{"heat", []string{"-n", "20", "-tol", "2e-3"}, func(np int) string {
			return fmt.Sprintf(`(?m)^heat: 20x20 grid, %d ranks, \d+ sweeps, .*max \|parallel-serial\| 0 OK$`, np)
		}},
		{"cg", []string{"-n", "90"}, func(np int) string {
			return fmt.Sprintf(`(?m)^cg: n=90, %d ranks, \d+ iterations, residual \S+, max rel diff vs gonum Cholesky \S+ \(tol 1e-08\) OK$`, np)
		}},
		{"sgd", []string{"-steps", "60", "-n", "1024", "-batch", "100"}, func(np int) string {
			return fmt.Sprintf(`(?m)^sgd: 8 features, 1024 samples, batch 100, 60 steps, %d ranks, loss 0\.\d+, accuracy 0\.\d+, max \|w-w_serial\| \S+ \(tol 1e-09\) OK$`, np)
		}},
	}
	for _, tc := range cases {
		for _, np := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/np=%d", tc.name, np), func(t *testing.T) {
				args := append([]string{"-np", fmt.Sprint(np), "--timeout", "40s", "--stdin", "none",
					filepath.Join(bin, tc.name)}, tc.args...)
				stdout, stderr := run(t, ctx, filepath.Join(bin, "rdmarun"), args...)
				require.Regexp(t, regexp.MustCompile(tc.want(np)), stdout, "stderr:\n%s", stderr)
				if tc.name == "hello" {
					// One line per rank, each naming "self" for itself.
					for r := range np {
						require.Regexp(t, fmt.Sprintf(`(?m)^hello: rank %d of %d on host .*peers .*\b%d=self\b`, r, np, r), stdout)
					}
					if np > 1 {
						require.Contains(t, stdout, "=shm", "ranks on one host should talk over shm by default")
					}
				}
			})
		}
	}
}

// TestTransportFlag checks that rdmarun --transport reaches the ranks: hello
// reports tcp for every peer.
func TestTransportFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("runs an rdmarun job")
	}
	bin := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "build", "-o", bin+string(filepath.Separator),
		"github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/examples/hello").CombinedOutput()
	require.NoError(t, err, "go build:\n%s", out)
	stdout, stderr := run(t, ctx, filepath.Join(bin, "rdmarun"), "-np", "2", "--transport", "tcp", "--timeout", "40s",
		"--stdin", "none", filepath.Join(bin, "hello"))
	require.Contains(t, stdout, "peers 0=self 1=tcp", stderr)
	require.Contains(t, stdout, "peers 0=tcp 1=self", stderr)
}

// run runs a command bounded by ctx and fails the test on a non-zero exit.
func run(t *testing.T, ctx context.Context, name string, args ...string) (string, string) {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = cleanEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%s %v timed out:\n%s\n%s", name, args, o.String(), e.String())
	require.NoError(t, err, "%s %v:\nstdout:\n%s\nstderr:\n%s", name, args, o.String(), e.String())
	return o.String(), e.String()
}

// cleanEnv drops variables of an enclosing job or tuning that would change
// what the examples do.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "RDMARUN_") || strings.HasPrefix(kv, "RDMAGO_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
