// Package errfmt lets the layers' error types print one failure as one
// line. A failure in a collective is wrapped by several layers (comm's
// OpError around a collectives.Error around a p2p.Error around a
// PeerLostError), and each knows the rank, the peer or the operation; if
// each printed all it knew, one failure would name a rank three times. So
// an enclosing error says what it has printed, and the errors it wraps
// leave that out: each layer adds only what it owns.
//
// The error types implement Teller; an error that is not a Teller (a
// fmt.Errorf wrapper, a sentinel) prints its Error() as it is.
package errfmt

import "strings"

// Said is what the enclosing errors of a chain have printed.
type Said struct {
	// Nested: an enclosing error printed its layer's prefix ("comm: "):
	// a wrapped error leaves its own prefix out.
	Nested bool
	// Rank: this rank has been named. Every layer's rank of this process
	// is the same rank (in another numbering), so it is named once.
	Rank bool
	// Op is the operation named, "" when none: a wrapped error of the same
	// operation leaves it out.
	Op string
	// Peer: the peer of the operation has been named, and the wrapped
	// errors' peer is that one (in their own numbering).
	Peer bool
	// Tag: the tag has been named, or is not the user's (a collective's
	// internal messages): a wrapped error leaves it out.
	Tag bool
	// Origin: the named peer is the rank where the failure began (the lost
	// rank, the rank that closed): a cause that would name that rank
	// ("rank 3 lost") leaves it out ("lost").
	Origin bool
}

// Teller is an error that prints itself inside enclosing errors, leaving
// out what they said. Error() is Tell(Said{}).
type Teller interface {
	error
	Tell(s Said) string
}

// Headed is a Teller whose operation an enclosing error of the same
// operation prints in place of its own, because it says more (a
// collective's name, sequence number and algorithm).
type Headed interface {
	Teller
	// Head is the operation as this error names it ("allreduce #1 (ring)").
	Head() string
	// HeadOp is the bare operation name ("allreduce"), to compare with the
	// enclosing error's.
	HeadOp() string
}

// Tell prints err as it reads after what s says has been printed.
func Tell(err error, s Said) string {
	if err == nil {
		return ""
	}
	if t, ok := err.(Teller); ok {
		return t.Tell(s)
	}
	return err.Error()
}

// Join joins an error's frame (what it adds: "rank 0: Send peer 1") to
// its cause with ": "; an empty frame adds nothing.
func Join(frame, cause string) string {
	switch {
	case frame == "":
		return cause
	case cause == "":
		return frame
	}
	return frame + ": " + cause
}

// SameOp says whether op names the same operation as base, as the layers
// spell them: "Iallreduce", "AllreduceInto" and "allreduce" are one;
// "ReduceScatter" is "reduce_scatter".
func SameOp(op, base string) bool {
	norm := func(s string) string {
		s = strings.ToLower(strings.ReplaceAll(s, "_", ""))
		s = strings.TrimSuffix(s, "into")
		return strings.TrimSuffix(s, "inplace")
	}
	a, b := norm(op), norm(base)
	return a == b || strings.HasPrefix(a, "i") && a[1:] == b
}
