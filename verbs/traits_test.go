package verbs

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type prefProvider struct {
	name string
	pref int
}

func (p prefProvider) Name() string { return p.name }
func (p prefProvider) Open(context.Context, DeviceOptions) (Device, error) {
	return nil, ErrUnavailable
}
func (p prefProvider) Traits() Traits                { return Traits{Preference: p.pref} }
func (p prefProvider) CanConnect(_, _ PeerInfo) bool { return true }
func names(ps []Provider) (out []string) {
	for _, p := range ps {
		out = append(out, p.Name())
	}
	return out
}

// withRegistry runs f with only ps registered.
func withRegistry(t *testing.T, ps ...Provider) {
	regMu.Lock()
	saved := providers
	providers = map[string]Provider{}
	regMu.Unlock()
	t.Cleanup(func() {
		regMu.Lock()
		providers = saved
		regMu.Unlock()
	})
	for _, p := range ps {
		Register(p)
	}
}

// Preferred orders by Preference (ties by name) and leaves out providers
// used only when named, whatever the registration order.
func TestPreferred(t *testing.T) {
	withRegistry(t, prefProvider{"c", 30}, prefProvider{"named-only", 0},
		prefProvider{"b", 10}, prefProvider{"a", 10}, prefProvider{"z", 2})
	assert.Equal(t, []string{"z", "a", "b", "c"}, names(Preferred()))
	assert.Equal(t, []string{"a", "b", "c", "named-only", "z"}, Providers())

	p, err := Lookup("named-only")
	require.NoError(t, err)
	assert.Equal(t, "named-only", p.Name())
	_, err = Lookup("nope")
	assert.ErrorIs(t, err, ErrUnavailable)
	assert.ErrorContains(t, err, `"nope"`)
	assert.Panics(t, func() { Register(prefProvider{"a", 1}) }, "a name registered twice")
}

func TestPeerInfo(t *testing.T) {
	a := PeerInfo{Host: "boot/ns:1", Process: "p1", Devices: []string{"ibv"}}
	b := PeerInfo{Host: "boot/ns:1", Process: "p2"}
	assert.True(t, a.SameHost(b))
	assert.False(t, a.SameProcess(b))
	assert.True(t, a.SameProcess(a))
	assert.True(t, a.HasDevice("ibv"))
	assert.False(t, b.HasDevice("ibv"))
	// Unknown identities never match, not even each other.
	var none PeerInfo
	assert.False(t, none.SameHost(none))
	assert.False(t, none.SameProcess(none))
	assert.False(t, a.SameHost(PeerInfo{Host: "boot/ns:2"}))
	assert.Equal(t, "host boot/ns:1, devices ibv", a.String())
	assert.Equal(t, "host unknown, no devices", none.String())
}
