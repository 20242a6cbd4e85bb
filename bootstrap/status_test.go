package bootstrap_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
)

func TestStatusQueryNeedsTheToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	want := []bootstrap.RankStatus{{Rank: 2, Host: "h", PID: 7, Ops: []bootstrap.OpStatus{{Comm: "world", Running: true, Op: "bcast", Seq: 9, Peer: 1}}}}
	var got byte
	srv := bootstrap.ServeStatus(ln, token, nil, func(ctx context.Context, req byte) ([]bootstrap.RankStatus, error) {
		got = req
		return want, nil
	})
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	st, err := bootstrap.QueryStatus(ctx, srv.Addr(), token, bootstrap.StatusJob)
	require.NoError(t, err)
	require.Equal(t, byte(bootstrap.StatusJob), got)
	require.Len(t, st, 1)
	require.Equal(t, "bcast", st[0].Ops[0].Op)
	require.Equal(t, uint64(9), st[0].Ops[0].Seq)

	other, _ := bootstrap.NewToken()
	got = 0
	_, err = bootstrap.QueryStatus(ctx, srv.Addr(), other, bootstrap.StatusJob)
	require.ErrorIs(t, err, bootstrap.ErrAuth)
	require.Zero(t, got, "a client without the token must not reach the handler")

	// A stranger that sends garbage is dropped; the server goes on serving.
	c, err := net.Dial("tcp", srv.Addr())
	require.NoError(t, err)
	c.Write([]byte("GET / HTTP/1.0\r\n\r\n-------------------------------------------------"))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err)
	var ne net.Error
	require.False(t, errors.As(err, &ne) && ne.Timeout(), "garbage must be dropped at once, not left open")
	c.Close()
	_, err = bootstrap.QueryStatus(ctx, srv.Addr(), token, bootstrap.StatusSelf)
	require.NoError(t, err)
}

func TestStuckReport(t *testing.T) {
	now := time.Unix(1000, 0)
	in := func(op string, seq uint64, age time.Duration, peer int) []bootstrap.OpStatus {
		return []bootstrap.OpStatus{{Comm: "world", Running: true, Op: op, Seq: seq, Since: now.Add(-age), Peer: peer}}
	}
	var ranks []bootstrap.RankStatus
	for r := range 8 {
		st := bootstrap.RankStatus{Rank: r, Now: now, Ops: in("allreduce", 1234, 30*time.Second, 3)}
		if r == 3 {
			st.Ops = in("bcast", 1233, 31*time.Second, 0)
		}
		ranks = append(ranks, st)
	}
	rep, keys, ok := bootstrap.StuckReport(ranks, 40*time.Second)
	require.False(t, ok, "nobody waits 40 s yet: %s", rep)

	rep, keys, ok = bootstrap.StuckReport(ranks, 30*time.Second)
	require.True(t, ok)
	require.Equal(t, []string{"world/bcast#1233", "world/allreduce#1234"}, keys)
	require.Equal(t, "rank 3 waits in bcast #1233 on world since 31 s (for rank 0); ranks 0-2 and 4-7 are in allreduce #1234 on world since 30 s (for rank 3)", rep)

	ranks[3] = bootstrap.RankStatus{Rank: 3, Err: "i/o timeout"}
	rep, keys, ok = bootstrap.StuckReport(ranks, 30*time.Second)
	require.True(t, ok)
	require.Equal(t, []string{"world/allreduce#1234"}, keys)
	require.Equal(t, "ranks 0-2 and 4-7 wait in allreduce #1234 on world since 30 s (for rank 3); rank 3 does not answer (stopped, or stuck outside rdmago)", rep)

	lines := bootstrap.FormatStatus(ranks[2:4])
	require.Equal(t, []string{"rank 2: allreduce #1234 on world since 30 s, waiting for rank 3", "rank 3: no answer: i/o timeout"}, lines)
}

func TestStatusFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "st")
	f := bootstrap.StatusFile{Job: "abc", Addr: "127.0.0.1:1", Token: "00", PID: os.Getpid(), Size: 4, Started: time.Now()}
	path, err := bootstrap.WriteStatusFile(dir, f)
	require.NoError(t, err)
	fi, err := os.Stat(path)
	require.NoError(t, err)
	require.Zero(t, fi.Mode().Perm()&0o077, "the file holds the token: owner only")
	// A file whose process is gone is stale.
	_, err = bootstrap.WriteStatusFile(dir, bootstrap.StatusFile{Job: "dead", PID: 1 << 30})
	require.NoError(t, err)
	got, err := bootstrap.ReadStatusFiles(dir)
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, "abc", got[0].Job)
	require.Equal(t, 4, got[0].Size)
	_, err = bootstrap.WriteStatusFile(dir, bootstrap.StatusFile{Job: "../x", PID: 1})
	require.Error(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	_, err = bootstrap.WriteStatusFile(dir, f)
	require.Error(t, err, "a directory others can read must be refused")
}
