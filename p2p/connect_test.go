package p2p_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	_ "github.com/rdmago/rdmago/verbs/tcp"
)

// A peer whose transport cannot be reached is reported with the address
// that was tried and why it failed, not as a bare flushed work request.
// Every rank advertises a port nothing listens on, as a rank in another
// network namespace that advertised loopback would look to its peers.
func TestConnectFailureNamesAddress(t *testing.T) {
	o := p2ptest.Options{Provider: "tcp", Timeout: 20 * time.Second}
	o.P2P.Device.Advertise = "127.0.0.1:1"
	o.P2P.CloseTimeout = 500 * time.Millisecond
	err := p2ptest.RunErr(2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		// Rank 0 waits for a reply too: a small send may complete before
		// its link is up, and only a wait on the link then sees the failure.
		buf := make([]byte, 8)
		if ep.Rank() == 0 {
			if err := ep.Send(ctx, 1, 3, buf); err != nil {
				return err
			}
			_, err := ep.Recv(ctx, 1, 4, buf)
			return err
		}
		if _, err := ep.Recv(ctx, 0, 3, buf); err != nil {
			return err
		}
		return ep.Send(ctx, 0, 4, buf)
	})
	require.Error(t, err)
	assert.True(t, errors.Is(err, p2p.ErrPeerLost), "%v", err)
	assert.Contains(t, err.Error(), "could not connect over tcp: tcp: connecting to 127.0.0.1:1: ")
	assert.Contains(t, err.Error(), "connection refused (the peer advertised a loopback address")
}
