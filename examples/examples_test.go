package examples_test

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// build builds rdmarun and the named examples (once per test binary) and
// returns rdmarun's path and the examples' by name.
func build(t *testing.T, names ...string) (rdmarun string, examples map[string]string) {
	t.Helper()
	pkgs := []string{"github.com/rdmago/rdmago/cmd/rdmarun"}
	for _, n := range names {
		pkgs = append(pkgs, "github.com/rdmago/rdmago/examples/"+n)
	}
	bins := testbin.Build(t, pkgs...)
	examples = map[string]string{}
	for i, n := range names {
		examples[n] = bins[i+1]
	}
	return bins[0], examples
}

// TestExamples runs every example under the real launcher (cmd/rdmarun) with
// 1, 2 and 4 ranks and checks each one's result line, including the numbers
// that follow from the rank count.
func TestExamples(t *testing.T) {
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
		{"halo-put", []string{"-n", "200", "-steps", "120"}, func(np int) string {
			return fmt.Sprintf(`(?m)^halo-put: 200 points, %d ranks, 120 steps, max \|parallel-serial\| 0 OK$`, np)
		}},
		{"sgd", []string{"-steps", "60", "-n", "1024", "-batch", "100"}, func(np int) string {
			return fmt.Sprintf(`(?m)^sgd: 8 features, 1024 samples, batch 100, 60 steps, %d ranks, loss 0\.\d+, accuracy 0\.\d+, max \|w-w_serial\| \S+ \(tol 1e-09\) OK$`, np)
		}},
		{"shrink", []string{"-n", "1000", "-iters", "10"}, func(np int) string {
			// Without a death: every rank runs to the end, nobody recovers.
			return fmt.Sprintf(`(?m)^shrink: n=1000, 10 iterations, %d ranks at the start, %d at the end, acc \d+ OK$`, np, np)
		}},
	}
	var names []string
	for _, tc := range cases {
		names = append(names, tc.name)
	}
	rdmarun, bins := build(t, names...)
	for _, tc := range cases {
		for _, np := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/np=%d", tc.name, np), func(t *testing.T) {
				args := append([]string{"-np", fmt.Sprint(np), "--timeout", "40s", "--stdin", "none", bins[tc.name]}, tc.args...)
				r := run(t, rdmarun, args...)
				require.Regexp(t, regexp.MustCompile(tc.want(np)), r.Stdout, r)
				if tc.name == "hello" {
					// One line per rank, each naming "self" for itself.
					for rank := range np {
						require.Regexp(t, fmt.Sprintf(`(?m)^hello: rank %d of %d on host .*peers .*\b%d=self\b`, rank, np, rank), r.Stdout, r)
					}
					if np > 1 {
						require.Contains(t, r.Stdout, "=shm", "ranks on one host should talk over shm by default\n%s", r)
					}
				}
			})
		}
	}
}

// TestTransportFlag checks that rdmarun --transport reaches the ranks: hello
// reports tcp for every peer.
func TestTransportFlag(t *testing.T) {
	rdmarun, bins := build(t, "hello")
	r := run(t, rdmarun, "-np", "2", "--transport", "tcp", "--timeout", "40s", "--stdin", "none", bins["hello"])
	require.Contains(t, r.Stdout, "peers 0=self 1=tcp", r)
	require.Contains(t, r.Stdout, "peers 0=tcp 1=self", r)
}

// run runs an rdmarun job (whose own --timeout is shorter than the
// deadline here) without the variables of an enclosing job or tuning that
// would change what the examples do, and fails the test unless it
// succeeds.
func run(t *testing.T, rdmarun string, args ...string) testbin.Result {
	t.Helper()
	r := testbin.Run(t, time.Minute, testbin.Environ("RDMARUN_*", "RDMAGO_*"), rdmarun, args...)
	require.Equal(t, 0, r.Code, r)
	return r
}
