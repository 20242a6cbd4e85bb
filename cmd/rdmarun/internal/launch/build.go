package launch

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// isPackageDir reports whether path is a directory holding Go source: the
// "go run ./cmd/rdmarun -np 4 ./examples/hello" case.
func isPackageDir(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.IsDir() {
		return false
	}
	m, _ := filepath.Glob(filepath.Join(path, "*.go"))
	return len(m) > 0
}

// buildPackage builds the Go package in dir with the go command on PATH
// and returns the binary's path inside a new temporary directory, which
// the caller removes.
func buildPackage(dir string) (bin, tmp string, err error) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", "", fmt.Errorf("%s is a Go package directory, but the go command is not on PATH to build it: %v", dir, err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", "", err
	}
	if err := checkMain(gobin, dir, abs); err != nil {
		return "", "", err
	}
	tmp, err = os.MkdirTemp("", "rdmarun-build-")
	if err != nil {
		return "", "", fmt.Errorf("build %s: %v", dir, err)
	}
	name := filepath.Base(abs)
	if name == "." || name == "/" || name == "" {
		name = "prog"
	}
	bin = filepath.Join(tmp, name)
	cmd := exec.Command(gobin, "build", "-o", bin, ".")
	cmd.Dir = abs
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		os.RemoveAll(tmp)
		return "", "", fmt.Errorf("go build %s failed: %v\n%s", dir, err, strings.TrimRight(out.String(), "\n"))
	}
	return bin, tmp, nil
}

// checkMain fails with a usage error when the package in abs is not a main
// package: go build writes no program for it (only an archive that cannot
// be executed). When go list itself fails, go build says why.
func checkMain(gobin, dir, abs string) error {
	cmd := exec.Command(gobin, "list", "-f", "{{.Name}} {{.ImportPath}}", ".")
	cmd.Dir = abs
	out, err := cmd.Output()
	if err != nil {
		return nil
	}
	name, path, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	if name == "main" || name == "" {
		return nil
	}
	return usagef("%s is package %s (package %s), not a main package: rdmarun runs a program (a main package or an executable)", dir, path, name)
}
