// Package hostid is rdmago's one notion of "the same host". Two processes
// are on one host when they run on one kernel (boot id) in one network
// namespace: then they can share memory (shm) and reach each other's
// loopback listeners. Host names play no part in that decision, since
// containers and network namespaces often share one; the name is kept
// only to show to people. The bootstrap (does the job span hosts, so that
// transports must advertise routable addresses?), p2p (which peers get
// shm) and comm (which ranks are local) all ask this package.
package hostid

import (
	"errors"
	"os"
	"strings"
)

// ErrUnavailable: this platform or process cannot tell its host identity.
var ErrUnavailable = errors.New("host identity unavailable")

// ID is this process's host identity, "<boot id>/netns:<dev>:<inode>". It
// fails (wrapping ErrUnavailable) where the kernel does not expose it.
func ID() (string, error) { return identity() }

// Kernel is the identity of the kernel this process runs on (its boot
// id), the first part of ID: processes in other network namespaces or
// containers of one machine share it. It fails (wrapping ErrUnavailable)
// where the kernel does not expose it.
func Kernel() (string, error) { return kernel() }

// Name is the host name to show for this process (os.Hostname), or
// "unknown" when it cannot be read.
func Name() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	return h
}

// Best is ID, or when that is unavailable an identity made from the host
// name, so that ranks can still be grouped; it never says that two
// processes share a host when ID would say they do not, except on such a
// platform.
func Best() string {
	if id, err := ID(); err == nil {
		return id
	}
	return Named(Name())
}

// Named is the identity of a host known only by its name: what a caller
// passes when it overrides the identity by name (tests that place ranks
// of one process on pretend hosts).
func Named(name string) string { return "name:" + name }

// Same reports whether two identities name one host; an empty identity
// (unknown) is never the same as any other.
func Same(a, b string) bool { return a != "" && a == b }

// SameKernel reports whether two identities (ID) name one kernel, whose
// CPUs their processes share even from other network namespaces or
// containers of the machine. An empty identity, or one made from a name
// (Named), shares no kernel with any other.
func SameKernel(a, b string) bool {
	ka, okA := kernelOf(a)
	kb, okB := kernelOf(b)
	return okA && okB && ka == kb
}

// kernelOf is the boot id part of an identity made by ID.
func kernelOf(id string) (string, bool) {
	k, _, ok := strings.Cut(id, netnsSep)
	return k, ok && k != ""
}

// netnsSep parts an ID's boot id from its network namespace.
const netnsSep = "/netns:"
