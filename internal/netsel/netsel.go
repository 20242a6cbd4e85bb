package netsel

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"path"
	"slices"
	"strings"
)

// ErrBadSelector is wrapped by every Parse error.
var ErrBadSelector = errors.New("bad interface selector")

// ErrNoAddress is wrapped by Advertise when nothing suitable is found.
var ErrNoAddress = errors.New("no suitable address")

// Selector is a parsed selector spec (see the package doc). The zero value
// selects everything.
type Selector struct {
	spec     string
	exclude  bool
	names    []string // exact names or shell patterns
	prefixes []netip.Prefix
}

// Parse parses a selector spec such as "eth0,ib0", "^docker0,lo" or
// "10.0.0.0/8,eth1".
func Parse(spec string) (Selector, error) {
	s := Selector{spec: spec}
	body := strings.TrimSpace(spec)
	if body == "" {
		return Selector{}, nil
	}
	bad := func(format string, args ...any) (Selector, error) {
		return Selector{}, fmt.Errorf("netsel: %w %q: %s", ErrBadSelector, spec, fmt.Sprintf(format, args...))
	}
	if strings.HasPrefix(body, "^") {
		s.exclude = true
		body = strings.TrimSpace(body[1:])
		if body == "" {
			return bad("'^' excludes nothing")
		}
	}
	for i, item := range strings.Split(body, ",") {
		item = strings.TrimSpace(item)
		n := i + 1
		switch {
		case item == "":
			return bad("item %d is empty", n)
		case strings.Contains(item, "^"):
			return bad("item %d (%q): '^' is allowed only at the start of the whole list", n, item)
		case strings.Contains(item, "/"):
			p, err := netip.ParsePrefix(item)
			if err != nil {
				return bad("item %d (%q) is not a valid CIDR prefix: %v", n, item, err)
			}
			s.prefixes = append(s.prefixes, p.Masked())
		default:
			if a, err := netip.ParseAddr(item); err == nil {
				s.prefixes = append(s.prefixes, netip.PrefixFrom(a, a.BitLen()))
				continue
			}
			if strings.ContainsAny(item, " \t") {
				return bad("item %d (%q) contains a space", n, item)
			}
			if len(item) > 15 && !strings.ContainsAny(item, "*?[") {
				return bad("item %d (%q) is longer than an interface name can be (15 bytes)", n, item)
			}
			if _, err := path.Match(item, ""); err != nil {
				return bad("item %d (%q) is not a valid name pattern: %v", n, item, err)
			}
			s.names = append(s.names, item)
		}
	}
	return s, nil
}

// String returns the spec the selector was parsed from.
func (s Selector) String() string { return s.spec }

// IsZero reports whether s selects everything.
func (s Selector) IsZero() bool { return len(s.names) == 0 && len(s.prefixes) == 0 }

// Match reports whether the address addr on interface name is selected.
func (s Selector) Match(name string, addr netip.Addr) bool {
	if s.IsZero() {
		return true
	}
	hit := false
	for _, p := range s.names {
		if ok, _ := path.Match(p, name); ok {
			hit = true
			break
		}
	}
	if !hit {
		a := addr.Unmap()
		for _, p := range s.prefixes {
			if p.Contains(a) {
				hit = true
				break
			}
		}
	}
	return hit != s.exclude
}

// Interface is one network interface as netsel sees it.
type Interface struct {
	Name     string
	Index    int
	Up       bool
	Loopback bool
	// Addrs are the interface's addresses with their network prefixes
	// ("10.1.2.3/24").
	Addrs []netip.Prefix
}

// Host is the machine's view of its network: its interfaces and its
// routing. System is the real one; tests use Static.
type Host interface {
	Interfaces() ([]Interface, error)
	// RouteTo returns the local address the kernel would use as the source
	// of packets to dst.
	RouteTo(dst netip.Addr) (netip.Addr, error)
}

// System is the Host this process runs on.
var System Host = systemHost{}

type systemHost struct{}

func (systemHost) Interfaces() ([]Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, fmt.Errorf("netsel: list interfaces: %w", err)
	}
	out := make([]Interface, 0, len(ifs))
	for _, ifc := range ifs {
		it := Interface{Name: ifc.Name, Index: ifc.Index,
			Up: ifc.Flags&net.FlagUp != 0, Loopback: ifc.Flags&net.FlagLoopback != 0}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("netsel: addresses of %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			ones, _ := ipn.Mask.Size()
			it.Addrs = append(it.Addrs, netip.PrefixFrom(ip.Unmap(), ones))
		}
		out = append(out, it)
	}
	return out, nil
}

// RouteTo uses the UDP "connect" trick: connecting a UDP socket sends
// nothing but makes the kernel pick the route and the source address.
func (systemHost) RouteTo(dst netip.Addr) (netip.Addr, error) {
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(dst, 9)))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("netsel: no route to %s: %w", dst, err)
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).AddrPort().Addr().Unmap(), nil
}

// Static is a Host with a fixed interface table, for tests.
type Static struct {
	Ifaces []Interface
	// Routes maps a destination to the source address RouteTo returns;
	// destinations not listed have no route.
	Routes map[netip.Addr]netip.Addr
}

// Interfaces returns s.Ifaces.
func (s Static) Interfaces() ([]Interface, error) { return s.Ifaces, nil }

// RouteTo looks dst up in s.Routes.
func (s Static) RouteTo(dst netip.Addr) (netip.Addr, error) {
	if a, ok := s.Routes[dst]; ok {
		return a, nil
	}
	return netip.Addr{}, fmt.Errorf("netsel: no route to %s", dst)
}

// Candidate is a selected address.
type Candidate struct {
	Interface string
	Addr      netip.Addr
	Loopback  bool
}

func (c Candidate) String() string { return c.Interface + " " + c.Addr.String() }

// Preference classes, best first: the order in which Select lists
// addresses and Advertise picks one when nothing else decides.
const (
	classIPv4       = iota // a real interface's IPv4 address
	classIPv6              // its global / unique-local IPv6 address
	classBridge            // container and VM bridges (docker0, virbr0, br-…): usually not reachable from other hosts
	classLinkLocal4        // 169.254/16
	classLoopback
)

// bridgePrefixes name interfaces that are rarely the way to other hosts.
var bridgePrefixes = []string{"docker", "virbr", "br-", "cni", "podman", "lxcbr", "lxdbr"}

func class(ifc Interface, a netip.Addr) int {
	switch {
	case ifc.Loopback || a.IsLoopback():
		return classLoopback
	case a.Is4() && a.IsLinkLocalUnicast():
		return classLinkLocal4
	}
	for _, p := range bridgePrefixes {
		if strings.HasPrefix(ifc.Name, p) {
			return classBridge
		}
	}
	if a.Is4() {
		return classIPv4
	}
	return classIPv6
}

// usable says whether an address could ever be advertised.
func usable(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !(a.Is6() && a.IsLinkLocalUnicast())
}

// Select lists the addresses of h's interfaces that are up, usable and
// selected by sel, best first (see the preference classes), then by
// interface index.
func Select(h Host, sel Selector) ([]Candidate, error) {
	ifs, err := h.Interfaces()
	if err != nil {
		return nil, err
	}
	type ranked struct {
		Candidate
		class, index, order int
	}
	var rs []ranked
	for _, ifc := range ifs {
		if !ifc.Up {
			continue
		}
		for _, p := range ifc.Addrs {
			a := p.Addr().Unmap()
			if !usable(a) || !sel.Match(ifc.Name, a) {
				continue
			}
			rs = append(rs, ranked{
				Candidate: Candidate{Interface: ifc.Name, Addr: a, Loopback: ifc.Loopback || a.IsLoopback()},
				class:     class(ifc, a), index: ifc.Index, order: len(rs),
			})
		}
	}
	slices.SortStableFunc(rs, func(x, y ranked) int {
		return cmp.Or(cmp.Compare(x.class, y.class), cmp.Compare(x.index, y.index), cmp.Compare(x.order, y.order))
	})
	out := make([]Candidate, len(rs))
	for i, r := range rs {
		out[i] = r.Candidate
	}
	return out, nil
}

// AdvertiseOptions say what Advertise must respect.
type AdvertiseOptions struct {
	// Selector restricts the interfaces and addresses (zero: all).
	Selector Selector
	// MultiHost says the job spans hosts: a loopback address is never
	// chosen. On a single host, loopback is preferred when the selector is
	// empty: it always works and keeps the traffic off the network.
	MultiHost bool
	// Peer, when valid, is an address the peers are known to be reached
	// by (the rendezvous server's): the local address the kernel routes
	// there from is preferred, when it is selected.
	Peer netip.Addr
	// Family restricts the result: 4 or 6; 0 means either.
	Family int
}

// Advertise picks the address this process tells its peers to reach it on.
// The error, wrapping ErrNoAddress, describes every interface and why it
// was passed over.
func Advertise(h Host, o AdvertiseOptions) (netip.Addr, error) {
	if o.Family != 0 && o.Family != 4 && o.Family != 6 {
		return netip.Addr{}, fmt.Errorf("netsel: address family %d: want 4, 6 or 0", o.Family)
	}
	cands, err := Select(h, o.Selector)
	if err != nil {
		return netip.Addr{}, err
	}
	cands = slices.DeleteFunc(cands, func(c Candidate) bool {
		return (o.MultiHost && c.Loopback) || (o.Family == 4 && !c.Addr.Is4()) || (o.Family == 6 && c.Addr.Is4())
	})
	if len(cands) == 0 {
		return netip.Addr{}, noAddress(h, o)
	}
	if !o.MultiHost && o.Selector.IsZero() {
		for _, c := range cands {
			if c.Loopback {
				return c.Addr, nil
			}
		}
	}
	if o.Peer.IsValid() {
		if local, err := h.RouteTo(o.Peer.Unmap()); err == nil {
			for _, c := range cands {
				if c.Addr == local {
					return c.Addr, nil
				}
			}
		}
	}
	return cands[0].Addr, nil
}

func noAddress(h Host, o AdvertiseOptions) error {
	var b strings.Builder
	fmt.Fprintf(&b, "netsel: %v", ErrNoAddress)
	if !o.Selector.IsZero() {
		fmt.Fprintf(&b, " matches selector %q", o.Selector.String())
	}
	if o.MultiHost {
		b.WriteString(" that other hosts can reach (the job spans hosts, so loopback is out)")
	}
	if o.Family != 0 {
		fmt.Fprintf(&b, " in IPv%d", o.Family)
	}
	ifs, err := h.Interfaces()
	if err == nil {
		b.WriteString("; interfaces:")
		if len(ifs) == 0 {
			b.WriteString(" none")
		}
		for _, ifc := range ifs {
			fmt.Fprintf(&b, " %s", ifc.Name)
			if !ifc.Up {
				b.WriteString(" [down]")
				continue
			}
			if len(ifc.Addrs) == 0 {
				b.WriteString(" [no address]")
			}
			for _, p := range ifc.Addrs {
				a := p.Addr().Unmap()
				why := ""
				switch {
				case !usable(a):
					why = " [link-local/unusable]"
				case !o.Selector.Match(ifc.Name, a):
					why = " [not selected]"
				case o.MultiHost && (ifc.Loopback || a.IsLoopback()):
					why = " [loopback]"
				case o.Family == 4 && !a.Is4(), o.Family == 6 && a.Is4():
					why = " [other family]"
				}
				fmt.Fprintf(&b, " %s%s", p, why)
			}
			b.WriteString(";")
		}
	}
	return &noAddressError{msg: strings.TrimSuffix(b.String(), ";")}
}

type noAddressError struct{ msg string }

func (e *noAddressError) Error() string { return e.msg }
func (e *noAddressError) Unwrap() error { return ErrNoAddress }
