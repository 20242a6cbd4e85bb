package comm_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/internal/testbin"
)

// TestRdmarunStuckRank stops (SIGSTOP) rank 2 of a real four-process job
// under rdmarun while the ranks loop over allreduces. The others wait for
// it; `rdmarun status`, from outside the job, shows each rank's operation
// and that rank 2 does not answer, and rank 0 prints once, by itself, who
// has not arrived. Then rank 2 goes on (SIGCONT) and the job ends well.
func TestRdmarunStuckRank(t *testing.T) {
	buildJobBinaries(t)
	stuckJob(t, func(prog []string) []string {
		return append([]string{rdmarunBin, "-np", "4", "--transport", "shm", "--connect-timeout", "30s"}, prog...)
	})
}

// TestMPICHStuckRank is TestRdmarunStuckRank under MPICH's mpiexec: the
// status file and the report come from rank 0, whatever the launcher.
func TestMPICHStuckRank(t *testing.T) {
	mpiexec, err := exec.LookPath("mpiexec.mpich")
	if err != nil {
		t.Skip("mpiexec.mpich is not installed (Debian package mpich)")
	}
	buildJobBinaries(t)
	stuckJob(t, func(prog []string) []string {
		return append([]string{mpiexec, "-n", "4"}, prog...)
	})
}

// stuckJob runs the test program under the launcher command that launch
// builds around it, stops rank 2 and checks the report and the query.
func stuckJob(t *testing.T, launch func(prog []string) []string) {
	dir := t.TempDir()
	run := filepath.Join(dir, "run") // XDG_RUNTIME_DIR: the status files of this test alone
	require.NoError(t, os.Mkdir(run, 0o700))
	stopFile := filepath.Join(dir, "stop")
	env := append(testbin.Environ("RDMARUN_*", "RDMAGO_*", "XDG_RUNTIME_DIR"),
		"XDG_RUNTIME_DIR="+run, "RDMAGO_STUCK_AFTER=500ms")

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var stdout, stderr testbin.Buffer
	argv := launch([]string{progBin, "-n", "8", "-loop-until", stopFile, "-piddir", dir, "-liveness", "60s"})
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env, cmd.Stdout, cmd.Stderr = env, &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped, ended := 0, false
	defer func() {
		if stopped > 0 {
			syscall.Kill(stopped, syscall.SIGCONT)
		}
		if !ended {
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the group this test made
			select {
			case <-exited:
			case <-time.After(30 * time.Second):
				t.Errorf("the launcher did not end after SIGKILL")
			}
		}
	}()
	poll := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("waiting for %s: %v\nstdout:\n%s\nstderr:\n%s", what, ctx.Err(), stdout.String(), stderr.String())
			case err := <-exited:
				ended = true
				t.Fatalf("the launcher exited (%v) while waiting for %s\nstdout:\n%s\nstderr:\n%s", err, what, stdout.String(), stderr.String())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	pid := func(r int) int {
		b, err := os.ReadFile(filepath.Join(dir, "rank."+strconv.Itoa(r)+".pid"))
		if err != nil {
			return 0
		}
		p, _ := strconv.Atoi(string(b))
		return p
	}
	poll("every rank looping", func() bool { return pid(0) > 0 && pid(1) > 0 && pid(2) > 0 && pid(3) > 0 })
	stopped = pid(2)
	require.NoError(t, syscall.Kill(stopped, syscall.SIGSTOP))

	// The automatic report, from rank 0 alone.
	report := regexp.MustCompile(`stuck job: ranks 0, 1 and 3 wait in allreduce #(\d+) on world since [0-9.]+ s \(for [^)]*\); rank 2 does not answer`)
	poll("the stuck-job report", func() bool { return report.MatchString(stderr.String()) })

	// The query, as a user runs it from another terminal.
	var status testbin.Result
	line := regexp.MustCompile(`(?m)^rank (\d) \(host \S+, pid (\d+)\): (.*)$`)
	poll("rdmarun status", func() bool {
		var err error
		status, err = testbin.Exec(20*time.Second, env, rdmarunBin, "status")
		require.NoError(t, err)
		return status.Code == 0 && len(line.FindAllStringSubmatch(status.Stdout, -1)) == 3
	})
	seq := report.FindStringSubmatch(stderr.String())[1]
	for _, m := range line.FindAllStringSubmatch(status.Stdout, -1) {
		r, _ := strconv.Atoi(m[1])
		assert.NotEqual(t, 2, r)
		assert.Equal(t, strconv.Itoa(pid(r)), m[2])
		assert.Regexp(t, `^allreduce #`+seq+` on world \(\S+\) since [0-9.]+ s, waiting for rank \d`, m[3], "rank %d", r)
	}
	assert.Regexp(t, `(?m)^rank 2: no answer: no answer within \S+ from \S+$`, status.Stdout)

	// Rank 2 goes on; the job ends at the same call everywhere.
	require.NoError(t, os.WriteFile(stopFile, nil, 0o644))
	require.NoError(t, syscall.Kill(stopped, syscall.SIGCONT))
	stopped = 0
	select {
	case err := <-exited:
		ended = true
		require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	case <-ctx.Done():
		t.Fatalf("job did not end after SIGCONT\nstdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())
	}
	assert.Equal(t, 4, strings.Count(stdout.String(), "looped rank="))
	assert.Equal(t, 1, strings.Count(stderr.String(), "stuck job"), "reported once, by rank 0: %s", stderr.String())
	t.Logf("rdmarun status printed:\n%s\nthe job's stderr:\n%s", status.Stdout, stderr.String())
	files, err := bootstrap.ReadStatusFiles(filepath.Join(run, "rdmago"))
	require.NoError(t, err)
	assert.Empty(t, files, "rank 0 removes its status file at Close")
}
