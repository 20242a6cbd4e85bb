package comm

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/internal/errfmt"
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
//
// It prints the failure as one line that names each thing once: the
// collective (name, sequence number and algorithm) or the operation, this
// rank of the size, the peer and tag, then the cause, from which the lower
// layers leave out what this line has said:
//
//	comm: allreduce #1 (shared_memory) on rank 3 of 5: peer 0: count mismatch: rank 3 has 5 elements, rank 0 has 4 elements
//	comm: Recv on rank 0 of 2: peer 1, tag 3: closed its endpoint
type OpError struct {
	Op   string // "Send", "Recv", "Allreduce", "Split", "FromEnv", "Init", ...
	Rank int    // this rank in the communicator (-1 before it exists)
	Size int    // the communicator's size (0 before it exists)
	Peer int    // the other rank (communicator numbering), AnySource, or NoPeer
	Tag  int    // the tag, AnyTag, or NoTag
	Err  error

	// origin: Peer is the rank where the failure began (it was lost,
	// closed, or failed the call), which the cause then need not name.
	origin bool
	// note follows the peer: its world rank when it was lost from a
	// communicator other than the world.
	note string
}

func (e *OpError) Error() string {
	var b strings.Builder
	b.WriteString("comm: ")
	in := errfmt.Said{Nested: true, Op: e.Op}
	// A collective's own error names the call better: its sequence number
	// and algorithm.
	if h, ok := e.Err.(errfmt.Headed); ok && errfmt.SameOp(e.Op, h.HeadOp()) {
		b.WriteString(h.Head())
		in.Op = h.HeadOp()
	} else {
		b.WriteString(e.Op)
	}
	if e.Rank >= 0 {
		fmt.Fprintf(&b, " on rank %d", e.Rank)
		if e.Size > 0 {
			fmt.Fprintf(&b, " of %d", e.Size)
		}
		in.Rank = true
	}
	var f []string
	switch {
	case e.Peer == AnySource:
		f = append(f, "any source")
		in.Peer = true
	case e.Peer >= 0:
		f = append(f, fmt.Sprintf("peer %d%s", e.Peer, e.note))
		in.Peer, in.Origin = true, e.origin
	}
	switch {
	case e.Tag == AnyTag:
		f = append(f, "any tag")
		in.Tag = true
	case e.Tag >= 0:
		f = append(f, fmt.Sprintf("tag %d", e.Tag))
		in.Tag = true
	}
	if rest := errfmt.Join(strings.Join(f, ", "), errfmt.Tell(e.Err, in)); rest != "" {
		b.WriteString(": ")
		b.WriteString(rest)
	}
	return b.String()
}

func (e *OpError) Unwrap() error { return e.Err }

// abortedError is a failure an abort caused: the abort (which names the
// aborting rank and its code), then what this call saw, told in the
// OpError's line like any cause. It matches both.
type abortedError struct{ abort, err error }

func (e *abortedError) Error() string { return e.Tell(errfmt.Said{}) }

func (e *abortedError) Tell(s errfmt.Said) string {
	return e.abort.Error() + "; " + errfmt.Tell(e.err, s)
}

func (e *abortedError) Unwrap() []error { return []error{e.abort, e.err} }

// PeerLost returns the lost rank named by err (in world numbering, the
// rank FromEnv / Init gave it), if err is a peer loss.
func PeerLost(err error) (rank int, ok bool) {
	var pl *p2p.PeerLostError
	if errors.As(err, &pl) {
		return pl.Rank, true
	}
	return -1, false
}
