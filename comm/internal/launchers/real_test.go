package launchers

// Tests with the real launchers from Debian's packages. Each launcher run
// has a deadline and its whole process group is killed when it passes;
// each test is skipped, saying why, only where its launcher is not
// installed. The Slurm test starts its own daemons (about 8 s here);
// RDMAGO_LAUNCHER_TESTS=0 skips it.

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testenv/slurm"
)

var (
	progOnce sync.Once
	progPath string
	progErr  error
	progDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if progDir != "" {
		os.RemoveAll(progDir)
	}
	os.Exit(code)
}

// prog builds testprog once per test binary.
func prog(t *testing.T) string {
	t.Helper()
	progOnce.Do(func() {
		progDir, progErr = os.MkdirTemp("", "rdmago-launchers-")
		if progErr != nil {
			return
		}
		progPath = filepath.Join(progDir, "testprog")
		out, err := exec.Command("go", "build", "-o", progPath, "./testprog").CombinedOutput()
		if err != nil {
			progErr = fmt.Errorf("go build ./testprog: %v\n%s", err, out)
		}
	})
	require.NoError(t, progErr)
	return progPath
}

var (
	fromEnvOnce sync.Once
	fromEnvPath string
	fromEnvErr  error
)

// fromEnvProg builds comm/internal/testprog once per test binary: the rank
// program that joins with comm.FromEnv alone (no launchers.Detect of its
// own), runs an allreduce, a broadcast, a split and a ring, checks every
// result and prints "ok rank=R size=N local=L/S transports=... sum=...".
func fromEnvProg(t *testing.T) string {
	t.Helper()
	prog(t) // makes progDir
	fromEnvOnce.Do(func() {
		fromEnvPath = filepath.Join(progDir, "fromenv")
		out, err := exec.Command("go", "build", "-o", fromEnvPath, "../testprog").CombinedOutput()
		if err != nil {
			fromEnvErr = fmt.Errorf("go build comm/internal/testprog: %v\n%s", err, out)
		}
	})
	require.NoError(t, fromEnvErr)
	return fromEnvPath
}

var fromEnvLine = regexp.MustCompile(`(?m)^ok rank=(\d+) size=(\d+) local=(-?\d+)/(\d+) transports=(\S+) sum=(\S+)$`)

// checkFromEnv checks that each of n ranks joined with comm.FromEnv and
// verified its collectives, and returns the lines by rank.
func checkFromEnv(t *testing.T, r result, n int) map[string][]string {
	t.Helper()
	require.Equal(t, 0, r.code, "exit status\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	got := map[string][]string{}
	for _, m := range fromEnvLine.FindAllStringSubmatch(r.stdout, -1) {
		got[m[1]] = m
		assert.Equal(t, fmt.Sprint(n), m[2])
		// Element 0 of the testprog's allreduce: sum over ranks of 7r.
		assert.Equal(t, fmt.Sprint(7*n*(n-1)/2), m[6])
	}
	for i := range n {
		assert.Contains(t, got, fmt.Sprint(i), "rank %d's line missing\nstdout:\n%s\nstderr:\n%s", i, r.stdout, r.stderr)
	}
	assert.Len(t, got, n)
	assert.NotContains(t, r.stderr, "testprog:")
	return got
}

type result struct {
	stdout, stderr string
	code           int
}

// run runs a launcher command with a deadline, in its own process group,
// which is killed when the deadline passes.
func run(t *testing.T, d time.Duration, env []string, name string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = append(cleanEnv(), env...)
	cmd.Stdin = nil
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	r := result{stdout: so.String(), stderr: se.String()}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("%s %s: still running after %s\nstdout:\n%s\nstderr:\n%s", name, strings.Join(args, " "), d, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v", name, err)
	}
	// Leftover ranks of the group would be a bug of the launcher or ours.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	return r
}

// cleanEnv is the test's environment without any launcher's variables
// (go test may itself run under a launcher in CI).
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PMI_") || strings.HasPrefix(k, "PMIX_") || strings.HasPrefix(k, "OMPI_") ||
			strings.HasPrefix(k, "SLURM_") || strings.HasPrefix(k, "RDMARUN_") || strings.HasPrefix(k, "RDMAGO_PMI") ||
			k == "RANK" || k == "WORLD_SIZE" || k == "LOCAL_RANK" || k == "LOCAL_WORLD_SIZE" || k == "MASTER_ADDR" || k == "MASTER_PORT" {
			continue
		}
		out = append(out, kv)
	}
	return out
}

var okLine = regexp.MustCompile(`(?m)^ok rank=(\d+) size=(\d+) local=(-?\d+)/(\d+) launcher=(\S+) via="([^"]*)" token=32$`)

// checkOK checks that every one of n ranks printed its ok line (each
// has verified every other rank's values) and returns the lines by rank.
func checkOK(t *testing.T, r result, n int, launcher string) map[string][]string {
	t.Helper()
	require.Equal(t, 0, r.code, "exit status\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	got := map[string][]string{}
	for _, m := range okLine.FindAllStringSubmatch(r.stdout, -1) {
		got[m[1]] = m
		assert.Equal(t, fmt.Sprint(n), m[2])
		assert.Equal(t, launcher, m[5])
	}
	for i := range n {
		assert.Contains(t, got, fmt.Sprint(i), "rank %d's line missing\nstdout:\n%s\nstderr:\n%s", i, r.stdout, r.stderr)
	}
	assert.Len(t, got, n)
	return got
}

// checkAllreduce checks that every rank verified the allreduce.
func checkAllreduce(t *testing.T, r result, n int) {
	t.Helper()
	for i := range n {
		assert.Contains(t, r.stdout, fmt.Sprintf("allreduce ok rank=%d\n", i), "stderr:\n%s", r.stderr)
	}
}

func need(t *testing.T, bin, pkg string) string {
	t.Helper()
	p, err := exec.LookPath(bin)
	if err != nil {
		t.Skipf("%s not installed (apt-get install %s)", bin, pkg)
	}
	return p
}

func TestRealHydra(t *testing.T) {
	mpiexec := need(t, "mpiexec.mpich", "mpich")
	p := prog(t)
	t.Run("pmi1", func(t *testing.T) {
		got := checkOK(t, run(t, 60*time.Second, nil, mpiexec, "-n", "4", p), 4, PMI)
		assert.Equal(t, "MPICH Hydra (mpiexec)", got["0"][6])
		assert.Equal(t, []string{"2", "4"}, got["2"][3:5], "local rank from MPI_LOCALRANKID")
	})
	t.Run("pmi2", func(t *testing.T) {
		checkOK(t, run(t, 60*time.Second, []string{"RDMAGO_PMI_VERSION=2"}, mpiexec, "-n", "4", p), 4, PMI)
	})
	t.Run("pmi-port", func(t *testing.T) {
		checkOK(t, run(t, 60*time.Second, nil, mpiexec, "-pmi-port", "-n", "3", p), 3, PMI)
	})
	t.Run("allreduce", func(t *testing.T) {
		// comm.Init over the PMI store (p2p fences between publishing and
		// reading the peers' keys).
		r := run(t, 60*time.Second, nil, mpiexec, "-n", "4", p, "-allreduce")
		checkOK(t, r, 4, PMI)
		checkAllreduce(t, r, 4)
	})
	t.Run("FromEnv", func(t *testing.T) {
		got := checkFromEnv(t, run(t, 60*time.Second, nil, mpiexec, "-n", "4", fromEnvProg(t)), 4)
		assert.Equal(t, []string{"2", "4"}, got["2"][3:5], "local rank from MPI_LOCALRANKID")
		assert.Equal(t, "shm,shm,self,shm", got["2"][5])
	})
	t.Run("FromEnv abort", func(t *testing.T) {
		// comm.Abort under PMI: PMI abort, Hydra ends the job with the code.
		r := run(t, 60*time.Second, nil, mpiexec, "-n", "4", fromEnvProg(t), "-n", "1000", "-abort-rank", "1", "-abort-code", "5")
		assert.Equal(t, 5, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.NotContains(t, r.stdout, "ok rank=")
	})
	t.Run("config mismatch", func(t *testing.T) {
		r := run(t, 60*time.Second, nil, mpiexec, "-n", "3", p, "-mismatch-rank", "1")
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stderr, `rank 1 runs "testprog other", rank 0 runs "testprog tcp"`)
		assert.Contains(t, r.stderr, "ranks disagree")
	})
	t.Run("abort", func(t *testing.T) {
		// PMI abort: Hydra kills the job and exits with the code.
		r := run(t, 60*time.Second, nil, mpiexec, "-n", "4", p, "-abort-rank", "1")
		assert.Equal(t, 7, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
		assert.NotContains(t, r.stdout, "ok rank=")
	})
}

func TestRealOpenMPI(t *testing.T) {
	mpirun := need(t, "mpirun.openmpi", "openmpi-bin")
	p := prog(t)
	base := []string{"OMPI_MCA_oob_tcp_if_include=lo", "OMPI_MCA_btl_tcp_if_include=lo"}
	if os.Geteuid() == 0 {
		base = append(base, "OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
	}
	tok := make([]byte, 32)
	copy(tok, "launchers real test token.......")
	t.Run("allgather", func(t *testing.T) {
		env := append(base, "RDMARUN_ADDR="+freeAddr(t), "RDMARUN_TOKEN="+hex.EncodeToString(tok))
		r := run(t, 90*time.Second, env, mpirun, "--oversubscribe", "-np", "4",
			"-x", "RDMARUN_ADDR", "-x", "RDMARUN_TOKEN", p, "-allreduce")
		got := checkOK(t, r, 4, OpenMPI)
		assert.Equal(t, []string{"3", "4"}, got["3"][3:5])
		checkAllreduce(t, r, 4)
	})
	t.Run("FromEnv", func(t *testing.T) {
		env := append(base, "RDMARUN_ADDR="+freeAddr(t), "RDMARUN_TOKEN="+hex.EncodeToString(tok))
		got := checkFromEnv(t, run(t, 90*time.Second, env, mpirun, "--oversubscribe", "-np", "4",
			"-x", "RDMARUN_ADDR", "-x", "RDMARUN_TOKEN", fromEnvProg(t)), 4)
		assert.Equal(t, []string{"3", "4"}, got["3"][3:5], "local rank from OMPI_COMM_WORLD_LOCAL_RANK")
		assert.Equal(t, "shm,shm,shm,self", got["3"][5])
	})
	t.Run("no token", func(t *testing.T) {
		env := append(base, "RDMARUN_ADDR="+freeAddr(t))
		r := run(t, 90*time.Second, env, mpirun, "--oversubscribe", "-np", "2", "-x", "RDMARUN_ADDR", p)
		assert.NotContains(t, r.stdout, "ok rank=")
		assert.Contains(t, r.stderr, "Open MPI mpirun: RDMARUN_TOKEN is not set")
		assert.Contains(t, r.stderr, "mpirun -x RDMARUN_TOKEN")
	})
}

// The torchrun convention, set by hand as a Kubernetes operator would:
// four processes, rank 0 serving at MASTER_ADDR:MASTER_PORT.
func TestRealTorchrunEnv(t *testing.T) {
	p := prog(t)
	for _, mode := range []string{"token", "insecure"} {
		t.Run(mode, func(t *testing.T) {
			host, port, _ := net.SplitHostPort(freeAddr(t))
			const n = 4
			rs := make([]result, n)
			var wg sync.WaitGroup
			for r := range n {
				env := []string{fmt.Sprint("RANK=", r), "WORLD_SIZE=4", fmt.Sprint("LOCAL_RANK=", r), "LOCAL_WORLD_SIZE=4",
					"MASTER_ADDR=" + host, "MASTER_PORT=" + port}
				if mode == "token" {
					env = append(env, "RDMARUN_TOKEN="+strings.Repeat("5a", 32))
				} else {
					env = append(env, "RDMARUN_INSECURE=1")
				}
				wg.Go(func() { rs[r] = run(t, 60*time.Second, env, p, "-allreduce") })
			}
			wg.Wait()
			var all result
			for _, r := range rs {
				all.stdout += r.stdout
				all.stderr += r.stderr
				all.code |= r.code
			}
			checkOK(t, all, n, Torchrun)
			checkAllreduce(t, all, n)
			if mode == "insecure" {
				assert.Equal(t, n, strings.Count(all.stderr, "WARNING: RDMARUN_INSECURE=1"), all.stderr)
			} else {
				assert.NotContains(t, all.stderr, "WARNING")
			}
		})
	}
}

// The same, through comm.FromEnv: the testprog has no launcher code of its
// own. A half-set environment fails on every rank, naming the variable.
func TestRealTorchrunFromEnv(t *testing.T) {
	p := fromEnvProg(t)
	ranks := func(t *testing.T, n int, envOf func(r int) []string) []result {
		rs := make([]result, n)
		var wg sync.WaitGroup
		for r := range n {
			wg.Go(func() { rs[r] = run(t, 60*time.Second, envOf(r), p, "-n", "10007") })
		}
		wg.Wait()
		return rs
	}
	join := func(rs []result) result {
		var all result
		for _, r := range rs {
			all.stdout += r.stdout
			all.stderr += r.stderr
			all.code |= r.code
		}
		return all
	}
	t.Run("token", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(freeAddr(t))
		all := join(ranks(t, 4, func(r int) []string {
			return []string{fmt.Sprint("RANK=", r), "WORLD_SIZE=4", fmt.Sprint("LOCAL_RANK=", r), "LOCAL_WORLD_SIZE=4",
				"MASTER_ADDR=" + host, "MASTER_PORT=" + port, "RDMARUN_TOKEN=" + strings.Repeat("5a", 32)}
		}))
		got := checkFromEnv(t, all, 4)
		assert.Equal(t, []string{"1", "4"}, got["1"][3:5])
		assert.NotContains(t, all.stderr, "WARNING")
	})
	t.Run("insecure", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(freeAddr(t))
		all := join(ranks(t, 2, func(r int) []string {
			return []string{fmt.Sprint("RANK=", r), "WORLD_SIZE=2", "MASTER_ADDR=" + host, "MASTER_PORT=" + port,
				"RDMARUN_INSECURE=1", "RDMARUN_TRANSPORT=tcp"}
		}))
		got := checkFromEnv(t, all, 2)
		assert.Equal(t, "self,tcp", got["0"][5])
		// FromEnv prints the warning on stderr whatever the Logger.
		assert.Equal(t, 2, strings.Count(all.stderr, "WARNING: RDMARUN_INSECURE=1"), all.stderr)
	})
	t.Run("RANK without WORLD_SIZE", func(t *testing.T) {
		rs := ranks(t, 2, func(r int) []string {
			return []string{fmt.Sprint("RANK=", r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "RDMARUN_TOKEN=" + strings.Repeat("5a", 32)}
		})
		for _, r := range rs {
			assert.Equal(t, 1, r.code, r.stderr)
			assert.Contains(t, r.stderr, "WORLD_SIZE is not set")
			assert.Contains(t, r.stderr, "RANK is set")
			assert.NotContains(t, r.stdout, "ok rank=")
		}
	})
}

// A single-node Slurm cluster of our own: srun --mpi=pmi2 over PMI-1 and
// PMI-2 (launchers' testprog, then comm.FromEnv's), and plain srun's clear
// error.
func TestRealSlurm(t *testing.T) {
	if os.Getenv("RDMAGO_LAUNCHER_TESTS") == "0" {
		t.Skip("RDMAGO_LAUNCHER_TESTS=0")
	}
	p := prog(t)
	c := slurm.Start(t)
	env := c.Env()
	t.Run("srun pmi2", func(t *testing.T) {
		got := checkOK(t, run(t, 60*time.Second, env, "srun", "--mpi=pmi2", "-n", "4", p), 4, PMI)
		assert.Equal(t, "Slurm srun --mpi=pmi2", got["0"][6])
		assert.Equal(t, []string{"1", "4"}, got["1"][3:5], "local rank from SLURM_LOCALID")
	})
	t.Run("srun pmi2 wire v2", func(t *testing.T) {
		checkOK(t, run(t, 60*time.Second, append(env, "RDMAGO_PMI_VERSION=2"), "srun", "--mpi=pmi2", "-n", "4", p), 4, PMI)
	})
	t.Run("config mismatch ends the step", func(t *testing.T) {
		r := run(t, 60*time.Second, env, "srun", "--mpi=pmi2", "-n", "3", p, "-mismatch-rank", "2")
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stderr, `rank 2 runs "testprog other", rank 0 runs "testprog tcp"`)
	})
	t.Run("srun without mpi", func(t *testing.T) {
		r := run(t, 60*time.Second, env, "srun", "-n", "2", p)
		assert.NotEqual(t, 0, r.code)
		assert.Equal(t, 2, strings.Count(r.stderr, "add --mpi=pmi2"), r.stderr)
	})
	t.Run("FromEnv srun pmi2", func(t *testing.T) {
		got := checkFromEnv(t, run(t, 60*time.Second, env, "srun", "--mpi=pmi2", "-n", "4", fromEnvProg(t)), 4)
		assert.Equal(t, []string{"1", "4"}, got["1"][3:5], "local rank from SLURM_LOCALID")
		assert.Equal(t, "shm,self,shm,shm", got["1"][5])
	})
	t.Run("FromEnv srun without mpi", func(t *testing.T) {
		r := run(t, 60*time.Second, env, "srun", "-n", "2", fromEnvProg(t))
		assert.NotEqual(t, 0, r.code)
		assert.Equal(t, 2, strings.Count(r.stderr, "add --mpi=pmi2"), r.stderr)
		assert.NotContains(t, r.stdout, "ok rank=")
	})
	t.Run("salloc shell", func(t *testing.T) {
		r := run(t, 60*time.Second, env, "salloc", "-n", "2", p)
		assert.NotEqual(t, 0, r.code)
		assert.Contains(t, r.stderr, "inside Slurm allocation")
	})
}
