package collectives

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/errfmt"
	"github.com/rdmago/rdmago/verbs"
)

// Sentinel causes, tested with errors.Is. Each is the value of the lowest
// layer that has the cause (ErrClosed is verbs.ErrClosed, which is also
// p2p.ErrClosed), so any layer's name for it matches.
var (
	// ErrMismatch: ranks called a collective with different counts, ops,
	// element types, roots or algorithms. The error is a *MismatchError.
	// It is verbs.ErrMismatch (also bootstrap.ErrMismatch).
	ErrMismatch = verbs.ErrMismatch
	// ErrInvalidArgument: a bad argument on this rank (root out of range,
	// buffer lengths that do not fit the collective, unknown algorithm).
	ErrInvalidArgument = verbs.ErrInvalidArgument
	// ErrUnsupported: the op is not defined for the element type, or an
	// algorithm needs a capability the group lacks. It is
	// reduce.ErrUnsupported and verbs.ErrUnsupported.
	ErrUnsupported = reduce.ErrUnsupported
	// ErrClosed: the Engine was closed, or a peer closed its own before
	// completing the call (a *PeerClosedError names it).
	ErrClosed = verbs.ErrClosed
	// ErrProtocol: a message that is not a collectives message of this call
	// (corrupt header).
	ErrProtocol = verbs.ErrProtocol
)

// errEngineClosed says what was closed when this rank's own Engine was.
var errEngineClosed = fmt.Errorf("engine %w", ErrClosed)

// Error carries the context of a failed collective: which collective (and
// its sequence number on this Engine), on which rank, talking to which peer
// (-1 if none), with which algorithm.
type Error struct {
	Op        string // "allreduce", "bcast", ...
	Algorithm string
	Seq       uint32
	Rank      int
	Peer      int
	Err       error
}

func (e *Error) Error() string { return e.Tell(errfmt.Said{}) }

// Tell prints e inside enclosing errors that said s: "collectives:
// allreduce #1 (ring) on rank 3: peer 0: count mismatch: ..." alone, and
// only "peer 0: count mismatch: ..." inside comm's error, which names the
// collective (Head) and the rank. The messages e wraps (p2p's) travel on
// the collectives' own tags, which are left out.
func (e *Error) Tell(s errfmt.Said) string {
	var b strings.Builder
	if !s.Nested {
		b.WriteString("collectives: ")
	}
	if !errfmt.SameOp(e.Op, s.Op) {
		b.WriteString(e.Head())
		if !s.Rank {
			fmt.Fprintf(&b, " on rank %d", e.Rank)
		}
		b.WriteString(": ")
	} else if !s.Rank {
		fmt.Fprintf(&b, "rank %d: ", e.Rank)
	}
	frame := ""
	in := s
	in.Nested, in.Rank, in.Tag, in.Op = true, true, true, e.Op
	if !s.Peer && e.Peer >= 0 {
		frame = fmt.Sprintf("peer %d", e.Peer)
		in.Peer, in.Origin = true, originOf(e.Err) == e.Peer
	}
	b.WriteString(errfmt.Join(frame, errfmt.Tell(e.Err, in)))
	return b.String()
}

// Head names the call: "allreduce #1 (ring)".
func (e *Error) Head() string {
	h := fmt.Sprintf("%s #%d", e.Op, e.Seq)
	if e.Algorithm != "" {
		h += " (" + e.Algorithm + ")"
	}
	return h
}

// HeadOp is the collective's name, "allreduce".
func (e *Error) HeadOp() string { return e.Op }

// origin is implemented by the causes that name the rank where a failure
// began (in the group's numbering); an error whose peer is that rank tells
// them to leave it out.
type origin interface{ originRank() int }

// originOf is the rank where err began, -1 when err does not name one.
func originOf(err error) int {
	var o origin
	if errors.As(err, &o) {
		return o.originRank()
	}
	return -1
}

func (e *Error) Unwrap() error { return e.Err }

// MismatchError says which two ranks disagree about what. It matches
// ErrMismatch with errors.Is.
type MismatchError struct {
	What      string // "count", "op", "type", "root", "algorithm", "sequence", "bytes"
	Rank      int    // a rank and its value
	Value     int64
	Peer      int // the rank it disagrees with, and that rank's value
	PeerValue int64
	// Names, when set, render Value and PeerValue (op and type names).
	Name, PeerName string
	// Suspect is the rank whose call differs from most ranks' (the likely
	// culprit, which launchers name), when the ranks that found the
	// difference saw every rank's call; -1 when unknown.
	Suspect int
}

func (e *MismatchError) Error() string {
	v, pv := fmt.Sprint(e.Value), fmt.Sprint(e.PeerValue)
	if e.Name != "" || e.PeerName != "" {
		v, pv = e.Name, e.PeerName
	}
	unit := ""
	if e.What == "count" {
		unit = " elements"
	}
	if e.What == "bytes" {
		unit = " bytes"
	}
	return fmt.Sprintf("%s mismatch: rank %d has %s%s, rank %d has %s%s", e.What, e.Rank, v, unit, e.Peer, pv, unit)
}

func (e *MismatchError) Is(target error) bool { return target == ErrMismatch }

// otherThan is the rank of the disagreement that is not me: the peer a
// rank's error names (me's counterpart when me is one of the two).
func (e *MismatchError) otherThan(me int) int {
	if e.Peer == me {
		return e.Rank
	}
	return e.Peer
}

// PeerError says that another rank failed the call on its own (it passed
// invalid arguments), so this rank stopped too instead of waiting for it.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string { return e.Tell(errfmt.Said{}) }

// Tell leaves the rank out when the enclosing error named it as the peer.
func (e *PeerError) Tell(s errfmt.Said) string {
	if s.Origin {
		return "failed the call: " + e.Err.Error()
	}
	return fmt.Sprintf("rank %d failed the call: %v", e.Rank, e.Err)
}

func (e *PeerError) originRank() int { return e.Rank }

func (e *PeerError) Unwrap() error { return e.Err }

// PeerClosedError says that a rank closed its Engine (communicator)
// without completing the call this rank waits in: it left early, and the
// call cannot complete. It matches ErrClosed.
type PeerClosedError struct {
	Rank int
}

func (e *PeerClosedError) Error() string { return e.Tell(errfmt.Said{}) }

// Tell leaves the rank out when the enclosing error named it as the peer.
func (e *PeerClosedError) Tell(s errfmt.Said) string {
	if s.Origin {
		return "closed its communicator before completing this call"
	}
	return fmt.Sprintf("rank %d closed its communicator before completing this call", e.Rank)
}

func (e *PeerClosedError) originRank() int { return e.Rank }

func (e *PeerClosedError) Is(target error) bool { return target == ErrClosed }
