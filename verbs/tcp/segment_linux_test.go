package tcp

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// TestFreshConnectionKnowsFullSegments: once a QP pair is connected, the
// kernel of each end already sizes "one full segment" (tcpi_rcv_mss, by
// which it acknowledges at once when more than that is unacknowledged) as
// the path's, not the 536 bytes a new connection starts from: the
// handshake's pads (appendPad) taught it. With 536, two small frames in a
// row (a 384-byte message and a barrier's) each drew an extra ACK packet.
func TestFreshConnectionKnowsFullSegments(t *testing.T) {
	a, b := connected(t, verbs.DefaultConnectOptions())
	requireWorks(t, a, b)
	for name, q := range map[string]verbs.QP{"dialer or acceptor a": a.qp, "b": b.qp} {
		l := attachedLink(t, q)
		var rcvMSS, mss int
		require.NoError(t, l.ControlFD(func(fd int) {
			ti, err := unix.GetsockoptTCPInfo(fd, unix.IPPROTO_TCP, unix.TCP_INFO)
			require.NoError(t, err)
			rcvMSS = int(ti.Rcv_mss)
			mss, err = unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_MAXSEG)
			require.NoError(t, err)
		}))
		// Loopback's segments are tens of KiB; the pad is one of them, up to
		// maxPad.
		require.Greater(t, rcvMSS, 4<<10, "%s: receiver's full-segment estimate (send MSS %d)", name, mss)
	}
}
