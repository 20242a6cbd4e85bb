package testbin

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// Result is what a command run by Run or Exec did. It prints (String) as
// everything a failure message wants: the command line, how it ended and
// after how long, the processes still running at the deadline or left
// behind, stdout and stderr.
type Result struct {
	Args    []string      // the command line, the program first
	Stdout  string        // what it wrote on stdout
	Stderr  string        // what it wrote on stderr
	Code    int           // exit status; -1 when killed by a signal (a timeout included)
	Elapsed time.Duration // from start to exit
	Timeout time.Duration // the deadline it was given
	// TimedOut reports that the deadline passed: the whole process group
	// was killed. Stuck lists the group's processes ("pid state
	// cmdline") as they were just before.
	TimedOut bool
	Stuck    []string
	// Leftover lists processes of the group still alive after the
	// command exited (a launcher that did not stop its ranks); they were
	// killed.
	Leftover []string
}

func (r Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n", strings.Join(r.Args, " "))
	if r.TimedOut {
		fmt.Fprintf(&b, "still running after %s (the deadline): killed its process group\n", r.Timeout)
	} else {
		fmt.Fprintf(&b, "exit status %d after %s (deadline %s)\n", r.Code, r.Elapsed.Round(time.Millisecond), r.Timeout)
	}
	for _, p := range r.Stuck {
		fmt.Fprintf(&b, "  running at the deadline: %s\n", p)
	}
	for _, p := range r.Leftover {
		fmt.Fprintf(&b, "  left behind after exit (killed): %s\n", p)
	}
	fmt.Fprintf(&b, "--- stdout:\n%s", r.Stdout)
	if r.Stdout != "" && !strings.HasSuffix(r.Stdout, "\n") {
		b.WriteByte('\n')
	}
	fmt.Fprintf(&b, "--- stderr:\n%s", r.Stderr)
	return b.String()
}

// ErrTimeout is what Exec's error wraps when the command outlived its
// deadline.
var ErrTimeout = errors.New("deadline passed")

// Exec runs name with args and the environment env (nil: the test's own)
// and no stdin, in a process group of its own, and waits for it at most
// timeout; then it kills the whole group. Processes of the group still
// alive when the command exits are killed too, and listed in the Result.
// The error is nil for any exit status; it wraps ErrTimeout when the
// deadline passed (the Result has what the command wrote until then), or
// says why the command could not start.
//
// Output goes to temporary files, not pipes: a child that outlives the
// command and keeps its stdout open cannot hold Exec up, and nothing that
// was written is lost when the group is killed.
func Exec(timeout time.Duration, env []string, name string, args ...string) (Result, error) {
	r := Result{Args: append([]string{name}, args...), Timeout: timeout, Code: -1}
	stdout, err := os.CreateTemp("", "rdmago-testbin-stdout-")
	if err != nil {
		return r, fmt.Errorf("testbin: %w", err)
	}
	defer removeFile(stdout)
	stderr, err := os.CreateTemp("", "rdmago-testbin-stderr-")
	if err != nil {
		return r, fmt.Errorf("testbin: %w", err)
	}
	defer removeFile(stderr)

	cmd := exec.Command(name, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = stdout, stderr
	ownGroup(cmd)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, fmt.Errorf("testbin: %w", err)
	}
	pgid := cmd.Process.Pid
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var werr error
	select {
	case werr = <-done:
		r.Elapsed = time.Since(start)
		// Only members of the group are left, so the group's id stays
		// theirs until they are gone.
		r.Leftover = GroupMembers(pgid)
	case <-timer.C:
		r.Elapsed = time.Since(start)
		r.TimedOut = true
		r.Stuck = GroupMembers(pgid)
		killGroup(cmd.Process)
		werr = <-done
	}
	killGroup(cmd.Process)

	r.Stdout, r.Stderr = readFile(stdout), readFile(stderr)
	var ee *exec.ExitError
	switch {
	case r.TimedOut:
		return r, fmt.Errorf("%s: %w (%s)", name, ErrTimeout, timeout)
	case werr == nil:
		r.Code = 0
	case errors.As(werr, &ee):
		r.Code = ee.ExitCode()
	default:
		return r, fmt.Errorf("testbin: %s: %w", name, werr)
	}
	return r, nil
}

// Run is Exec for the test's goroutine: a command that cannot start or
// outlives its deadline stops the test, the message saying all that
// Result says; left-behind processes are logged. Run does not judge the
// exit status.
func Run(t testing.TB, timeout time.Duration, env []string, name string, args ...string) Result {
	t.Helper()
	r, err := Exec(timeout, env, name, args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, r)
	}
	if len(r.Leftover) > 0 {
		t.Logf("%s left processes behind (killed):\n  %s", name, strings.Join(r.Leftover, "\n  "))
	}
	return r
}

// Environ is the test's environment without the variables drop names: a
// name ending in * drops every variable that starts with what precedes
// it ("PMI_*"), any other name that variable alone. Jobs a test starts
// use it so that an enclosing job's (CI's launcher's) or the developer's
// tuning variables do not change what they do.
func Environ(drop ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !matchAny(k, drop) {
			env = append(env, kv)
		}
	}
	return env
}

func matchAny(k string, patterns []string) bool {
	for _, p := range patterns {
		if prefix, ok := strings.CutSuffix(p, "*"); (ok && strings.HasPrefix(k, prefix)) || k == p {
			return true
		}
	}
	return false
}

func readFile(f *os.File) string {
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return fmt.Sprintf("(testbin: reading the output: %v)", err)
	}
	return string(b)
}

func removeFile(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}
