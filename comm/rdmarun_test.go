package comm_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Multi-process jobs through the real launcher: cmd/rdmarun starts
// comm/internal/testprog, which joins with FromEnv.

var rdmarunBin, progBin string

// buildJobBinaries builds rdmarun and the FromEnv test program once per test binary.
func buildJobBinaries(t *testing.T) {
	t.Helper()
	bins := testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/comm/internal/testprog")
	rdmarunBin, progBin = bins[0], bins[1]
}

func TestMain(m *testing.M) { testbin.Main(m) }

// job runs rdmarun with args and returns its output and exit code.
func job(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	r := testbin.Run(t, 90*time.Second, testbin.Environ("RDMARUN_*", "RDMAGO_*"), rdmarunBin, args...)
	return r.Stdout, r.Stderr, r.Code
}

func TestRdmarunJobs(t *testing.T) {
	buildJobBinaries(t)
	line := regexp.MustCompile(`(?m)^ok rank=(\d+) size=(\d+) local=(\d+)/(\d+) transports=(\S+) sum=(\S+)$`)
	copies := regexp.MustCompile(`(?m)^copies rank=(\d+) single=(\d+)$`)
	for _, transport := range []string{"tcp", "shm"} {
		for _, np := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("transport=%s/np=%d", transport, np), func(t *testing.T) {
				out, errOut, code := job(t, "-np", fmt.Sprint(np), "--transport", transport, "--connect-timeout", "30s", progBin)
				require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
				ms := line.FindAllStringSubmatch(out, -1)
				require.Len(t, ms, np, out)
				seen := map[string]bool{}
				for _, m := range ms {
					seen[m[1]] = true
					assert.Equal(t, fmt.Sprint(np), m[2])
					assert.Equal(t, m[1], m[3], "local rank on one host")
					assert.Equal(t, fmt.Sprint(np), m[4])
					assert.Equal(t, fmt.Sprint(7*np*(np-1)/2), m[6])
					for r, tr := range strings.Split(m[5], ",") {
						if fmt.Sprint(r) == m[1] {
							assert.Equal(t, "self", tr)
						} else {
							assert.Equal(t, transport, tr, "rank %s's transport to %d", m[1], r)
						}
					}
				}
				assert.Len(t, seen, np)
				// Init's measurement of the copies between a host's
				// ranks: one figure on every rank, nothing to measure
				// over tcp, 0 or within the sizes measured over shm.
				cs := copies.FindAllStringSubmatch(out, -1)
				require.Len(t, cs, np, out)
				for _, m := range cs {
					assert.Equal(t, cs[0][2], m[2], "rank %s's crossover against rank %s's", m[1], cs[0][1])
				}
				n, _ := strconv.Atoi(cs[0][2])
				if transport == "tcp" || np == 1 {
					assert.Zero(t, n)
				} else if n != 0 {
					assert.GreaterOrEqual(t, n, 4096)
					assert.LessOrEqual(t, n, 32<<10)
				}
			})
		}
	}
}

func TestRdmarunAbort(t *testing.T) {
	buildJobBinaries(t)
	out, errOut, code := job(t, "-np", "3", "--connect-timeout", "30s", progBin, "-abort-rank", "1", "-abort-code", "3")
	assert.Equal(t, 3, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, errOut, "rank 1")
	assert.Contains(t, errOut, "Abort(3)")
	assert.NotContains(t, out, "ok rank=")
}

// A rank that closes and exits 0 early: the others' next collective fails
// at once naming it (over shm too, where the collectives run through
// shared memory), and rdmarun names that rank as where the failure began
// and the others as failing because of it, instead of the first survivor
// to exit. Which others are listed depends on who failed before rdmarun
// stopped the job (a survivor may still be asking the rendezvous why rank
// 1 left), so any of them may be.
func TestRdmarunRankLeavesEarly(t *testing.T) {
	buildJobBinaries(t)
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			out, errOut, code := job(t, "-np", "4", "--transport", transport, "--connect-timeout", "30s", progBin, "-leave-rank", "1", "-n", "8")
			assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			assert.Contains(t, out, "left rank=1")
			assert.Regexp(t, `failed: the failure began at rank 1 \(host \S+\), which closed its communicator early \([^\n]*peer 1: closed[^\n]*\); ranks? [023](, [023])*( and [023])? failed because of it`, errOut)
		})
	}
}

// A count mismatch: every rank fails, and rdmarun names the rank whose
// count differs, not the first rank to exit.
func TestRdmarunCountMismatchBlamed(t *testing.T) {
	buildJobBinaries(t)
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			out, errOut, code := job(t, "-np", "5", "--transport", transport, "--connect-timeout", "30s", progBin, "-count-rank", "3", "-n", "1")
			assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			// Either rank 3 exits first (the others listed are those that
			// failed before rdmarun stopped them), or rdmarun finds it from the reports:
			// the mismatch, or (when the shared-memory waits of the others saw
			// rank 3 leave before they heard why) its early close.
			assert.Regexp(t, `failed: (the failure began at rank 3 \(host \S+\), which (called a collective with arguments that differ from the others'|closed its communicator early)|rank 3 \(host \S+, pid \d+\) exited with code 1; ranks? [0-24][-0-24, and]* failed because of it)`, errOut)
		})
	}
}

// A rank stopped by SIGSTOP says nothing; the others notice by liveness
// and exit, and rdmarun must name the stopped rank from their reports,
// not the first of them to exit (which of them it lists as failing
// because of it depends on who failed before it stopped the job).
func TestRdmarunStoppedRankBlamed(t *testing.T) {
	buildJobBinaries(t)
	for _, transport := range []string{"tcp", "shm"} {
		t.Run(transport, func(t *testing.T) {
			out, errOut, code := job(t, "-np", "4", "--grace", "1s", "--transport", transport, "--connect-timeout", "30s", progBin, "-stop-rank", "2", "-n", "8", "-liveness", "1500ms")
			assert.Equal(t, 1, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
			assert.Regexp(t, `failed: the failure began at rank 2 \(host \S+\), which was lost \([^\n]*\); ranks? [013](, [013])*( and [013])? failed because of it`, errOut)
		})
	}
}
