package tcp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSameHost: a connection stays within the host when it goes to a
// loopback address or to the address it comes from.
func TestSameHost(t *testing.T) {
	addr := func(s string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 1} }
	for _, tc := range []struct {
		local, remote string
		want          bool
	}{
		{"127.0.0.1", "127.0.0.1", true},
		{"127.0.0.1", "127.0.0.2", true},
		{"::1", "::1", true},
		{"10.1.2.3", "10.1.2.3", true},
		{"10.1.2.3", "10.1.2.4", false},
		{"198.18.200.1", "198.18.200.2", false},
	} {
		assert.Equal(t, tc.want, sameHost(addr(tc.local), addr(tc.remote)), "%s -> %s", tc.local, tc.remote)
	}
	assert.False(t, sameHost(&net.UnixAddr{Name: "a"}, &net.UnixAddr{Name: "a"}), "not TCP")
}

// TestCongestionFor: a connection within the host, or to a peer device on
// this kernel (another network namespace), gets LocalCongestion; one to
// another kernel, or to a peer that names none, gets Congestion.
func TestCongestionFor(t *testing.T) {
	addr := func(s string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(s), Port: 1} }
	tr := &transport{opts: Options{LocalCongestion: "reno", Congestion: "system"}, kernel: "k1"}
	for _, tc := range []struct {
		local, remote, kernel, want string
	}{
		{"127.0.0.1", "127.0.0.1", "", "reno"},
		{"10.0.0.1", "10.0.0.1", "k2", "reno"},
		{"10.0.0.1", "10.0.0.2", "k1", "reno"},
		{"10.0.0.1", "10.0.0.2", "k2", "system"},
		{"10.0.0.1", "10.0.0.2", "", "system"},
	} {
		assert.Equal(t, tc.want, tr.congestionFor(addr(tc.local), addr(tc.remote), tc.kernel), "%+v", tc)
	}
	tr.kernel = "" // this kernel unknown: no peer matches it
	assert.Equal(t, "system", tr.congestionFor(addr("10.0.0.1"), addr("10.0.0.2"), ""))
}

// TestAddrPayload: the address payload carries the device, its kernel and
// its listener; version 1 (no kernel) still decodes.
func TestAddrPayload(t *testing.T) {
	for _, a := range []addrPayload{
		{dev: 7, kernel: "0d5e-boot", host: "10.0.0.1:4000"},
		{dev: 1 << 60, host: "[::1]:1"},
	} {
		got, err := decodeAddrPayload(a.encode())
		require.NoError(t, err)
		assert.Equal(t, a, got)
	}
	v1 := append([]byte{1, 0, 0, 0, 0, 0, 0, 0, 9}, "h:1"...)
	got, err := decodeAddrPayload(v1)
	require.NoError(t, err)
	assert.Equal(t, addrPayload{dev: 9, host: "h:1"}, got)
	for _, b := range [][]byte{nil, {2, 0, 0, 0, 0, 0, 0, 0, 0}, {2, 0, 0, 0, 0, 0, 0, 0, 0, 5, 'a'}, {4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 'h'}} {
		_, err := decodeAddrPayload(b)
		assert.Error(t, err, "%v", b)
	}
}
