package verbs

import (
	"errors"
	"fmt"
)

// Sentinel causes. Errors returned by this package and its providers wrap one
// of these, so callers test them with errors.Is.
//
// verbs is the lowest layer, so the causes that several layers share are
// defined here once and the layers above alias them (p2p.ErrClosed,
// collectives.ErrClosed, bootstrap.ErrClosed and comm.ErrClosed are all
// ErrClosed): errors.Is matches any layer's name for a cause, with no map
// between them. docs/errors.md lists every sentinel and its aliases.
var (
	// ErrInvalidArgument is EINVAL: a malformed request, attribute or address.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrQueueFull is ENOMEM on post: the work queue has no free slot.
	ErrQueueFull = errors.New("work queue full")
	// ErrInvalidState: the QP's state does not allow the operation or transition.
	ErrInvalidState = errors.New("invalid queue pair state")
	// ErrBadKey: an lkey that names no registered region of this PD, or an
	// address range outside it.
	ErrBadKey = errors.New("bad memory key or range")
	// ErrClosed: the object (or its device) was closed.
	ErrClosed = errors.New("closed")
	// ErrUnsupported: the provider or memory does not support the operation.
	ErrUnsupported = errors.New("not supported")
	// ErrUnavailable: the provider is not built in or the system lacks what it needs.
	ErrUnavailable = errors.New("provider unavailable")
	// ErrAuth: a peer failed to prove knowledge of the job secret.
	ErrAuth = errors.New("authentication failed")
	// ErrInUse: the object still has dependents (an MR or QP on a PD being closed).
	ErrInUse = errors.New("resource in use")
	// ErrProtocol: a peer sent a frame that cannot be parsed (a provider's
	// wire, p2p's headers, a collective's header, the rendezvous's frames).
	ErrProtocol = errors.New("protocol error")
	// ErrDisconnected: a provider's link was dropped on purpose.
	ErrDisconnected = errors.New("link disconnected")
	// ErrMismatch: two sides that must agree do not (ranks calling a
	// collective with different arguments, ranks of one job with different
	// versions or transports). Used by the layers above; no verbs call
	// returns it.
	ErrMismatch = errors.New("ranks disagree")
)

// Error carries the context of a failed verbs call.
type Error struct {
	Op       string // "PostSend", "Modify", "RegMR", ...
	Provider string // "tcp", "shm", "ibv", ...
	QPNum    uint32 // 0 when not about a queue pair
	Index    int    // with PostSend / PostRecv: index of the first request not posted; else -1
	Err      error
}

func (e *Error) Error() string {
	s := "verbs"
	if e.Provider != "" {
		s += "/" + e.Provider
	}
	s += ": " + e.Op
	if e.QPNum != 0 {
		s += fmt.Sprintf(" qp %#x", e.QPNum)
	}
	if e.Index >= 0 {
		s += fmt.Sprintf(" wr[%d]", e.Index)
	}
	return s + ": " + e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// StatusError is a work completion that failed.
type StatusError struct {
	Status    Status
	WRID      uint64
	QPNum     uint32
	VendorErr uint32
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("verbs: work request %d on qp %#x completed with %s", e.WRID, e.QPNum, e.Status)
}

// Is makes errors.Is(err, StatusRetryExcErr) and friends work.
func (e *StatusError) Is(target error) bool {
	if s, ok := target.(Status); ok {
		return s == e.Status
	}
	return false
}

// Error makes Status usable as an errors.Is target.
func (s Status) Error() string { return s.String() }
