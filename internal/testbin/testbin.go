// Package testbin builds the project's commands for tests that run real
// jobs (rdmarun plus a rank program), once per test binary.
//
//	func TestJob(t *testing.T) {
//		bins := testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/bench")
//		out, err := exec.Command(bins[0], "-np", "2", bins[1], "latency").CombinedOutput()
//		...
//	}
//	func TestMain(m *testing.M) { code := m.Run(); testbin.Cleanup(); os.Exit(code) }
//
// Build skips the calling test under -short, since building and running
// jobs takes seconds. It is safe for concurrent use.
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
)

type result struct {
	path string
	err  error
}

// Build builds each package (an import path) with `go build` into a
// temporary folder shared by the test binary, once per package, and returns
// the executables' paths in the order given. A failed build fails t.
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
	paths := make([]string, len(pkgs))
	for i, pkg := range pkgs {
		r, ok := built[pkg]
		if !ok {
			r.path = filepath.Join(dir, fmt.Sprintf("%d-%s", len(built), path.Base(pkg)))
			if out, err := exec.Command("go", "build", "-o", r.path, pkg).CombinedOutput(); err != nil {
				r.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
			}
			built[pkg] = r
		}
		if r.err != nil {
			t.Fatalf("testbin: %v", r.err)
		}
		paths[i] = r.path
	}
	return paths
}

// Cleanup removes what Build made; call it from TestMain after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
		built = map[string]result{}
	}
}
