package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The real run is on ibv inside the Soft-RoCE VM (.ci/rxe-tests.sh). Here
// the same program runs under the real rdmarun over tcp, so that its checks
// and its verdict lines are tested on every machine: a passing job, a job
// whose transport check fails, and a binary without the ibv provider.

func build(t *testing.T) (rdmarun, prog string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs rdmarun jobs; skipped with -short")
	}
	dir := t.TempDir()
	rdmarun, prog = filepath.Join(dir, "rdmarun"), filepath.Join(dir, "ibvstack")
	for _, b := range []struct{ out, pkg string }{
		{rdmarun, "github.com/rdmago/rdmago/cmd/rdmarun"},
		{prog, "github.com/rdmago/rdmago/internal/ibvstack"}, // no rdma tag: the ibv stub
	} {
		out, err := exec.Command("go", "build", "-o", b.out, b.pkg).CombinedOutput()
		require.NoError(t, err, "go build %s\n%s", b.pkg, out)
	}
	return rdmarun, prog
}

// job runs rdmarun with args and returns stdout, stderr and the exit code.
func job(t *testing.T, rdmarun string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, rdmarun, append([]string{"--timeout", "100s", "--stdin", "none"}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "rdmarun %v did not end\nstdout:\n%s\nstderr:\n%s", args, o.String(), e.String())
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return o.String(), e.String(), 0
}

func TestJob(t *testing.T) {
	rdmarun, prog := build(t)

	t.Run("pass", func(t *testing.T) {
		out, errOut, code := job(t, rdmarun, "-np", "3", "--transport", "tcp", prog, "-want", "tcp", "-barriers", "3")
		require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
		for r := range 3 {
			// Every check of every collective passed, data moved by RDMA.
			assert.Regexp(t, regexp.MustCompile(fmt.Sprintf(
				`(?m)^ibvstack: rank %d/3 pass device=auto transport=[a-z,]+ allreduce=8 bcast=2 barrier=3 rdma_msgs=[1-9][0-9]* `, r)), out)
		}
		assert.Regexp(t, `(?m)^ibvstack: OK ranks=3 transport=tcp$`, out)
	})

	t.Run("transport check fails", func(t *testing.T) {
		out, errOut, code := job(t, rdmarun, "-np", "2", "--transport", "tcp", prog, "-want", "shm", "-barriers", "1")
		assert.NotEqual(t, 0, code)
		assert.Regexp(t, `(?m)^ibvstack: rank 0/2 FAIL `, out)
		assert.NotContains(t, out, "ibvstack: OK")
		assert.Contains(t, errOut, `rank 1 is reached over "tcp", want "shm"`)
	})

	t.Run("no ibv provider", func(t *testing.T) {
		out, errOut, code := job(t, rdmarun, "-np", "2", "--transport", "ibv", prog)
		assert.NotEqual(t, 0, code)
		assert.NotContains(t, out, "ibvstack: OK")
		assert.Contains(t, errOut, "build it with -tags rdma")
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
