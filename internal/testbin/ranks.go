package testbin

import (
	"bufio"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// Rank is a copy of the running test binary started as one rank of a
// multi-process test (see StartRanks).
type Rank struct {
	Cmd *exec.Cmd
	Out *bufio.Scanner // the rank's stdout, line by line
}

// StartRanks re-executes the running test binary as ranks 1..n-1 of a
// multi-process test: each runs only the tests matching run (a -test.run
// pattern; the test finds its role in the environment), with env(rank)
// added to this process's environment. The returned slice is indexed by
// rank (index 0 is nil: the calling test is rank 0). stderr goes to the
// test's. Each child dies with this process (on Linux) and is killed by
// PID at the end of the test, after a SIGCONT in case the test stopped it.
func StartRanks(t testing.TB, run string, n int, env func(rank int) []string) []*Rank {
	t.Helper()
	ranks := make([]*Rank, n)
	t.Cleanup(func() {
		for _, r := range ranks {
			if r != nil {
				_ = r.Cmd.Process.Signal(syscall.SIGCONT)
				_ = r.Cmd.Process.Kill() // by PID: only our own children
				_ = r.Cmd.Wait()
			}
		}
	})
	for r := 1; r < n; r++ {
		cmd := exec.Command(os.Args[0], "-test.run="+run)
		cmd.Env = append(os.Environ(), env(r)...)
		dieWithParent(cmd)
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("starting rank %d: %v", r, err)
		}
		ranks[r] = &Rank{Cmd: cmd, Out: bufio.NewScanner(out)}
	}
	return ranks
}

// Result reads the rank's stdout up to its first line starting with
// "RESULT " (how a child rank reports its outcome) and returns that line,
// or "" if the rank's output ended without one.
func (r *Rank) Result() string {
	for r.Out.Scan() {
		if l := r.Out.Text(); strings.HasPrefix(l, "RESULT ") {
			return l
		}
	}
	return ""
}
