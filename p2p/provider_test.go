package p2p_test

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/affinity"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
)

// fakeProvider is a provider p2p has never heard of: its own name and
// traits, devices borrowed from shm. It connects ranks of one host only
// while it is the one a test enables (fakeOn), so that the other tests of
// this package, which share the registry, never see it.
type fakeProvider struct {
	name   string
	traits verbs.Traits
}

var fakeOn atomic.Pointer[string]

func (f fakeProvider) Name() string         { return f.name }
func (f fakeProvider) Traits() verbs.Traits { return f.traits }
func (f fakeProvider) Open(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error) {
	return verbs.Open(ctx, "shm", o)
}
func (f fakeProvider) CanConnect(a, b verbs.PeerInfo) bool {
	on := fakeOn.Load()
	return on != nil && *on == f.name && a.SameHost(b)
}

// Two fakes on the same devices that differ only in what they say of
// themselves; both are preferred to every real provider.
var (
	fakeMem = fakeProvider{"fake-mem", verbs.Traits{Preference: 1, SharesMemory: true, InlineSends: true,
		EagerSize: 12 << 10, SlotGrowth: 2,
		Wait: verbs.WaitHint{Spin: 37 * time.Microsecond, SpinShared: 3 * time.Microsecond, Yield: 11 * time.Microsecond}}}
	fakeNoMem = fakeProvider{"fake-nomem", verbs.Traits{Preference: 2, EagerSize: 20 << 10}}
)

func init() {
	// The registration a new provider adds in its own package.
	verbs.Register(fakeMem)
	verbs.Register(fakeNoMem)
}

func enableFake(t *testing.T, f fakeProvider) {
	fakeOn.Store(&f.name)
	t.Cleanup(func() { fakeOn.Store(nil) })
}

// A new provider is one package and one registration: the automatic
// choice picks it when it is preferred and can connect the pair, and p2p
// applies the policy its traits ask for (eager size, wait hints, the
// shared-memory rings), with no name of it anywhere in p2p.
func TestNewProviderByTraits(t *testing.T) {
	cpus := runtime.NumCPU()
	if l, err := affinity.CPUs(); err == nil {
		cpus = len(l)
	}
	for _, f := range []fakeProvider{fakeMem, fakeNoMem} {
		t.Run(f.name, func(t *testing.T) {
			enableFake(t, f)
			p2ptest.Run(t, 2, p2ptest.Options{Provider: "auto", Timeout: 30 * time.Second},
				func(ctx context.Context, ep *p2p.Endpoint) error {
					peer := 1 - ep.Rank()
					assert.Equal(t, f.name, ep.Transport(peer))
					assert.Equal(t, f.traits, ep.Traits(peer))
					// The provider's size and room for a layer's header.
					assert.Equal(t, f.traits.EagerSize+64, ep.EagerLimit(peer))
					spin, yield := ep.WaitPolicy()
					want := f.traits.Wait.Spin
					if cpus < 2 {
						want = f.traits.Wait.SpinShared
					}
					assert.Equal(t, want, spin, "spin from the wait hint")
					assert.Equal(t, f.traits.Wait.Yield, yield, "yield from the wait hint")
					small := make([]byte, 64) // fits a ring line; each rank its own
					for range 4 {
						if ep.Rank() == 0 {
							if err := ep.Send(ctx, 1, 5, small); err != nil {
								return err
							}
						} else if _, err := ep.Recv(ctx, 0, 5, small); err != nil {
							return err
						}
					}
					if ep.Rank() == 0 {
						rings := ep.Stats().Peers[1].RingSent.Msgs
						if f.traits.SharesMemory {
							assert.NotZero(t, rings, "a provider that shares memory gets the rings")
						} else {
							assert.Zero(t, rings, "a provider that shares no memory gets no rings")
						}
					}
					return nil
				})
		})
	}
	// Disabled, the fakes connect nothing and the choice is shm again.
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "auto", Timeout: 30 * time.Second},
		func(ctx context.Context, ep *p2p.Endpoint) error {
			assert.Equal(t, "shm", ep.Transport(1-ep.Rank()))
			return nil
		})
}

// A forced provider that cannot connect a pair fails New on every rank,
// naming the provider and both ranks, instead of failing later when the
// queue pairs connect.
func TestForcedProviderCannotConnect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: fakeMem.name})
	if err == nil {
		p2ptest.Close(eps)
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, verbs.ErrUnavailable)
	assert.ErrorContains(t, err, `transport "fake-mem" was chosen for every rank but cannot connect rank 0 (host `)
	assert.ErrorContains(t, err, `cannot connect rank 1 (host `)
	assert.ErrorContains(t, err, `) with rank 0 (host `)

	// Enabled, the same forced choice works.
	enableFake(t, fakeMem)
	p2ptest.Run(t, 2, p2ptest.Options{Provider: fakeMem.name}, func(ctx context.Context, ep *p2p.Endpoint) error {
		assert.Equal(t, fakeMem.name, ep.Transport(1-ep.Rank()))
		return nil
	})

	// An unknown name fails as verbs.Open does.
	_, err = p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "no-such-provider"})
	assert.ErrorIs(t, err, verbs.ErrUnavailable)
	assert.ErrorContains(t, err, `"no-such-provider"`)
}
