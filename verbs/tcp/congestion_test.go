package tcp

import (
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
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
