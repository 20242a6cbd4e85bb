package comm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/p2p"
)

// Sentinel causes, tested with errors.Is. Each is the value of the lowest
// layer that has the cause (ErrPeerLost is p2p.ErrPeerLost, ErrClosed is
// verbs.ErrClosed, which p2p, collectives and bootstrap alias too), so
// errors.Is works with any layer's name for it. docs/errors.md lists them.
var (
	// ErrPeerLost: a rank died or its link broke. Every pending and later
	// operation on every communicator of every surviving rank fails with
	// it; errors.As finds a *p2p.PeerLostError naming the lost rank.
	ErrPeerLost = p2p.ErrPeerLost
	// ErrRevoked: this rank learned of a lost peer from another rank (it
	// never talked to the lost one itself). Errors matching it also match
	// ErrPeerLost.
	ErrRevoked = p2p.ErrRevoked
	// ErrTruncated: a message was larger than the receive buffer.
	ErrTruncated = p2p.ErrTruncated
	// ErrMismatch: ranks called a collective with different counts, ops,
	// element types or roots (a *collectives.MismatchError names both ranks
	// and both values), or a received message is not a whole number of
	// elements, or ranks of one job were built with different versions or
	// transports (the rendezvous's bootstrap.ErrMismatch, the same value).
	ErrMismatch = collectives.ErrMismatch
	// ErrInvalidRank: a rank (destination, source, root) outside
	// [0, Size).
	ErrInvalidRank = p2p.ErrInvalidRank
	// ErrInvalidTag: a tag outside [0, MaxTag], or AnyTag on a send.
	ErrInvalidTag = p2p.ErrInvalidTag
	// ErrInvalidArgument: any other bad input (buffer lengths that do not
	// fit the collective, counts, a nil communicator, bad Options).
	ErrInvalidArgument = p2p.ErrInvalidArgument
	// ErrUnsupported: the op is not defined for the element type (bitwise
	// ops on floats), or an algorithm needs what the communicator lacks.
	ErrUnsupported = collectives.ErrUnsupported
	// ErrClosed: the communicator (or the endpoint under it) was closed, or
	// the peer a receive waits for closed its own.
	ErrClosed = p2p.ErrClosed
	// ErrAborted: a rank called Abort. errors.As finds a
	// *bootstrap.AbortError with its rank, code and reason.
	ErrAborted = bootstrap.ErrAborted
	// ErrCanceled: a non-blocking operation was canceled before it matched.
	ErrCanceled = p2p.ErrCanceled
	// ErrLauncher: FromEnv found no launcher environment, or a malformed
	// one (the error names the variable and its value).
	ErrLauncher = jobenv.ErrLauncher
)

// errCommClosed says what was closed when it was this communicator.
var errCommClosed = fmt.Errorf("communicator %w", ErrClosed)

// Wildcards and limits.
const (
	// AnySource receives from any rank of the communicator.
	AnySource = p2p.AnySource
	// AnyTag receives a message with any tag.
	AnyTag = p2p.AnyTag
	// MaxTag is the largest user tag; tags are 0..MaxTag.
	MaxTag = p2p.MaxTag
	// NoPeer fills OpError.Peer when the operation has no single peer.
	NoPeer = -2
	// NoTag fills OpError.Tag when the operation has no tag.
	NoTag = -2
)

// OpError is the error of every failed comm operation: which operation,
// on which rank (of the communicator), with which peer and tag, and why.
// The cause (Err) wraps the lower layers' errors, so errors.Is matches the
// sentinels above and errors.As finds *p2p.PeerLostError,
// *collectives.MismatchError, *p2p.TruncatedError, *bootstrap.AbortError.
type OpError struct {
	Op   string // "send", "recv", "allreduce", "split", "init", ...
	Rank int    // this rank in the communicator (-1 before it exists)
	Size int    // the communicator's size (0 before it exists)
	Peer int    // the other rank (communicator numbering), AnySource, or NoPeer
	Tag  int    // the tag, AnyTag, or NoTag
	Err  error
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("comm: ")
	b.WriteString(e.Op)
	if e.Rank >= 0 {
		fmt.Fprintf(&b, " on rank %d", e.Rank)
		if e.Size > 0 {
			fmt.Fprintf(&b, " of %d", e.Size)
		}
	}
	switch {
	case e.Peer == AnySource:
		b.WriteString(" from any source")
	case e.Peer >= 0:
		fmt.Fprintf(&b, " with peer %d", e.Peer)
	}
	switch {
	case e.Tag == AnyTag:
		b.WriteString(", any tag")
	case e.Tag >= 0:
		fmt.Fprintf(&b, ", tag %d", e.Tag)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// PeerLost returns the lost rank named by err (in world numbering, the
// rank FromEnv / Init gave it), if err is a peer loss.
func PeerLost(err error) (rank int, ok bool) {
	var pl *p2p.PeerLostError
	if errors.As(err, &pl) {
		return pl.Rank, true
	}
	return -1, false
}
