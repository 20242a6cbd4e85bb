package netsel

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func pfx(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, x := range s {
		out = append(out, netip.MustParsePrefix(x))
	}
	return out
}

var ip = netip.MustParseAddr

// A typical cluster node: loopback, a docker bridge, ethernet with v4 and
// v6 (global and link-local), an IPoIB interface, and a down interface.
var node = Static{
	Ifaces: []Interface{
		{Name: "lo", Index: 1, Up: true, Loopback: true, Addrs: pfx("127.0.0.1/8", "::1/128")},
		{Name: "docker0", Index: 2, Up: true, Addrs: pfx("172.17.0.1/16")},
		{Name: "eth0", Index: 3, Up: true, Addrs: pfx("10.1.2.3/24", "fe80::1/64", "2001:db8::3/64")},
		{Name: "ib0", Index: 4, Up: true, Addrs: pfx("192.168.50.3/24")},
		{Name: "eth1", Index: 5, Up: false, Addrs: pfx("10.9.9.9/24")},
		{Name: "eth2", Index: 6, Up: true, Addrs: pfx("169.254.3.4/16")},
	},
	Routes: map[netip.Addr]netip.Addr{
		ip("192.168.50.1"): ip("192.168.50.3"),
		ip("10.1.2.1"):     ip("10.1.2.3"),
		ip("127.0.0.1"):    ip("127.0.0.1"),
		ip("8.8.8.8"):      ip("10.1.2.3"),
	},
}

func addrs(cs []Candidate) []string {
	out := []string{}
	for _, c := range cs {
		out = append(out, c.Interface+" "+c.Addr.String())
	}
	return out
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"eth0,,ib0", `item 2 is empty`},
		{"eth0,", `item 2 is empty`},
		{"^", `'^' excludes nothing`},
		{"eth0,^lo", `item 2 ("^lo"): '^' is allowed only at the start`},
		{"10.0.0.0/33", `item 1 ("10.0.0.0/33") is not a valid CIDR prefix`},
		{"10.0.0/8", `not a valid CIDR prefix`},
		{"eth[0", `not a valid name pattern`},
		{"averyveryverylongname0", `longer than an interface name`},
		{"eth 0", `contains a space`},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			_, err := Parse(tc.spec)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrBadSelector)
			assert.Contains(t, err.Error(), tc.want)
			assert.Contains(t, err.Error(), `"`+tc.spec+`"`)
		})
	}
}

func TestSelect(t *testing.T) {
	for _, tc := range []struct {
		spec string
		want []string
	}{
		// Empty: everything up and usable, real v4 first, then v6, bridges,
		// link-local v4, loopback. eth1 is down; fe80:: is skipped.
		{"", []string{"eth0 10.1.2.3", "ib0 192.168.50.3", "eth0 2001:db8::3", "docker0 172.17.0.1", "eth2 169.254.3.4", "lo 127.0.0.1", "lo ::1"}},
		{"eth0,ib0", []string{"eth0 10.1.2.3", "ib0 192.168.50.3", "eth0 2001:db8::3"}},
		{" ib0 , eth0 ", []string{"eth0 10.1.2.3", "ib0 192.168.50.3", "eth0 2001:db8::3"}},
		{"eth*", []string{"eth0 10.1.2.3", "eth0 2001:db8::3", "eth2 169.254.3.4"}},
		{"^docker0,lo", []string{"eth0 10.1.2.3", "ib0 192.168.50.3", "eth0 2001:db8::3", "eth2 169.254.3.4"}},
		{"^docker*,lo,eth2", []string{"eth0 10.1.2.3", "ib0 192.168.50.3", "eth0 2001:db8::3"}},
		{"192.168.0.0/16", []string{"ib0 192.168.50.3"}},
		{"10.0.0.0/8", []string{"eth0 10.1.2.3"}}, // eth1's 10.9.9.9 is down
		{"2001:db8::/32", []string{"eth0 2001:db8::3"}},
		{"10.1.2.3", []string{"eth0 10.1.2.3"}},
		{"ib0,10.0.0.0/8", []string{"eth0 10.1.2.3", "ib0 192.168.50.3"}},
		{"^10.0.0.0/8,lo", []string{"ib0 192.168.50.3", "eth0 2001:db8::3", "docker0 172.17.0.1", "eth2 169.254.3.4"}},
		{"lo", []string{"lo 127.0.0.1", "lo ::1"}},
		{"nosuch0", []string{}},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			sel, err := Parse(tc.spec)
			require.NoError(t, err)
			assert.Equal(t, tc.spec, sel.String())
			got, err := Select(node, sel)
			require.NoError(t, err)
			assert.Equal(t, tc.want, addrs(got))
		})
	}
}

func TestAdvertise(t *testing.T) {
	for _, tc := range []struct {
		name    string
		spec    string
		multi   bool
		peer    string
		family  int
		host    Host
		want    string
		wantErr string
	}{
		{name: "single host prefers loopback", want: "127.0.0.1"},
		{name: "single host loopback even with a peer route", peer: "192.168.50.1", want: "127.0.0.1"},
		{name: "single host v6 loopback", family: 6, want: "::1"},
		{name: "multi host first real v4", multi: true, want: "10.1.2.3"},
		{name: "multi host follows the route to the rendezvous", multi: true, peer: "192.168.50.1", want: "192.168.50.3"},
		{name: "route outside the selector is ignored", spec: "eth0", multi: true, peer: "192.168.50.1", want: "10.1.2.3"},
		{name: "route to loopback rendezvous is no use across hosts", multi: true, peer: "127.0.0.1", want: "10.1.2.3"},
		{name: "unroutable peer falls back", multi: true, peer: "203.0.113.9", want: "10.1.2.3"},
		{name: "selector on a single host is honoured", spec: "ib0", want: "192.168.50.3"},
		{name: "exclusion", spec: "^eth0,lo", multi: true, want: "192.168.50.3"},
		{name: "cidr", spec: "192.168.0.0/16", multi: true, want: "192.168.50.3"},
		{name: "ipv6 only", multi: true, family: 6, want: "2001:db8::3"},
		{name: "selector naming only loopback across hosts", spec: "lo", multi: true,
			wantErr: `no suitable address matches selector "lo" that other hosts can reach (the job spans hosts, so loopback is out); interfaces: lo 127.0.0.1/8 [loopback] ::1/128 [loopback]; docker0 172.17.0.1/16 [not selected]`},
		{name: "down interface named", spec: "eth1", multi: true, wantErr: "eth1 [down]"},
		{name: "only loopback on the machine", multi: true,
			host:    Static{Ifaces: []Interface{{Name: "lo", Index: 1, Up: true, Loopback: true, Addrs: pfx("127.0.0.1/8")}}},
			wantErr: "interfaces: lo 127.0.0.1/8 [loopback]"},
		{name: "only loopback is fine on one host", want: "127.0.0.1",
			host: Static{Ifaces: []Interface{{Name: "lo", Index: 1, Up: true, Loopback: true, Addrs: pfx("127.0.0.1/8")}}}},
		{name: "no interfaces", host: Static{}, wantErr: "interfaces: none"},
		{name: "bad family", family: 5, wantErr: "address family 5"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sel, err := Parse(tc.spec)
			require.NoError(t, err)
			h := tc.host
			if h == nil {
				h = node
			}
			o := AdvertiseOptions{Selector: sel, MultiHost: tc.multi, Family: tc.family}
			if tc.peer != "" {
				o.Peer = ip(tc.peer)
			}
			got, err := Advertise(h, o)
			if tc.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.wantErr)
				if tc.family != 5 {
					assert.ErrorIs(t, err, ErrNoAddress)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got.String())
		})
	}
}

func TestMatchZeroSelector(t *testing.T) {
	var s Selector
	assert.True(t, s.IsZero())
	assert.True(t, s.Match("anything", ip("1.2.3.4")))
	// v4-mapped v6 addresses match v4 prefixes.
	s, err := Parse("10.0.0.0/8")
	require.NoError(t, err)
	assert.True(t, s.Match("x", ip("::ffff:10.1.1.1")))
	assert.False(t, s.Match("x", ip("11.1.1.1")))
}

type failingHost struct{}

func (failingHost) Interfaces() ([]Interface, error) { return nil, errors.New("boom") }
func (failingHost) RouteTo(netip.Addr) (netip.Addr, error) {
	return netip.Addr{}, errors.New("boom")
}

func TestHostErrorPropagates(t *testing.T) {
	_, err := Advertise(failingHost{}, AdvertiseOptions{})
	require.ErrorContains(t, err, "boom")
}

// The real machine: loopback exists, RouteTo finds it, and a single-host
// advertisement is loopback.
func TestSystem(t *testing.T) {
	ifs, err := System.Interfaces()
	require.NoError(t, err)
	var sawLo bool
	for _, i := range ifs {
		if i.Loopback && i.Up {
			sawLo = true
		}
	}
	if !sawLo {
		t.Skip("no loopback interface up")
	}
	a, err := System.RouteTo(ip("127.0.0.1"))
	require.NoError(t, err)
	assert.True(t, a.IsLoopback(), a.String())
	adv, err := Advertise(System, AdvertiseOptions{Peer: ip("127.0.0.1")})
	require.NoError(t, err)
	assert.True(t, adv.IsLoopback())
	// Listening on the advertised address works.
	ln, err := net.Listen("tcp", netip.AddrPortFrom(adv, 0).String())
	require.NoError(t, err)
	ln.Close()
}

func TestPeerAddrAndLocalAddrFor(t *testing.T) {
	ctx := context.Background()
	for in, want := range map[string]string{
		"10.1.2.1:29500":      "10.1.2.1",
		"[::ffff:10.1.2.1]:1": "10.1.2.1",
		"[2001:db8::1]:5":     "2001:db8::1",
		"192.168.50.1":        "192.168.50.1",
		"localhost:29500":     "", // resolved: loopback, v4 or v6
	} {
		a, err := PeerAddr(ctx, in)
		require.NoError(t, err, in)
		if want == "" {
			assert.True(t, a.IsLoopback(), "%s → %s", in, a)
			continue
		}
		assert.Equal(t, want, a.String(), in)
	}
	_, err := PeerAddr(ctx, ":29500")
	require.ErrorContains(t, err, `no host in address ":29500"`)

	a, err := LocalAddrFor(ctx, node, "192.168.50.1:29500")
	require.NoError(t, err)
	assert.Equal(t, "192.168.50.3", a.String())
	_, err = LocalAddrFor(ctx, node, "203.0.113.1:1")
	require.ErrorContains(t, err, "no route to 203.0.113.1")
	a, err = LocalAddrFor(ctx, System, "127.0.0.1:1")
	require.NoError(t, err)
	assert.True(t, a.IsLoopback())
}
