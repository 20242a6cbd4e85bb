package p2p

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rdmago/rdmago/internal/ranklist"
	"github.com/rdmago/rdmago/verbs"
)

// Sentinel causes. Every error this package returns is a *Error whose cause
// matches one of these (or a context error) with errors.Is. The causes the
// verbs layer defines (closed, invalid argument, protocol error) are its
// values under this package's names, so either name matches.
var (
	// ErrPeerLost: a rank of the endpoint died or its link broke. The cause
	// is a *PeerLostError naming the rank.
	ErrPeerLost = errors.New("peer lost")
	// ErrRevoked: the endpoint was revoked because some rank (maybe not the
	// one this operation talks to) learned that a peer was lost. Errors that
	// match ErrRevoked also match ErrPeerLost.
	ErrRevoked = errors.New("endpoint revoked")
	// ErrTruncated: a message was larger than the receive buffer; the cause
	// is a *TruncatedError stating both sizes.
	ErrTruncated = errors.New("message truncated")
	// ErrClosed: the endpoint (or window) was closed, or the peer closed its
	// own (a *PeerClosedError names it). It is verbs.ErrClosed.
	ErrClosed = verbs.ErrClosed
	// ErrInvalidRank: a rank outside [0, Size) (or AnySource where a real
	// rank is needed).
	ErrInvalidRank = errors.New("invalid rank")
	// ErrInvalidTag: a tag outside [0, MaxTag] (or AnyTag on a send).
	ErrInvalidTag = errors.New("invalid tag")
	// ErrInvalidArgument: any other bad input (offsets, sizes, options). It
	// is verbs.ErrInvalidArgument.
	ErrInvalidArgument = verbs.ErrInvalidArgument
	// ErrCanceled: the request was canceled (Request.Cancel) before it matched.
	ErrCanceled = errors.New("request canceled")
	// ErrProtocol: a peer sent a frame this endpoint cannot parse. It is
	// verbs.ErrProtocol.
	ErrProtocol = verbs.ErrProtocol
)

// Error is the error of a failed point-to-point or window operation.
type Error struct {
	Op   string // "Send", "Recv", "Isend", "Wait", "Probe", "Write", "New", ...
	Rank int    // this endpoint's rank
	Peer int    // the other rank, AnySource for a wildcard receive, -2 when none
	Tag  int    // the tag, AnyTag for a wildcard, -2 when none
	Err  error  // the cause
}

// NoPeer and NoTag fill Error.Peer and Error.Tag when the operation has none.
const (
	NoPeer = -2
	NoTag  = -2
)

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "p2p: rank %d: %s", e.Rank, e.Op)
	switch {
	case e.Peer == AnySource:
		b.WriteString(" from any rank")
	case e.Peer >= 0:
		fmt.Fprintf(&b, " peer %d", e.Peer)
	}
	switch {
	case e.Tag == AnyTag:
		b.WriteString(" any tag")
	case e.Tag >= 0:
		fmt.Fprintf(&b, " tag %d", e.Tag)
	}
	b.WriteString(": ")
	if e.Err != nil {
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// PeerLostError names the rank that was lost. It matches ErrPeerLost, and
// also ErrRevoked when this endpoint learned of the loss from another rank
// rather than noticing it itself.
type PeerLostError struct {
	Rank     int   // the lost rank
	Reporter int   // the rank that noticed (this rank when it noticed itself)
	Revoked  bool  // learned through a revoke from Reporter
	Cause    error // what the noticing rank saw (a completion status, a liveness timeout)
}

func (e *PeerLostError) Error() string {
	s := fmt.Sprintf("rank %d lost", e.Rank)
	if e.Revoked {
		s += fmt.Sprintf(" (revoked by rank %d)", e.Reporter)
	}
	if e.Cause != nil {
		s += ": " + e.Cause.Error()
	}
	return s
}

func (e *PeerLostError) Is(target error) bool {
	return target == ErrPeerLost || (e.Revoked && target == ErrRevoked)
}

func (e *PeerLostError) Unwrap() error { return e.Cause }

// TruncatedError states the sizes of a message that did not fit.
type TruncatedError struct {
	Size int // bytes in the message
	Cap  int // bytes in the receive buffer
}

func (e *TruncatedError) Error() string {
	return fmt.Sprintf("message of %d bytes does not fit the %d-byte receive buffer", e.Size, e.Cap)
}

func (e *TruncatedError) Is(target error) bool { return target == ErrTruncated }

// DeadlineError is the cause when a caller's context ended before the
// operation completed. It names the ranks that had not arrived: the sender a
// receive was waiting for, the receiver a rendezvous send was waiting for.
// It matches the context's error (context.DeadlineExceeded or
// context.Canceled) with errors.Is.
type DeadlineError struct {
	Ranks []int // ranks not arrived, sorted; empty for a wildcard receive
	Any   bool  // a wildcard receive: no rank had sent a matching message
	What  string
	Cause error // ctx.Err()
}

func (e *DeadlineError) Error() string {
	var who string
	switch {
	case e.Any:
		who = "no rank had sent a matching message"
	case len(e.Ranks) > 0:
		who = ranklist.Format(e.Ranks) + " had not arrived"
	default:
		who = "nothing pending"
	}
	if e.What != "" {
		who += " (" + e.What + ")"
	}
	return e.Cause.Error() + ": " + who
}

func (e *DeadlineError) Unwrap() error { return e.Cause }

// ProtocolError describes a malformed frame from a peer.
type ProtocolError struct {
	Peer   int
	Detail string
}

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("malformed frame from rank %d: %s", e.Peer, e.Detail)
}

func (e *ProtocolError) Is(target error) bool { return target == ErrProtocol }

func isCtxErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// PeerClosedError is the cause when an operation can only complete with a
// rank that has closed its endpoint on purpose (it said goodbye: it is not
// lost). It matches ErrClosed.
type PeerClosedError struct {
	Rank int
}

func (e *PeerClosedError) Error() string { return fmt.Sprintf("rank %d closed its endpoint", e.Rank) }

func (e *PeerClosedError) Is(target error) bool { return target == ErrClosed }
