package main_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testenv/slurm"
)

// rdmarun inside a Slurm allocation of a private single-node cluster
// (internal/testenv/slurm; root and the Debian Slurm packages, skipped
// with the reason otherwise). It adds about 15 s to a package that is
// already long, so it runs with RDMAGO_LAUNCHER_TESTS=1 only.
func TestSlurmAllocation(t *testing.T) {
	if os.Getenv("RDMAGO_LAUNCHER_TESTS") != "1" {
		t.Skip("starts Slurm daemons (about 15 s): set RDMAGO_LAUNCHER_TESTS=1")
	}
	c := slurm.Start(t)
	salloc := func(t *testing.T, n string, args ...string) result {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "salloc", append([]string{"-n", n, rdmarunBin}, args...)...)
		cmd.Env = append(testEnv(), c.Env()...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
		cmd.WaitDelay = 5 * time.Second
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		require.NoError(t, ctx.Err(), "salloc rdmarun %v did not finish within 90s; stderr:\n%s\n%s", args, errb.String(), c.Log())
		r := result{stdout: out.String(), stderr: errb.String()}
		if ee, ok := err.(*exec.ExitError); ok {
			r.code = ee.ExitCode()
		} else {
			require.NoError(t, err)
		}
		t.Logf("salloc -n %s rdmarun %s\n--- exit %d, stdout:\n%s--- stderr:\n%s", n, strings.Join(args, " "), r.code, r.stdout, r.stderr)
		return r
	}

	t.Run("srun", func(t *testing.T) {
		r := salloc(t, "4", "-np", "4", testprogBin, "-env", "SLURM_STEP_ID,SLURM_JOB_ID", "-check-cmdline")
		require.Equal(t, 0, r.code)
		assert.Contains(t, r.stderr, "rdmarun: inside Slurm allocation ")
		assert.Contains(t, r.stderr, "starting 4 ranks with srun on "+c.Node+":4")
		hs := hellos(t, r.stdout)
		require.Len(t, hs, 4)
		steps := map[string]bool{}
		for rank, h := range hs {
			assert.Equal(t, 4, h.size)
			assert.Equal(t, rank, h.local, "one node: local rank = rank")
			// Each rank is its own job step of the allocation.
			assert.Regexp(t, `SLURM_STEP_ID=\d+ SLURM_JOB_ID=\d+`, h.extra)
			assert.NotContains(t, h.extra, "<unset>")
			steps[strings.Fields(h.extra)[0]] = true
			assert.Contains(t, h.extra, " token_in_cmdline=0 ", "the token is on no command line")
		}
		assert.Len(t, steps, 4)
	})
	t.Run("too many ranks", func(t *testing.T) {
		r := salloc(t, "2", "-np", "3", testprogBin)
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.stderr, "Slurm allocation")
		assert.Empty(t, hellos(t, r.stdout))
	})
	t.Run("no-srun", func(t *testing.T) {
		r := salloc(t, "1", "--no-srun", "-np", "2", testprogBin, "-env", "SLURM_STEP_ID")
		require.Equal(t, 0, r.code)
		assert.NotContains(t, r.stderr, "with srun")
		hs := hellos(t, r.stdout)
		require.Len(t, hs, 2)
		for _, h := range hs {
			assert.Contains(t, h.extra, "SLURM_STEP_ID=<unset>")
		}
	})
}
