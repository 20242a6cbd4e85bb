package main_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// chatter is a program that writes its pid, then prints a line every millisecond
// for a minute: enough output that a reader who goes away is noticed.
const chatter = `package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func main() {
	// Written aside and renamed: the test reads the file as soon as it is
	// there, and an empty one named no process.
	p := filepath.Join(os.Args[1], os.Getenv("RDMARUN_RANK")+".pid")
	os.WriteFile(p+".tmp", []byte(fmt.Sprint(os.Getpid())), 0o644)
	os.Rename(p+".tmp", p)
	for i := 0; i < 60000; i++ {
		fmt.Println("line", i)
		time.Sleep(time.Millisecond)
	}
}
`

// rdmarun ... | head -1: when whoever reads rdmarun's stdout goes away,
// rdmarun ends the job as a process killed by SIGPIPE would (status 141),
// stops the ranks and still removes the directory it built the program in.
func TestStdoutClosed(t *testing.T) {
	src := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(src, "go.mod"), []byte("module chatter\n\ngo 1.21\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(src, "main.go"), []byte(chatter), 0o644))
	tmp := t.TempDir() // rdmarun's TMPDIR: where its build directory goes
	pids := t.TempDir()

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := command(ctx, "-np", "2", "--grace", "2s", src, pids)
	cmd.Env = append(cmd.Env, "TMPDIR="+tmp, "GOFLAGS=-mod=mod")
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	cmd.Stdout = pw
	var errb testbin.Buffer // read while rdmarun writes
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	pw.Close()
	// Read until both ranks run (their output never ends), then go away
	// as head -1 does.
	br := bufio.NewReader(pr)
	for {
		line, err := br.ReadString('\n')
		require.NoError(t, err, "stderr:\n%s", errb.String())
		require.Regexp(t, `^line \d+\n$`, line)
		if m, _ := filepath.Glob(filepath.Join(pids, "*.pid")); len(m) == 2 {
			break
		}
	}
	pr.Close()
	err = cmd.Wait()
	require.NoError(t, ctx.Err(), "rdmarun still ran 60 s after its stdout was closed; stderr:\n%s", errb.String())
	var ee *exec.ExitError
	require.True(t, errors.As(err, &ee), "rdmarun: %v; stderr:\n%s", err, errb.String())
	assert.Equal(t, 128+13, ee.ExitCode(), "rdmarun exits as if killed by SIGPIPE (%v); stderr:\n%s", ee, errb.String())
	assert.Contains(t, errb.String(), "standard output closed")

	left, err := filepath.Glob(filepath.Join(tmp, "rdmarun-build-*"))
	require.NoError(t, err)
	assert.Empty(t, left, "rdmarun left its build directory behind")
	pidsGone(t, pids, 2)
}
