package main

import (
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testbin"
)

// The real run is on ibv inside the Soft-RoCE VM (.ci/rxe-tests.sh). Here
// the same program runs under the real rdmarun over tcp, so that its checks
// and its verdict lines are tested on every machine: a passing job, a job
// whose transport check fails, and a binary without the ibv provider.

func TestMain(m *testing.M) { testbin.Main(m) }

// build builds rdmarun and this program once per test binary. testbin
// builds without build tags whatever this test binary was built with, so
// the program has the ibv stub (no rdma tag): "no ibv provider" below
// relies on it, and the tcp jobs need no RDMA device.
func build(t *testing.T) (rdmarun, prog string) {
	t.Helper()
	bins := testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/internal/ibvstack")
	return bins[0], bins[1]
}

// job runs rdmarun with args (its own --timeout well inside the deadline
// here), without an enclosing job's or the developer's RDMARUN_ and
// RDMAGO_ variables, and returns what it did (any exit status).
func job(t *testing.T, rdmarun string, args ...string) testbin.Result {
	t.Helper()
	return testbin.Run(t, 2*time.Minute, testbin.Environ("RDMARUN_*", "RDMAGO_*"), rdmarun,
		append([]string{"--timeout", "100s", "--stdin", "none"}, args...)...)
}

func TestJob(t *testing.T) {
	rdmarun, prog := build(t)

	t.Run("pass", func(t *testing.T) {
		r := job(t, rdmarun, "-np", "3", "--transport", "tcp", prog, "-want", "tcp", "-barriers", "3")
		require.Equal(t, 0, r.Code, r)
		for rank := range 3 {
			// Every check of every collective passed, data moved by RDMA.
			assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(
				`(?m)^ibvstack: rank %d/3 pass device=auto transport=[a-z,]+ allreduce=8 bcast=2 barrier=3 rdma_msgs=[1-9][0-9]* `, rank)), r.Stdout, r)
		}
		assert.Regexp(t, `(?m)^ibvstack: OK ranks=3 transport=tcp$`, r.Stdout, r)
	})

	t.Run("transport check fails", func(t *testing.T) {
		r := job(t, rdmarun, "-np", "2", "--transport", "tcp", prog, "-want", "shm", "-barriers", "1")
		assert.NotEqual(t, 0, r.Code, r)
		assert.Regexp(t, `(?m)^ibvstack: rank 0/2 FAIL `, r.Stdout, r)
		assert.NotContains(t, r.Stdout, "ibvstack: OK")
		assert.Contains(t, r.Stderr, `rank 1 is reached over "tcp", want "shm"`)
	})

	t.Run("no ibv provider", func(t *testing.T) {
		r := job(t, rdmarun, "-np", "2", "--transport", "ibv", prog)
		assert.NotEqual(t, 0, r.Code, r)
		assert.NotContains(t, r.Stdout, "ibvstack: OK")
		assert.Contains(t, r.Stderr, "build it with -tags rdma")
	})
}

func TestPickDevice(t *testing.T) {
	got, err := pickDevice("")
	require.NoError(t, err)
	assert.Equal(t, "", got)
	got, err = pickDevice("rxe0:1:1")
	require.NoError(t, err)
	assert.Equal(t, "rxe0:1:1", got)

	t.Setenv("RDMARUN_LOCAL_RANK", "3")
	got, err = pickDevice("rxe1,rxe2")
	require.NoError(t, err)
	assert.Equal(t, "rxe2", got)
	t.Setenv("RDMARUN_LOCAL_RANK", "4")
	got, err = pickDevice("rxe1,rxe2,mlx5_0")
	require.NoError(t, err)
	assert.Equal(t, "rxe2", got)

	t.Setenv("RDMARUN_LOCAL_RANK", "x")
	_, err = pickDevice("rxe1,rxe2")
	assert.ErrorContains(t, err, `RDMARUN_LOCAL_RANK="x"`)
}
