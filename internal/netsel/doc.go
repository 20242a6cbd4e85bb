// Package netsel chooses the network interface and address a process
// listens on and advertises to its peers. The bootstrap rendezvous, the
// tcp verbs provider and p2p all use it, so one selector syntax means the
// same thing everywhere:
//
//	sel, err := netsel.Parse("^docker0,lo") // or "eth0,ib0", "10.0.0.0/8", "eth*,192.168.1.0/24"
//	if err != nil { ... }                   // netsel: bad interface selector "...": item 2 ...
//	peer, err := netsel.PeerAddr(ctx, "node0:29500")
//	addr, err := netsel.Advertise(netsel.System, netsel.AdvertiseOptions{
//		Selector:  sel,
//		MultiHost: true, // the job spans hosts: never loopback
//		Peer:      peer, // prefer the address that routes to the rendezvous
//	})
//	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
//
// # Selector syntax
//
// A comma-separated list of items. An item is an interface name ("eth0"),
// a shell pattern on names ("eth*", "ib?"), a CIDR prefix ("10.0.0.0/8",
// "fd00::/8") or a single address ("192.168.1.7"). An address is selected
// when its interface name matches a name item or the address lies in a
// prefix item. A leading '^' turns the whole list into exclusions
// ("^docker0,lo": every address except those on docker0 and lo). The empty
// selector selects everything. Items are trimmed of spaces; an empty item,
// a malformed prefix or pattern, or a '^' anywhere but first is an error.
//
// Interfaces that are down and IPv6 link-local addresses (which need a zone
// to be reachable) are never selected.
package netsel
