package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { Main(m) }

func TestBuild(t *testing.T) {
	// Two commands named hello: two go commands, two executables.
	bins := Build(t, "./testdata/hello", "./testdata/other/hello", "./testdata/hello")
	require.Len(t, bins, 3)
	assert.NotEqual(t, bins[0], bins[1])
	assert.Equal(t, bins[0], bins[2])
	out, err := exec.Command(bins[0], "a", "b").Output()
	require.NoError(t, err)
	assert.Equal(t, "hello [a b]\n", string(out))
	out, err = exec.Command(bins[1]).Output()
	require.NoError(t, err)
	assert.Equal(t, "other hello\n", string(out))

	// Built once per test binary.
	st, err := os.Stat(bins[0])
	require.NoError(t, err)
	again := Build(t, "./testdata/hello")
	assert.Equal(t, bins[0], again[0])
	st2, err := os.Stat(again[0])
	require.NoError(t, err)
	assert.Equal(t, st.ModTime(), st2.ModTime())
}

// fatalTB records a Fatalf and ends the goroutine, as testing's does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestBuildFails(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go build")
	}
	for _, tc := range []struct{ pkg, want string }{
		{"./testdata/lib", "main package"}, // go says "no main packages", or Build "not a main package"
		{"./testdata/nosuch", "go build [./testdata/nosuch]"},
	} {
		f := &fatalTB{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Build(f, tc.pkg)
			f.msg = "Build returned"
		}()
		<-done
		assert.Contains(t, f.msg, tc.want)
	}
}

func TestExecOutputAndStatus(t *testing.T) {
	r, err := Exec(time.Minute, nil, "sh", "-c", "echo out; echo err >&2; exit 3")
	require.NoError(t, err)
	assert.Equal(t, 3, r.Code)
	assert.Equal(t, "out\n", r.Stdout)
	assert.Equal(t, "err\n", r.Stderr)
	assert.False(t, r.TimedOut)
	assert.Empty(t, r.Leftover)
	s := r.String()
	assert.Contains(t, s, "sh -c echo out; echo err >&2; exit 3\nexit status 3 after ")
	assert.Contains(t, s, "--- stdout:\nout\n--- stderr:\nerr\n")

	_, err = Exec(time.Minute, nil, "/nonexistent/testbin-prog")
	require.Error(t, err)
	assert.NotErrorIs(t, err, ErrTimeout)
}

func TestEnviron(t *testing.T) {
	t.Setenv("TESTBIN_A_X", "1")
	t.Setenv("TESTBIN_AB", "2")
	t.Setenv("TESTBIN_ABC", "3")
	t.Setenv("TESTBIN_KEEP", "4")
	env := strings.Join(Environ("TESTBIN_A_*", "TESTBIN_AB"), "\n") + "\n"
	assert.NotContains(t, env, "TESTBIN_A_X=")
	assert.NotContains(t, env, "TESTBIN_AB=")
	assert.Contains(t, env, "TESTBIN_ABC=3\n")
	assert.Contains(t, env, "TESTBIN_KEEP=4\n")
	assert.Contains(t, Environ(), "TESTBIN_AB=2")

	// Exec passes it on as given.
	r, err := Exec(time.Minute, []string{"ONLY=this"}, "/usr/bin/env")
	require.NoError(t, err)
	assert.Equal(t, "ONLY=this\n", r.Stdout)
}

// A command past its deadline is killed with its whole group; what it
// wrote until then and what was still running are reported.
func TestExecTimeout(t *testing.T) {
	needProcGroups(t)
	r, err := Exec(300*time.Millisecond, nil, "sh", "-c", "echo started; echo working >&2; sleep 60 & sleep 61; echo never")
	require.ErrorIs(t, err, ErrTimeout)
	assert.True(t, r.TimedOut)
	assert.Equal(t, -1, r.Code)
	assert.Equal(t, "started\n", r.Stdout)
	assert.Equal(t, "working\n", r.Stderr)
	stuck := strings.Join(r.Stuck, "\n")
	assert.Contains(t, stuck, "sleep 60")
	assert.Contains(t, stuck, "sleep 61")
	assert.Contains(t, r.String(), "still running after 300ms (the deadline)")
	assert.Contains(t, r.String(), "running at the deadline: ")
	requireGone(t, r.Stuck)
}

// A child that outlives the command, its stdout still open, neither holds
// Exec up nor survives it.
func TestExecLeftover(t *testing.T) {
	needProcGroups(t)
	r, err := Exec(time.Minute, nil, "sh", "-c", "sleep 62 & echo bye")
	require.NoError(t, err)
	assert.False(t, r.TimedOut)
	assert.Equal(t, 0, r.Code)
	assert.Equal(t, "bye\n", r.Stdout)
	require.Len(t, r.Leftover, 1, r)
	assert.Contains(t, r.Leftover[0], "sleep 62")
	assert.Contains(t, r.String(), "left behind after exit (killed): ")
	requireGone(t, r.Leftover)
}

// requireGone checks that the processes ("pid state cmdline") are dead.
func requireGone(t *testing.T, procs []string) {
	t.Helper()
	require.NotEmpty(t, procs)
	for _, p := range procs {
		var pid int
		_, err := fmt.Sscan(p, &pid)
		require.NoError(t, err, p)
		// Killed: gone, or a zombie until init reaps it (its parent died
		// too).
		assert.Eventually(t, func() bool {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
			return err != nil || strings.Contains(string(b), ") Z ") ||
				!strings.Contains(string(b), "sleep") // the pid reused by another program
		}, 10*time.Second, 10*time.Millisecond, "process %s still alive", p)
	}
}

func needProcGroups(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("process groups are listed and killed on Linux only")
	}
}

// A rank StartRanks re-executes exits from inside its test, as ranks
// killed or done do, without reaching the end of Main: it must have used
// its parent's run directory, not left one of its own in $TMPDIR.
func TestRankSharesRunDir(t *testing.T) {
	if os.Getenv("TESTBIN_RANK") != "" {
		fmt.Println("RESULT " + os.Getenv("XDG_RUNTIME_DIR"))
		os.Exit(0)
	}
	run := os.Getenv("XDG_RUNTIME_DIR")
	require.NotEmpty(t, run, "Main gave the tests no run directory")
	tmp := t.TempDir()
	ranks := StartRanks(t, "^TestRankSharesRunDir$", 2, func(int) []string {
		return []string{"TESTBIN_RANK=1", "TMPDIR=" + tmp}
	})
	assert.Equal(t, "RESULT "+run, ranks[1].Result())
	require.NoError(t, ranks[1].Cmd.Wait())
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the rank left this in its TMPDIR")
}

// A run directory named in the environment that is not there (left
// exported in a shell, say) is not used: the process makes its own, and
// removes it at the end.
func TestStaleRunDirReplaced(t *testing.T) {
	if os.Getenv("TESTBIN_STALE") != "" {
		d := os.Getenv("XDG_RUNTIME_DIR")
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			fmt.Println("RESULT missing " + d)
			return
		}
		fmt.Println("RESULT " + d)
		return // through Main, which removes d
	}
	tmp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStaleRunDirReplaced$")
	cmd.Env = append(Environ(runEnv, "XDG_RUNTIME_DIR"), "TESTBIN_STALE=1", "TMPDIR="+tmp, runEnv+"="+filepath.Join(tmp, "gone"))
	out, err := cmd.Output()
	require.NoError(t, err, "%s", out)
	require.Regexp(t, "(?m)^RESULT "+regexp.QuoteMeta(tmp)+"/rdmago-test-run-", string(out))
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	assert.Empty(t, left, "the process left this in its TMPDIR")
}
