package comm

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestNetOver: a measured figure replaces the transport's estimate only
// when it is at least netSlower times slower; each figure on its own.
func TestNetOver(t *testing.T) {
	const us = time.Microsecond
	est := func(lat time.Duration, bw float64) [2]any { return [2]any{lat, bw} }
	for _, tc := range []struct {
		name string
		net  netLink
		want [2]any
	}{
		{"nothing measured", netLink{}, est(20*us, 1e9)},
		{"faster", netLink{lat: 10 * us, bw: 5e9, ok: true}, est(20*us, 1e9)},
		{"slower, within the noise", netLink{lat: 33 * us, bw: 0.6e9, ok: true}, est(20*us, 1e9)},
		{"latency twice", netLink{lat: 40 * us, bw: 1e9, ok: true}, est(40*us, 1e9)},
		{"bandwidth a half", netLink{lat: 20 * us, bw: 0.5e9, ok: true}, est(20*us, 0.5e9)},
		{"a slow network", netLink{lat: 35 * us, bw: 0.12e9, ok: true}, est(20*us, 0.12e9)},
		{"a far one", netLink{lat: 900 * us, bw: 0.8e9, ok: true}, est(900*us, 1e9)},
	} {
		lat, bw := tc.net.over(20*us, 1e9)
		assert.Equal(t, tc.want, est(lat, bw), tc.name)
	}
	lat, bw := netLink{lat: 30 * us, bw: 2e9, ok: true}.over(20*us, 0)
	assert.Equal(t, est(20*us, 2e9), est(lat, bw), "a transport with no bandwidth figure takes the measured one")
}
