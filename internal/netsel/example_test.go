package netsel_test

import (
	"fmt"
	"net/netip"

	"github.com/rdmago/rdmago/internal/netsel"
)

func Example() {
	host := netsel.Static{Ifaces: []netsel.Interface{
		{Name: "lo", Index: 1, Up: true, Loopback: true, Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
		{Name: "docker0", Index: 2, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("172.17.0.1/16")}},
		{Name: "eth0", Index: 3, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("10.0.0.7/24")}},
	}}
	sel, err := netsel.Parse("^docker0,lo")
	if err != nil {
		panic(err)
	}
	addr, err := netsel.Advertise(host, netsel.AdvertiseOptions{Selector: sel, MultiHost: true})
	fmt.Println(addr, err)
	_, err = netsel.Parse("eth0,^lo")
	fmt.Println(err)
	// Output:
	// 10.0.0.7 <nil>
	// netsel: bad interface selector "eth0,^lo": item 2 ("^lo"): '^' is allowed only at the start of the whole list
}
