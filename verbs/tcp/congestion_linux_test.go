package tcp

import (
	"context"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// socketCongestion is the congestion control of TCP socket fd.
func socketCongestion(fd uintptr) (string, error) {
	return unix.GetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION)
}

// systemDefaultCongestion is the congestion control a new TCP socket gets.
func systemDefaultCongestion(t *testing.T) string {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	cc, err := socketCongestion(uintptr(fd))
	require.NoError(t, err)
	return cc
}

// TestLocalCongestion: both ends of a connection within the host run the
// congestion control of Options.LocalCongestion: reno by default, the
// system's with "system".
func TestLocalCongestion(t *testing.T) {
	for _, tc := range []struct{ opt, want string }{
		{"", "reno"},
		{"reno", "reno"},
		{"system", systemDefaultCongestion(t)},
	} {
		t.Run("opt="+tc.opt, func(t *testing.T) {
			o := testOptions()
			o.LocalCongestion = tc.opt
			a, b := newSideOn(t, openDev(t, o)), newSideOn(t, openDev(t, o))
			connectPair(t, a, b, verbs.DefaultConnectOptions())
			requireWorks(t, a, b)
			for _, s := range []*side{a, b} {
				var got string
				var gerr error
				require.NoError(t, attachedLink(t, s.qp).ControlFD(func(fd int) { got, gerr = socketCongestion(uintptr(fd)) }))
				require.NoError(t, gerr)
				require.Equal(t, tc.want, got)
			}
		})
	}
}

// TestCongestionRefused: a congestion control the kernel does not offer
// fails Open, naming the option and the name.
func TestCongestionRefused(t *testing.T) {
	for _, field := range []string{"LocalCongestion", "Congestion"} {
		o := testOptions()
		if field == "Congestion" {
			o.Congestion = "no-such-cc"
		} else {
			o.LocalCongestion = "no-such-cc"
		}
		dev, err := Open(context.Background(), o)
		if dev != nil {
			_ = dev.Close()
		}
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		require.ErrorContains(t, err, "Options."+field+` "no-such-cc"`)
	}
}

// TestAddressNamesKernel: a QP's address carries the boot id of the
// kernel its device runs on, which its peer compares with its own
// (congestionFor).
func TestAddressNamesKernel(t *testing.T) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Skip("no boot id here")
	}
	a := newSide(t)
	qa, err := verbs.DecodeAddress(a.qp.Address())
	require.NoError(t, err)
	ap, err := decodeAddrPayload(qa.Payload)
	require.NoError(t, err)
	require.Equal(t, strings.TrimSpace(string(boot)), ap.kernel)
}

// TestConnectionsStartWithTheirCongestion: the listener, whose accepted
// connections inherit it, and a socket about to dial a device on this
// kernel already have LocalCongestion before any connection exists, so
// that no connection switches away from the system's (a switch away from
// BBR leaves its pacing on); a socket dialing another kernel keeps the
// system's.
func TestConnectionsStartWithTheirCongestion(t *testing.T) {
	if systemDefaultCongestion(t) == "reno" {
		t.Skip("the system's default is reno: nothing to tell apart")
	}
	a, _ := connected(t, verbs.DefaultConnectOptions())
	tr := attachedLink(t, a.qp).t
	var lcc string
	rc, err := tr.ln.(*net.TCPListener).SyscallConn()
	require.NoError(t, err)
	require.NoError(t, rc.Control(func(fd uintptr) { lcc, _ = socketCongestion(fd) }))
	require.Equal(t, "reno", lcc, "listener")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	for _, tc := range []struct {
		ra   addrPayload
		want string
	}{
		{addrPayload{kernel: tr.kernel, host: "10.9.9.9:1"}, "reno"},
		{addrPayload{kernel: "another", host: "127.0.0.1:1"}, "reno"},
		{addrPayload{kernel: "another", host: "10.9.9.9:1"}, systemDefaultCongestion(t)},
	} {
		var got string
		d := net.Dialer{Control: func(network, address string, rc syscall.RawConn) error {
			require.NoError(t, tr.dialControl(tc.ra)(network, address, rc))
			return rc.Control(func(fd uintptr) { got, _ = socketCongestion(fd) })
		}}
		c, err := d.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		_ = c.Close()
		require.Equal(t, tc.want, got, "%+v", tc.ra)
	}
}
