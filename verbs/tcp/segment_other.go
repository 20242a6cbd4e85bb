//go:build !linux

package tcp

import "net"

// segmentSize is 0 here: the pad (appendPad) is empty.
func segmentSize(net.Conn) int { return 0 }
