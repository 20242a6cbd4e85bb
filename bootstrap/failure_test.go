package bootstrap

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A rank's failure report reaches the server's list with the rank of the
// connection that put it (not the key's), once per rank, in arrival order;
// other keys and malformed reports are not reports.
func TestFailureReports(t *testing.T) {
	f := FailureReport{Kind: "lost", Origins: []int{2, 0}, Detail: "rank 2 lost: no frame\nfor 1.5s"}
	g, ok := DecodeFailure(f.Encode())
	require.True(t, ok)
	require.Equal(t, f, g)
	for _, bad := range []string{"", "lost", "lost\nx\n", "\n1\n", "lost\n-1\n"} {
		_, ok := DecodeFailure([]byte(bad))
		require.False(t, ok, "%q", bad)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	token, err := NewToken()
	require.NoError(t, err)
	srv, err := NewServer(ServerOptions{Token: token, Size: 2})
	require.NoError(t, err)
	defer srv.Close()
	cs := make([]*Client, 2)
	errs := make(chan error, 2)
	for r := range cs {
		go func() {
			var err error
			cs[r], err = Dial(ctx, ClientOptions{Addr: srv.Addr(), Token: token, Rank: r, Size: 2, Version: "t"})
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	defer cs[0].Close()
	defer cs[1].Close()
	require.NoError(t, cs[1].Put(ctx, FailureKey(0), FailureReport{Kind: "lost", Origins: []int{0, 9}}.Encode())) // rank 1's, whatever the key
	require.NoError(t, cs[1].Put(ctx, FailureKey(1), FailureReport{Kind: "revoked", Origins: []int{0}}.Encode()))
	require.NoError(t, cs[0].Put(ctx, FailureKey(0), []byte("garbage")))
	require.NoError(t, cs[0].Put(ctx, "other", FailureReport{Kind: "lost", Origins: []int{1}}.Encode()))
	require.NoError(t, cs[0].Put(ctx, FailureKey(0), FailureReport{Kind: "invalid", Origins: []int{1}}.Encode()))
	got := srv.Failures()
	require.Len(t, got, 2)
	require.Equal(t, 1, got[0].Rank)
	require.Equal(t, "lost", got[0].Kind)
	require.Equal(t, []int{0}, got[0].Origins, "ranks outside the job dropped")
	require.Equal(t, 0, got[1].Rank)
	require.Equal(t, "invalid", got[1].Kind)
}
