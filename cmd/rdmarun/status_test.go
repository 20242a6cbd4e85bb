package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
)

// TestStatusCommand: `rdmarun status` finds a job by its status file (or
// --addr and RDMARUN_TOKEN), asks rank 0 with the token, prints one line
// per rank, and says what to do when there is no job or several.
func TestStatusCommand(t *testing.T) {
	run := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", run)
	t.Setenv("RDMARUN_TOKEN", "")
	status := func(args ...string) (string, string, int) {
		var o, e bytes.Buffer
		code := statusMain(args, &o, &e)
		return o.String(), e.String(), code
	}
	_, errOut, code := status()
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "no running rdmago job of this user on this host")

	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	since := time.Now().Add(-42 * time.Second)
	srv := bootstrap.ServeStatus(ln, token, nil, func(ctx context.Context, req byte) ([]bootstrap.RankStatus, error) {
		require.Equal(t, byte(bootstrap.StatusJob), req)
		now := time.Now()
		return []bootstrap.RankStatus{
			{Rank: 0, Host: "a", PID: 10, Now: now, Ops: []bootstrap.OpStatus{{Comm: "world", Running: true, Op: "allreduce", Seq: 7, Algorithm: "ring", Peer: 1, Since: since}}},
			{Rank: 1, Err: "no answer within 2s from a:1"},
		}, nil
	})
	defer srv.Close()
	_, err = bootstrap.WriteStatusFile("", bootstrap.StatusFile{Job: "j1", Addr: srv.Addr(), Token: hex.EncodeToString(token), PID: os.Getpid(), Size: 2, Started: time.Now()})
	require.NoError(t, err)

	out, errOut, code := status()
	require.Equal(t, 0, code, errOut)
	require.Regexp(t, `^rank 0 \(host a, pid 10\): allreduce #7 on world \(ring\) since 4[2-9] s, waiting for rank 1\nrank 1: no answer: no answer within 2s from a:1\n$`, out)

	// The same through --addr: the token must come along.
	_, errOut, code = status("--addr", srv.Addr())
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "RDMARUN_TOKEN")
	other, _ := bootstrap.NewToken()
	t.Setenv("RDMARUN_TOKEN", hex.EncodeToString(other))
	_, errOut, code = status("--addr", srv.Addr())
	require.Equal(t, 1, code)
	require.Contains(t, errOut, "does not know the job token")
	t.Setenv("RDMARUN_TOKEN", hex.EncodeToString(token))
	out2, _, code := status("--addr", srv.Addr())
	require.Equal(t, 0, code)
	require.Contains(t, out2, "allreduce #7 on world")

	// Two jobs: choose one.
	_, err = bootstrap.WriteStatusFile("", bootstrap.StatusFile{Job: "j2", Addr: "127.0.0.1:1", PID: os.Getpid(), Size: 3, Started: time.Now()})
	require.NoError(t, err)
	_, errOut, code = status()
	require.Equal(t, 2, code)
	require.Contains(t, errOut, "choose one with --job")
	require.Contains(t, errOut, "j1")
	out, _, code = status("--job", "j1")
	require.Equal(t, 0, code)
	require.Contains(t, out, "rank 1: no answer")
	_, errOut, code = status("--job", "nope")
	require.Equal(t, 1, code)
	require.Contains(t, errOut, `no running job "nope"`)
	require.FileExists(t, filepath.Join(run, "rdmago", "j1.json"))
}
