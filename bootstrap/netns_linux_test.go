//go:build linux

package bootstrap

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/internal/netsel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// netnsPair makes two network namespaces joined by a veth pair,
// 198.18.77.1/24 in the first and .2 in the second: two "hosts" on one
// machine. It skips the test when that is not possible (not root, no ip).
func netnsPair(t *testing.T) (a, b string) {
	if os.Getuid() != 0 {
		t.Skip("needs root for network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command")
	}
	tag := fmt.Sprintf("%d", os.Getpid()%100000)
	a, b = "rdmago-bs-"+tag+"-a", "rdmago-bs-"+tag+"-b"
	va, vb := "bsv"+tag+"a", "bsv"+tag+"b"
	run := func(args ...string) {
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	t.Cleanup(func() {
		exec.Command("ip", "netns", "del", a).Run()
		exec.Command("ip", "netns", "del", b).Run()
	})
	run("netns", "add", a)
	run("netns", "add", b)
	run("link", "add", va, "type", "veth", "peer", "name", vb)
	run("link", "set", va, "netns", a)
	run("link", "set", vb, "netns", b)
	run("-n", a, "addr", "add", "198.18.77.1/24", "dev", va)
	run("-n", b, "addr", "add", "198.18.77.2/24", "dev", vb)
	for _, ns := range []string{a, b} {
		run("-n", ns, "link", "set", "lo", "up")
	}
	run("-n", a, "link", "set", va, "up")
	run("-n", b, "link", "set", vb, "up")
	return a, b
}

// inNetns runs f on an OS thread that has joined namespace ns; sockets f
// creates live there. The thread is discarded afterwards.
func inNetns(ns string, f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open("/var/run/netns/"+ns, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		errc <- f()
	}()
	return <-errc
}

// Two hosts: each rank picks a non-loopback address with netsel, the
// server in host a listens on its own, and the ranks exchange what they
// advertise through the rendezvous.
func TestTwoHostsInNetns(t *testing.T) {
	checkLeaks(t)
	nsA, nsB := netnsPair(t)
	ctx := testCtx(t)
	var srv *Server
	var advA, advB netip.Addr
	require.NoError(t, inNetns(nsA, func() (err error) {
		advA, err = netsel.Advertise(netsel.System, netsel.AdvertiseOptions{MultiHost: true})
		if err != nil {
			return err
		}
		srv, err = NewServer(ServerOptions{Listen: netip.AddrPortFrom(advA, 0).String(), Token: testToken, Size: 2})
		return err
	}))
	defer srv.Close()
	assert.Equal(t, "198.18.77.1", advA.String())
	_, port, _ := net.SplitHostPort(srv.Addr())

	require.NoError(t, inNetns(nsB, func() (err error) {
		// Loopback would be wrong across hosts; the route to the
		// rendezvous decides among the rest.
		advB, err = netsel.Advertise(netsel.System, netsel.AdvertiseOptions{
			MultiHost: true, Peer: netip.MustParseAddr("198.18.77.1")})
		if err != nil {
			return err
		}
		sel, _ := netsel.Parse("lo")
		_, err = netsel.Advertise(netsel.System, netsel.AdvertiseOptions{Selector: sel, MultiHost: true})
		if err == nil {
			return fmt.Errorf("selecting only lo across hosts should fail")
		}
		return nil
	}))
	assert.Equal(t, "198.18.77.2", advB.String())

	// Both ranks report one host name, as namespaces and containers often
	// do: the network namespace alone makes them two hosts.
	dial := func(ns string, rank int) (*Client, error) {
		var c *Client
		err := inNetns(ns, func() (err error) {
			c, err = Dial(ctx, ClientOptions{Addr: net.JoinHostPort("198.18.77.1", port), Token: testToken,
				Rank: rank, Size: 2, Hostname: "one-name"})
			return err
		})
		return c, err
	}
	cs := make([]*Client, 2)
	errs := each(2, func(r int) (err error) {
		ns := nsA
		if r == 1 {
			ns = nsB
		}
		cs[r], err = dial(ns, r)
		return err
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	defer cs[0].Close()
	defer cs[1].Close()
	assert.True(t, cs[0].SpansHosts(), "two network namespaces under one host name are two hosts")
	assert.Equal(t, "one-name", cs[0].Peers()[1].Host)
	assert.Equal(t, "198.18.77.2", cs[0].Peers()[1].Addr)
	outs := make([][][]byte, 2)
	errs = each(2, func(r int) (err error) {
		adv := []netip.Addr{advA, advB}[r]
		outs[r], err = Allgather(ctx, cs[r], "addr", []byte(adv.String()))
		return err
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, "198.18.77.1", string(outs[1][0]))
	// The client's own choice agrees, in each namespace.
	for r, ns := range []string{nsA, nsB} {
		require.NoError(t, inNetns(ns, func() error {
			a, err := cs[r].AdvertiseAddr("")
			if err == nil && a != []netip.Addr{advA, advB}[r] {
				err = fmt.Errorf("rank %d advertises %s", r, a)
			}
			return err
		}))
	}
	assert.Equal(t, "198.18.77.2", string(outs[0][1]))
}
