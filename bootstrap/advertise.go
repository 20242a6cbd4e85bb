package bootstrap

import (
	"net"
	"net/netip"

	"github.com/rdmago/rdmago/internal/netsel"
)

// AdvertiseAddr picks the address this rank listens on and advertises to
// its peers (a transport's listening socket, not the rendezvous). spec
// selects interfaces in the syntax every rdmago component shares:
// "eth0,ib0", "^docker0,lo", "10.0.0.0/8", empty for any. The choice is
// never loopback when the ranks are on more than one host (SpansHosts);
// on one host, loopback is preferred unless spec says otherwise. Among
// the rest, the address that routes to the rendezvous server wins, since
// that is the way this host reaches the others.
func (c *Client) AdvertiseAddr(spec string) (netip.Addr, error) {
	return c.advertiseAddr(netsel.System, spec)
}

func (c *Client) advertiseAddr(h netsel.Host, spec string) (netip.Addr, error) {
	sel, err := netsel.Parse(spec)
	if err != nil {
		return netip.Addr{}, &Error{Op: "advertise", Err: ErrInvalid, Detail: err.Error()}
	}
	o := netsel.AdvertiseOptions{Selector: sel, MultiHost: c.SpansHosts()}
	if t, ok := c.conn.RemoteAddr().(*net.TCPAddr); ok {
		o.Peer = t.AddrPort().Addr().Unmap()
	}
	a, err := netsel.Advertise(h, o)
	if err != nil {
		return netip.Addr{}, &Error{Op: "advertise", Err: err}
	}
	return a, nil
}
