package launchers

// Tests with the real launchers from Debian's packages. Each launcher run
// has a deadline and its whole process group is killed when it passes;
// each test is skipped, saying why, only where its launcher is not
// installed; all of them are skipped under -short (they build and run
// jobs). The Slurm test starts its own daemons (about 2 s here);
// RDMAGO_LAUNCHER_TESTS=0 skips it. A failure says what ran, how it ended
// and after how long, the processes still running at a deadline, and the
// launcher's stdout and stderr (testbin.Result).

import (
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/rdmago/rdmago/internal/testenv/slurm"
)

func TestMain(m *testing.M) { testbin.Main(m) }

// prog builds testprog (launchers.Detect and Connect by hand) once per
// test binary.
func prog(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "github.com/rdmago/rdmago/comm/internal/launchers/testprog")[0]
}

// fromEnvProg builds comm/internal/testprog once per test binary: the rank
// program that joins with comm.FromEnv alone (no launchers.Detect of its
// own), runs an allreduce, a broadcast, a split and a ring, checks every
// result and prints "ok rank=R size=N local=L/S transports=... sum=...".
func fromEnvProg(t *testing.T) string {
	t.Helper()
	return testbin.Build(t, "github.com/rdmago/rdmago/comm/internal/testprog")[0]
}

var fromEnvLine = regexp.MustCompile(`(?m)^ok rank=(\d+) size=(\d+) local=(-?\d+)/(\d+) transports=(\S+) sum=(\S+)$`)

// checkFromEnv checks that each of n ranks joined with comm.FromEnv and
// verified its collectives, and returns the lines by rank.
func checkFromEnv(t *testing.T, r testbin.Result, n int) map[string][]string {
	t.Helper()
	got := checkLines(t, r, n, fromEnvLine)
	for _, m := range got {
		// Element 0 of the testprog's allreduce: sum over ranks of 7r.
		assert.Equal(t, fmt.Sprint(7*n*(n-1)/2), m[6])
	}
	assert.NotContains(t, r.Stderr, "testprog:")
	return got
}

// checkLines checks that the job succeeded and that each of its n ranks
// printed one line matching re, whose first two groups are the rank and
// the job size, and returns the lines' submatches by rank.
func checkLines(t *testing.T, r testbin.Result, n int, re *regexp.Regexp) map[string][]string {
	t.Helper()
	require.Equal(t, 0, r.Code, r)
	got := map[string][]string{}
	for _, m := range re.FindAllStringSubmatch(r.Stdout, -1) {
		assert.NotContains(t, got, m[1], "rank %s printed twice\n%s", m[1], r)
		got[m[1]] = m
		assert.Equal(t, fmt.Sprint(n), m[2])
	}
	for i := range n {
		assert.Contains(t, got, fmt.Sprint(i), "rank %d's line missing\n%s", i, r)
	}
	assert.Len(t, got, n)
	return got
}

// run runs a launcher command, with the launcher-free environment plus
// env, in a process group of its own that is killed at the deadline d
// (the test fails saying what ran and what it wrote) and when the command
// exits (leftover ranks would be a bug of the launcher or ours; they are
// logged).
func run(t *testing.T, d time.Duration, env []string, name string, args ...string) testbin.Result {
	t.Helper()
	return testbin.Run(t, d, append(cleanEnv(), env...), name, args...)
}

// runRanks starts n rank processes at once, as a launcher would, the
// environment of rank r being envOf(r); it waits for all of them and
// joins their outputs (in rank order) and exit codes (or'ed). A rank past
// the deadline d fails the test.
func runRanks(t *testing.T, n int, d time.Duration, envOf func(r int) []string, name string, args ...string) (all testbin.Result, ranks []testbin.Result) {
	t.Helper()
	ranks = make([]testbin.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { ranks[r], errs[r] = testbin.Exec(d, append(cleanEnv(), envOf(r)...), name, args...) })
	}
	wg.Wait()
	all.Args = append([]string{name}, args...)
	for r, rr := range ranks {
		require.NoError(t, errs[r], "rank %d:\n%s", r, rr)
		all.Stdout += rr.Stdout
		all.Stderr += rr.Stderr
		all.Code |= rr.Code
		all.Elapsed = max(all.Elapsed, rr.Elapsed)
	}
	all.Timeout = d
	return all, ranks
}

// cleanEnv is the test's environment without any launcher's variables
// (go test may itself run under a launcher in CI).
func cleanEnv() []string {
	return testbin.Environ("PMI_*", "PMIX_*", "OMPI_*", "SLURM_*", "RDMARUN_*", "RDMAGO_PMI*",
		"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
}

var okLine = regexp.MustCompile(`(?m)^ok rank=(\d+) size=(\d+) local=(-?\d+)/(\d+) launcher=(\S+) via="([^"]*)" token=32$`)

// checkOK checks that every one of n ranks printed its ok line (each
// has verified every other rank's values) and returns the lines by rank.
func checkOK(t *testing.T, r testbin.Result, n int, launcher string) map[string][]string {
	t.Helper()
	got := checkLines(t, r, n, okLine)
	for _, m := range got {
		assert.Equal(t, launcher, m[5])
	}
	return got
}

// checkAllreduce checks that every rank verified the allreduce.
func checkAllreduce(t *testing.T, r testbin.Result, n int) {
	t.Helper()
	for i := range n {
		assert.Contains(t, r.Stdout, fmt.Sprintf("allreduce ok rank=%d\n", i), r)
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
		assert.Equal(t, 5, r.Code, r)
		assert.NotContains(t, r.Stdout, "ok rank=")
	})
	t.Run("config mismatch", func(t *testing.T) {
		r := run(t, 60*time.Second, nil, mpiexec, "-n", "3", p, "-mismatch-rank", "1")
		assert.NotEqual(t, 0, r.Code)
		assert.Contains(t, r.Stderr, `rank 1 runs "testprog other", rank 0 runs "testprog tcp"`)
		assert.Contains(t, r.Stderr, "ranks disagree")
	})
	t.Run("abort", func(t *testing.T) {
		// PMI abort: Hydra kills the job and exits with the code.
		r := run(t, 60*time.Second, nil, mpiexec, "-n", "4", p, "-abort-rank", "1")
		assert.Equal(t, 7, r.Code, r)
		assert.NotContains(t, r.Stdout, "ok rank=")
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
		assert.NotContains(t, r.Stdout, "ok rank=")
		assert.Contains(t, r.Stderr, "Open MPI mpirun: RDMARUN_TOKEN is not set")
		assert.Contains(t, r.Stderr, "mpirun -x RDMARUN_TOKEN")
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
			all, _ := runRanks(t, n, 60*time.Second, func(r int) []string {
				env := []string{fmt.Sprint("RANK=", r), "WORLD_SIZE=4", fmt.Sprint("LOCAL_RANK=", r), "LOCAL_WORLD_SIZE=4",
					"MASTER_ADDR=" + host, "MASTER_PORT=" + port}
				if mode == "token" {
					return append(env, "RDMARUN_TOKEN="+strings.Repeat("5a", 32))
				}
				return append(env, "RDMARUN_INSECURE=1")
			}, p, "-allreduce")
			checkOK(t, all, n, Torchrun)
			checkAllreduce(t, all, n)
			if mode == "insecure" {
				assert.Equal(t, n, strings.Count(all.Stderr, "WARNING: RDMARUN_INSECURE=1"), all)
			} else {
				assert.NotContains(t, all.Stderr, "WARNING")
			}
		})
	}
}

// The same, through comm.FromEnv: the testprog has no launcher code of its
// own. A half-set environment fails on every rank, naming the variable.
func TestRealTorchrunFromEnv(t *testing.T) {
	p := fromEnvProg(t)
	t.Run("token", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(freeAddr(t))
		all, _ := runRanks(t, 4, 60*time.Second, func(r int) []string {
			return []string{fmt.Sprint("RANK=", r), "WORLD_SIZE=4", fmt.Sprint("LOCAL_RANK=", r), "LOCAL_WORLD_SIZE=4",
				"MASTER_ADDR=" + host, "MASTER_PORT=" + port, "RDMARUN_TOKEN=" + strings.Repeat("5a", 32)}
		}, p, "-n", "10007")
		got := checkFromEnv(t, all, 4)
		assert.Equal(t, []string{"1", "4"}, got["1"][3:5])
		assert.NotContains(t, all.Stderr, "WARNING")
	})
	t.Run("insecure", func(t *testing.T) {
		host, port, _ := net.SplitHostPort(freeAddr(t))
		all, _ := runRanks(t, 2, 60*time.Second, func(r int) []string {
			return []string{fmt.Sprint("RANK=", r), "WORLD_SIZE=2", "MASTER_ADDR=" + host, "MASTER_PORT=" + port,
				"RDMARUN_INSECURE=1", "RDMARUN_TRANSPORT=tcp"}
		}, p, "-n", "10007")
		got := checkFromEnv(t, all, 2)
		assert.Equal(t, "self,tcp", got["0"][5])
		// FromEnv prints the warning on stderr whatever the Logger.
		assert.Equal(t, 2, strings.Count(all.Stderr, "WARNING: RDMARUN_INSECURE=1"), all)
	})
	t.Run("RANK without WORLD_SIZE", func(t *testing.T) {
		_, rs := runRanks(t, 2, 60*time.Second, func(r int) []string {
			return []string{fmt.Sprint("RANK=", r), "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1", "RDMARUN_TOKEN=" + strings.Repeat("5a", 32)}
		}, p, "-n", "10007")
		for _, r := range rs {
			assert.Equal(t, 1, r.Code, r)
			assert.Contains(t, r.Stderr, "WORLD_SIZE is not set")
			assert.Contains(t, r.Stderr, "RANK is set")
			assert.NotContains(t, r.Stdout, "ok rank=")
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
		assert.NotEqual(t, 0, r.Code)
		assert.Contains(t, r.Stderr, `rank 2 runs "testprog other", rank 0 runs "testprog tcp"`)
	})
	t.Run("srun without mpi", func(t *testing.T) {
		r := run(t, 60*time.Second, env, "srun", "-n", "2", p)
		assert.NotEqual(t, 0, r.Code)
		assert.Equal(t, 2, strings.Count(r.Stderr, "add --mpi=pmi2"), r)
	})
	t.Run("FromEnv srun pmi2", func(t *testing.T) {
		got := checkFromEnv(t, run(t, 60*time.Second, env, "srun", "--mpi=pmi2", "-n", "4", fromEnvProg(t)), 4)
		assert.Equal(t, []string{"1", "4"}, got["1"][3:5], "local rank from SLURM_LOCALID")
		assert.Equal(t, "shm,self,shm,shm", got["1"][5])
	})
	t.Run("FromEnv srun without mpi", func(t *testing.T) {
		r := run(t, 60*time.Second, env, "srun", "-n", "2", fromEnvProg(t))
		assert.NotEqual(t, 0, r.Code)
		assert.Equal(t, 2, strings.Count(r.Stderr, "add --mpi=pmi2"), r)
		assert.NotContains(t, r.Stdout, "ok rank=")
	})
	t.Run("salloc shell", func(t *testing.T) {
		r := run(t, 60*time.Second, env, "salloc", "-n", "2", p)
		assert.NotEqual(t, 0, r.Code)
		assert.Contains(t, r.Stderr, "inside Slurm allocation")
	})
}
