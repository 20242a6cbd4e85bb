package tcp

import (
	"net"

	"golang.org/x/sys/unix"
)

// segmentSize is the payload of a full segment on c's path (TCP_MAXSEG),
// or 0 when it cannot tell.
func segmentSize(c net.Conn) int {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return 0
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return 0
	}
	n := 0
	_ = rc.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG); err == nil {
			n = max(v, 0)
		}
	})
	return n
}
