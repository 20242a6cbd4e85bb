package comm_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

// syncBuffer is a bytes.Buffer that goroutines write and read at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

// TestStatusShowsTheLateRank: ranks 0-2 wait in a barrier that rank 3 has
// not entered. Rank 0 prints once who has not arrived, and a client with
// the job token (found through the status file, as `rdmarun status` does)
// sees every rank's operation.
func TestStatusShowsTheLateRank(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", dir)
	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	var out syncBuffer
	o := comm.WithStatusOutput(comm.Options{Status: true, StuckAfter: 300 * time.Millisecond, Token: token}, &out)
	var (
		zero     = make(chan *comm.Comm, 1)
		released = make(chan struct{})
		job      []bootstrap.RankStatus
		rounds   int64
	)
	errs := run(t, 4, o, func(ctx context.Context, c *comm.Comm) error {
		if err := comm.Barrier(ctx, c); err != nil { // #1, everyone
			return err
		}
		switch c.Rank() {
		case 0:
			zero <- c
		case 3:
			c0 := <-zero
			if err := waitFor(ctx, func() bool { return strings.Contains(out.String(), "stuck job") }); err != nil {
				return err
			}
			files, err := bootstrap.ReadStatusFiles("")
			require.NoError(t, err)
			require.Len(t, files, 1)
			tok, err := hex.DecodeString(files[0].Token)
			require.NoError(t, err)
			qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			job, err = bootstrap.QueryStatus(qctx, files[0].Addr, tok, bootstrap.StatusJob)
			cancel()
			require.NoError(t, err)
			// Let the watch look again (twice): it must not repeat itself.
			n := comm.StatusRounds(c0)
			if err := waitFor(ctx, func() bool { return comm.StatusRounds(c0) >= n+2 }); err != nil {
				return err
			}
			rounds = comm.StatusRounds(c0)
			close(released)
		}
		return comm.Barrier(ctx, c) // #2: rank 3 comes late
	})
	requireOK(t, errs)
	<-released
	require.Positive(t, rounds)
	text := out.String()
	require.Equal(t, 1, strings.Count(text, "stuck job"), "reported once: %s", text)
	require.Contains(t, text, "ranks 0-2 wait in barrier #2 on world since ")
	require.Regexp(t, `\(for ranks? [0-9 and,-]*3\)`, text)
	require.Contains(t, text, "rank 3 is idle since barrier #1 on world ended")

	require.Len(t, job, 4)
	for r, st := range job {
		require.Equal(t, r, st.Rank)
		require.Empty(t, st.Err)
		require.NotEmpty(t, st.Ops)
		w := st.Ops[0]
		require.Equal(t, "world", w.Comm)
		require.Equal(t, "barrier", w.Op)
		if r < 3 {
			require.True(t, w.Running, "rank %d", r)
			require.Equal(t, uint64(2), w.Seq)
			require.NotEqual(t, -1, w.Peer, "rank %d", r)
			if r == 0 { // dissemination: 0 hears from 3 first
				require.Equal(t, 3, w.Peer)
			}
		} else {
			require.False(t, w.Running)
			require.Equal(t, uint64(1), w.Seq)
		}
	}
	// Close removed the status file.
	files, err := bootstrap.ReadStatusFiles("")
	require.NoError(t, err)
	require.Empty(t, files)
}

// TestStatusShowsAReceive: a rank blocked in Recv shows the receive, its
// sequence number and the rank it waits for.
func TestStatusShowsAReceive(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	o := comm.Options{Status: true, StuckAfter: -1, Token: token}
	var job []bootstrap.RankStatus
	errs := run(t, 3, o, func(ctx context.Context, c *comm.Comm) error {
		switch c.Rank() {
		case 0:
			_, err := comm.Recv(ctx, c, make([]byte, 4), 2, 5)
			return err
		case 2:
			// Ask the job until rank 0 is seen in its receive, then send.
			// (Rank 0 writes its status file once its Init is done.)
			var files []bootstrap.StatusFile
			if err := waitFor(ctx, func() bool {
				files, _ = bootstrap.ReadStatusFiles("")
				return len(files) == 1
			}); err != nil {
				return fmt.Errorf("no status file: %w", err)
			}
			tok, _ := hex.DecodeString(files[0].Token)
			if err := waitFor(ctx, func() bool {
				var err error
				job, err = bootstrap.QueryStatus(ctx, files[0].Addr, tok, bootstrap.StatusJob)
				if err != nil || len(job) != 3 {
					return false
				}
				for _, op := range job[0].Ops {
					if op.Op == "recv" && op.Running {
						return true
					}
				}
				return false
			}); err != nil {
				return err
			}
			return comm.Send(ctx, c, []byte("ping"), 0, 5)
		}
		return nil
	})
	requireOK(t, errs)
	require.Len(t, job, 3)
	lines := bootstrap.FormatStatus(job)
	require.Regexp(t, `^rank 0 \(host \S+, pid \d+\): no operation yet on world; recv #1 on world since [0-9.]+ s, waiting for rank 2$`, lines[0])
}
