package tcp

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// setCongestion sets the congestion control of TCP socket fd.
func setCongestion(fd uintptr, name string) error {
	return unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, name)
}

// checkCongestion reports whether the kernel lets this process give its
// TCP sockets congestion control name, trying it on a socket of its own;
// a name that keeps the system's is always fine.
func checkCongestion(name string) error {
	if keepsSystem(name) {
		return nil
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		if fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0); err != nil {
			return fmt.Errorf("no socket to try it on: %v", err)
		}
	}
	defer unix.Close(fd)
	if err := setCongestion(uintptr(fd), name); err != nil {
		return fmt.Errorf("the kernel refuses it (%v): net.ipv4.tcp_available_congestion_control lists what it has, tcp_allowed_congestion_control what it allows without privileges", err)
	}
	return nil
}

// systemCongestionName is the system's default congestion control, ""
// if it cannot be read.
func systemCongestionName() string {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
