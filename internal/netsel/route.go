package netsel

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// PeerAddr resolves a rendezvous address ("host:port", "[v6]:port", or a
// bare host or IP) to the IP it names, for AdvertiseOptions.Peer. A name
// is looked up with the system resolver; the first address wins.
func PeerAddr(ctx context.Context, addr string) (netip.Addr, error) {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return a.Unmap(), nil
	}
	if host == "" {
		return netip.Addr{}, fmt.Errorf("netsel: no host in address %q", addr)
	}
	ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netsel: resolve %q: %w", host, err)
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("netsel: %q resolves to no address", host)
	}
	return ips[0].Unmap(), nil
}

// LocalAddrFor returns the local address h routes from toward the
// rendezvous address addr (see PeerAddr): the sensible default to
// advertise when nothing is selected, since peers that reach the
// rendezvous can usually reach this host the same way.
func LocalAddrFor(ctx context.Context, h Host, addr string) (netip.Addr, error) {
	p, err := PeerAddr(ctx, addr)
	if err != nil {
		return netip.Addr{}, err
	}
	return h.RouteTo(p)
}
