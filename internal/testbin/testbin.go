// Package testbin builds the project's commands for tests that run real
// jobs (rdmarun plus a rank program), once per test binary, and runs them
// with a deadline, in a process group of their own that is killed whatever
// happens.
//
//	func TestJob(t *testing.T) {
//		bins := testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/bench")
//		r := testbin.Run(t, time.Minute, testbin.Environ("RDMARUN_*", "RDMAGO_*"), bins[0], "-np", "2", bins[1], "latency")
//		require.Equal(t, 0, r.Code, r) // r prints as the command, exit, time, stdout and stderr
//	}
//	func TestMain(m *testing.M) { testbin.Main(m) }
//
// Build skips the calling test under -short, since building and running
// jobs takes seconds. Build, Run, Exec and Environ are safe for concurrent
// use; Run must be called from the test's goroutine (it may stop the test),
// Exec from any.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sync"
	"testing"
)

var (
	mu    sync.Mutex
	dir   string
	built = map[string]result{}
	// batches counts the go commands run, naming each one's folder.
	batches int
)

type result struct {
	path string
	err  error
}

// Build builds each package (an import path, or a path relative to the
// test's package starting with ./ or ../) with `go build` into a temporary
// folder shared by the test binary, once per package, and returns the
// executables' paths in the order given. The packages not built yet are
// built by one go command (several when two share a base name). A failed
// build, or a package that is not a command, fails t.
//
// The binaries are built without build tags or -race, whatever the test
// binary was built with.
func Build(t testing.TB, pkgs ...string) []string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs rdmarun jobs; skipped with -short")
	}
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		d, err := os.MkdirTemp("", "rdmago-testbin-")
		if err != nil {
			t.Fatalf("testbin: %v", err)
		}
		dir = d
	}
	// go build -o DIR/ writes each command under its package's base name,
	// so a go command gets packages of distinct base names only.
	var groups [][]string
	for _, pkg := range pkgs {
		if _, ok := built[pkg]; ok {
			continue
		}
		built[pkg] = result{err: fmt.Errorf("%s: not built", pkg)} // placeholder: dedupes pkgs
		placed := false
		for i, g := range groups {
			if !hasBase(g, path.Base(pkg)) {
				groups[i] = append(g, pkg)
				placed = true
				break
			}
		}
		if !placed {
			groups = append(groups, []string{pkg})
		}
	}
	for _, g := range groups {
		buildGroup(g)
	}
	paths := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		r := built[pkg]
		if r.err != nil {
			t.Fatalf("testbin: %v", r.err)
		}
		paths[i] = r.path
	}
	return paths
}

// buildGroup builds pkgs (distinct base names) with one go command into a
// folder of their own and records each one's result. mu is held.
func buildGroup(pkgs []string) {
	batches++
	out := filepath.Join(dir, fmt.Sprint(batches))
	err := os.Mkdir(out, 0o755)
	if err == nil {
		var msg []byte
		args := append([]string{"build", "-o", out + string(filepath.Separator)}, pkgs...)
		if msg, err = exec.Command("go", args...).CombinedOutput(); err != nil {
			err = fmt.Errorf("go build %v: %v\n%s", pkgs, err, msg)
		}
	}
	for _, pkg := range pkgs {
		r := result{path: filepath.Join(out, path.Base(pkg)), err: err}
		if r.err == nil {
			if _, serr := os.Stat(r.path); serr != nil {
				r.err = fmt.Errorf("go build %s made no executable (not a main package?): %v", pkg, serr)
			}
		}
		built[pkg] = r
	}
}

func hasBase(pkgs []string, base string) bool {
	for _, p := range pkgs {
		if path.Base(p) == base {
			return true
		}
	}
	return false
}

// Main is a TestMain for packages that use Build: it runs the tests,
// removes what Build made and exits with the tests' status.
//
//	func TestMain(m *testing.M) { testbin.Main(m) }
//
// It also gives the jobs the tests start a private XDG_RUNTIME_DIR, removed
// at the end: rank 0 of a job writes its status file there (see
// docs/debugging.md), and a job a test kills cannot remove it. A test
// binary that StartRanks re-executes as a rank shares its parent's
// directory rather than making one of its own: such a rank is often killed
// or exits from inside its test, and would leave its directory behind.
func Main(m *testing.M) {
	run, owned := os.Getenv(runEnv), false
	if fi, err := os.Stat(run); run == "" || err != nil || !fi.IsDir() { // none, or a stale one
		if d, err := os.MkdirTemp("", "rdmago-test-run-"); err == nil {
			run, owned = d, true
			os.Setenv(runEnv, run)
			os.Setenv("XDG_RUNTIME_DIR", run)
		}
	}
	code := m.Run()
	Cleanup()
	if owned {
		os.RemoveAll(run)
	}
	os.Exit(code)
}

// runEnv names the run directory Main made, for the processes it starts.
const runEnv = "RDMAGO_TESTBIN_RUN"

// Cleanup removes what Build made; call it from TestMain after m.Run (Main
// does).
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		built = map[string]result{}
	}
}
