package bootstrap

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A rank whose connection breaks (a crash) or closes is reported under
// LeftKey to the ranks waiting for it, and the keys it put before are
// visible by then; a live rank is not reported.
func TestLeftKeyReportsDepartures(t *testing.T) {
	ctx := testCtx(t)
	s := newServer(t, 3, nil)
	cs := joinAll(t, ctx, s, 3)

	got := make(chan []byte, 1)
	go func() {
		v, _ := cs[0].Get(ctx, LeftKey(2))
		got <- v
	}()
	require.NoError(t, cs[2].Put(ctx, "last/2", []byte("x")))
	cs[2].conn.Close() // no goodbye: as if the process died
	select {
	case v := <-got:
		require.Contains(t, string(v), "rank 2 lost its connection")
	case <-ctx.Done():
		t.Fatal("no LeftKey for the rank whose connection broke")
	}
	v, err := cs[1].Get(ctx, "last/2")
	require.NoError(t, err)
	require.Equal(t, "x", string(v))

	require.NoError(t, cs[1].Close())
	v, err = cs[0].Get(ctx, LeftKey(1))
	require.NoError(t, err)
	require.Contains(t, string(v), "rank 1 closed its connection")

	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = cs[0].Get(short, LeftKey(0))
	require.ErrorIs(t, err, context.DeadlineExceeded, "a live rank reported as left")
}

func TestMemoryLeftKey(t *testing.T) {
	ctx := testCtx(t)
	ms, err := NewMemory(2)
	require.NoError(t, err)
	require.NoError(t, ms[1].Close())
	v, err := ms[0].Get(ctx, LeftKey(1))
	require.NoError(t, err)
	require.Contains(t, string(v), "rank 1 closed")
}
