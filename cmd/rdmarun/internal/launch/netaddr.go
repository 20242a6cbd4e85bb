package launch

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/rdmago/rdmago/internal/netsel"
)

// selectAddress picks the address the rendezvous listens on and hands to
// ranks when some run on other hosts. spec is --iface in netsel syntax.
// Without it, loopback is never chosen, and the address that routes to
// the first remote host is preferred. With it, what it selects is trusted,
// loopback included (ssh to this machine under another name, in tests).
func selectAddress(spec string, remoteHosts []string) (string, error) {
	sel, err := netsel.Parse(spec)
	if err != nil {
		return "", usagef("--iface %q: %v", spec, err)
	}
	o := netsel.AdvertiseOptions{Selector: sel, MultiHost: sel.IsZero()}
	if sel.IsZero() && len(remoteHosts) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", remoteHosts[0])
		cancel()
		if err == nil && len(ips) > 0 {
			o.Peer = ips[0]
		}
	}
	addr, err := netsel.Advertise(netsel.System, o)
	if err != nil {
		return "", err
	}
	return netip.AddrPortFrom(addr, 0).String(), nil
}
