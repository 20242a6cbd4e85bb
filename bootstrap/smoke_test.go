package bootstrap

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSmoke(t *testing.T) {
	tok := []byte("secret")
	srv, err := NewServer(ServerOptions{Token: tok, Size: 4})
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			c, err := Dial(ctx, ClientOptions{Addr: srv.Addr(), Token: tok, Rank: r, Size: 4})
			require.NoError(t, err)
			defer c.Close()
			out, err := Allgather(ctx, c, "x", fmt.Appendf(nil, "r%d", r))
			require.NoError(t, err)
			require.Equal(t, "r3", string(out[3]))
			require.NoError(t, c.Fence(ctx))
		})
	}
	wg.Wait()
}
