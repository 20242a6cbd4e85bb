package p2p_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
	_ "github.com/rdmago/rdmago/verbs/ibv" // registers "ibv", so the automatic choice probes it
)

// ibvProbe is an OpenDevice that records the name every provider's device
// is opened with and makes the ibv probe fail as a missing device does.
type ibvProbe struct {
	mu    sync.Mutex
	names map[string][]string
}

var errNoMatch = fmt.Errorf("%w: no RDMA device matches (have rxe0)", verbs.ErrUnavailable)

func (p *ibvProbe) open(ctx context.Context, prov string, o verbs.DeviceOptions) (verbs.Device, error) {
	p.mu.Lock()
	p.names[prov] = append(p.names[prov], o.Name)
	p.mu.Unlock()
	if prov == "ibv" {
		return nil, errNoMatch
	}
	return verbs.Open(ctx, prov, o)
}

// Options.IBDevices reaches the ibv device only, and a selection that
// opens nothing fails the endpoint instead of falling back to tcp.
func TestIBDevicesSelection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	probe := &ibvProbe{names: map[string][]string{}}
	o := p2ptest.Options{Provider: "auto", P2P: p2p.Options{IBDevices: "=rxe1:1",
		Device: verbs.DeviceOptions{Name: "dev-for-all"}, OpenDevice: probe.open}}
	eps, err := p2ptest.Start(ctx, 2, o)
	if err == nil {
		p2ptest.Close(eps)
	}
	require.Error(t, err, "a selected ibv device that does not open must fail the endpoint")
	assert.ErrorIs(t, err, errNoMatch)
	assert.ErrorContains(t, err, `"=rxe1:1"`, "the error names the selection")
	probe.mu.Lock()
	assert.Equal(t, []string{"=rxe1:1", "=rxe1:1"}, probe.names["ibv"], "each rank probes ibv with the selection as the name")
	for prov, names := range probe.names {
		if prov != "ibv" {
			for _, n := range names {
				assert.Equal(t, "dev-for-all", n, "%s must not get the ibv selection", prov)
			}
		}
	}
	probe.mu.Unlock()

	// Without a selection, no ibv device means the automatic choice goes on
	// without it: shm on this one host.
	probe = &ibvProbe{names: map[string][]string{}}
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "auto", P2P: p2p.Options{OpenDevice: probe.open}},
		func(ctx context.Context, ep *p2p.Endpoint) error {
			if got := ep.Transport(1 - ep.Rank()); got != "shm" {
				return errors.New("transport " + got + ", want shm")
			}
			return nil
		})
	probe.mu.Lock()
	assert.Len(t, probe.names["ibv"], 2, "each rank probed ibv")
	probe.mu.Unlock()
}
