package p2p

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/rdmago/rdmago/internal/errfmt"
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

func (e *Error) Error() string { return e.Tell(errfmt.Said{}) }

// Tell prints e inside enclosing errors that said s: an enclosing error
// about the same exchange (it named the peer) has named the operation,
// and with the rank, the peer and the tag said, e adds nothing of its own.
func (e *Error) Tell(s errfmt.Said) string {
	var b strings.Builder
	if !s.Nested {
		b.WriteString("p2p: ")
	}
	if !s.Rank {
		fmt.Fprintf(&b, "rank %d: ", e.Rank)
	}
	var f []string
	if !s.Peer && e.Op != "" && !errfmt.SameOp(e.Op, s.Op) {
		f = append(f, e.Op)
	}
	if !s.Peer {
		switch {
		case e.Peer == AnySource:
			f = append(f, "from any rank")
		case e.Peer >= 0:
			f = append(f, fmt.Sprintf("peer %d", e.Peer))
		}
	}
	if !s.Tag {
		switch {
		case e.Tag == AnyTag:
			f = append(f, "any tag")
		case e.Tag >= 0:
			f = append(f, fmt.Sprintf("tag %d", e.Tag))
		}
	}
	in := s
	in.Nested, in.Rank = true, true
	if !s.Peer && e.Peer >= 0 {
		in.Peer, in.Origin = true, originOf(e.Err) == e.Peer
	}
	in.Peer = in.Peer || e.Peer == AnySource
	in.Tag = in.Tag || e.Tag >= 0 || e.Tag == AnyTag
	if in.Op == "" || !s.Peer {
		in.Op = e.Op
	}
	b.WriteString(errfmt.Join(strings.Join(f, " "), errfmt.Tell(e.Err, in)))
	return b.String()
}

// origin is implemented by the causes that name the rank where a failure
// began; an error whose peer is that rank tells them to leave it out.
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

// PeerLostError names the rank that was lost. It matches ErrPeerLost, and
// also ErrRevoked when this endpoint learned of the loss from another rank
// rather than noticing it itself.
type PeerLostError struct {
	Rank     int   // the lost rank
	Reporter int   // the rank that noticed (this rank when it noticed itself)
	Revoked  bool  // learned through a revoke from Reporter
	Cause    error // what the noticing rank saw (a completion status, a liveness timeout)
}

func (e *PeerLostError) Error() string { return e.Tell(errfmt.Said{}) }

// Tell leaves the lost rank out when the enclosing error named it as the
// peer where the failure began.
func (e *PeerLostError) Tell(s errfmt.Said) string {
	str := "lost"
	if !s.Origin {
		str = fmt.Sprintf("rank %d lost", e.Rank)
	}
	if e.Revoked {
		str += fmt.Sprintf(" (revoked by rank %d)", e.Reporter)
	}
	if e.Cause != nil {
		str += ": " + errfmt.Tell(e.Cause, s)
	}
	return str
}

func (e *PeerLostError) originRank() int { return e.Rank }

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

func (e *DeadlineError) Error() string { return e.Tell(errfmt.Said{}) }

// Tell leaves the rank out when it is the only one and the enclosing error
// named it as the peer.
func (e *DeadlineError) Tell(s errfmt.Said) string {
	var who string
	switch {
	case e.Any:
		who = "no rank had sent a matching message"
	case len(e.Ranks) == 1 && s.Origin:
		who = "had not arrived"
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

func (e *DeadlineError) originRank() int {
	if len(e.Ranks) == 1 && !e.Any {
		return e.Ranks[0]
	}
	return -1
}

func (e *DeadlineError) Unwrap() error { return e.Cause }

// ProtocolError describes a malformed frame from a peer.
type ProtocolError struct {
	Peer   int
	Detail string
}

func (e *ProtocolError) Error() string { return e.Tell(errfmt.Said{}) }

// Tell leaves the rank out when the enclosing error named it as the peer.
func (e *ProtocolError) Tell(s errfmt.Said) string {
	if s.Origin {
		return "malformed frame: " + e.Detail
	}
	return fmt.Sprintf("malformed frame from rank %d: %s", e.Peer, e.Detail)
}

func (e *ProtocolError) originRank() int { return e.Peer }

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

func (e *PeerClosedError) Error() string { return e.Tell(errfmt.Said{}) }

// Tell leaves the rank out when the enclosing error named it as the peer.
func (e *PeerClosedError) Tell(s errfmt.Said) string {
	if s.Origin {
		return "closed its endpoint"
	}
	return fmt.Sprintf("rank %d closed its endpoint", e.Rank)
}

func (e *PeerClosedError) originRank() int { return e.Rank }

func (e *PeerClosedError) Is(target error) bool { return target == ErrClosed }
