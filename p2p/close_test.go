package p2p_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestCloseWhilePeerStaysOpen: a rank that closes while its peer carries
// on (a rank that panics while the others wait in a collective, with
// `defer c.Close()`) must not wait out CloseTimeout once what it sent has
// arrived. Small frames go inline and mostly unsignaled, so Close cannot
// count them delivered from their own completions; its goodbye must settle
// them. The peer, still open, then sees the departure as ErrClosed.
func TestCloseWhilePeerStaysOpen(t *testing.T) {
	for _, prov := range []string{"loop", "shm", "tcp"} {
		t.Run(prov, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// A CloseTimeout far beyond the bound below: waiting it out fails.
			eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: prov,
				P2P: p2p.Options{RingLines: -1, CloseTimeout: 10 * time.Minute}})
			require.NoError(t, err)
			defer p2ptest.Close(eps)
			buf := make([]byte, 8)
			for i := range 3 {
				require.NoError(t, eps[1].Send(ctx, 0, 1, pattern(i+1, byte(i))))
				_, err := eps[0].Recv(ctx, 1, 1, buf)
				require.NoError(t, err)
			}

			closed := make(chan error, 1)
			go func() { closed <- eps[1].Close() }()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatalf("rank 1's Close still waits after 10 s while rank 0 stays open (%d send queue entries counted in flight)", eps[1].SendOutstanding(0))
			}
			_, err = eps[0].Recv(ctx, 1, 2, buf)
			require.ErrorIs(t, err, p2p.ErrClosed, fmt.Sprintf("rank 0 receiving from the departed rank 1: %v", err))
		})
	}
}
