package bootstrap

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// StatusFile tells a user on rank 0's host how to reach a running job's
// status endpoint, under any launcher: rank 0 writes one per job into
// StatusDir, readable by its owner only (it holds the job token, as the
// ranks' environment does), and removes it when the job ends.
type StatusFile struct {
	Job     string    `json:"job"`   // the launcher's job id, else one rank 0 made
	Addr    string    `json:"addr"`  // rank 0's status endpoint
	Token   string    `json:"token"` // hex; empty for a job without a token
	PID     int       `json:"pid"`   // rank 0's process
	Size    int       `json:"size"`
	Started time.Time `json:"started"`
}

// StatusDir is where status files live: $XDG_RUNTIME_DIR/rdmago, or
// rdmago-UID in the temporary directory.
func StatusDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "rdmago")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("rdmago-%d", os.Getuid()))
}

// statusDir makes (or checks) dir: ours, a directory, not open to others;
// a shared temporary directory must not let another user plant files.
func statusDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !fi.IsDir() || fi.Mode().Perm()&0o077 != 0 || ok && int(st.Uid) != os.Getuid() {
		return fmt.Errorf("%s is not a private directory of this user (mode %v)", dir, fi.Mode())
	}
	return nil
}

// WriteStatusFile writes f into dir (StatusDir when empty) and returns its
// path; the caller removes it when the job ends.
func WriteStatusFile(dir string, f StatusFile) (string, error) {
	if dir == "" {
		dir = StatusDir()
	}
	if err := statusDir(dir); err != nil {
		return "", fmt.Errorf("bootstrap: status file: %w", err)
	}
	if f.Job == "" || strings.ContainsAny(f.Job, "/\\") || strings.HasPrefix(f.Job, ".") {
		return "", fmt.Errorf("bootstrap: status file: bad job id %q", f.Job)
	}
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	ReadStatusFiles(dir) // sweeps the files of jobs whose rank 0 was killed
	path := filepath.Join(dir, f.Job+".json")
	tmp, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("bootstrap: status file: %w", err)
	}
	_, werr := tmp.Write(b)
	cerr := tmp.Close()
	if werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(tmp.Name(), path)
	}
	if werr != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("bootstrap: status file: %w", werr)
	}
	return path, nil
}

// ReadStatusFiles returns the status files in dir (StatusDir when empty)
// whose rank 0 still runs, oldest first. Files of ended processes are
// removed.
func ReadStatusFiles(dir string) ([]StatusFile, error) {
	if dir == "" {
		dir = StatusDir()
	}
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []StatusFile
	for _, n := range names {
		b, err := os.ReadFile(n)
		if err != nil {
			continue
		}
		var f StatusFile
		if json.Unmarshal(b, &f) != nil || f.PID <= 0 {
			continue
		}
		if err := syscall.Kill(f.PID, 0); err == syscall.ESRCH {
			os.Remove(n) // rank 0 died without cleaning up
			continue
		}
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Started.Before(out[j].Started) })
	return out, nil
}
