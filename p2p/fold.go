package p2p

import (
	"fmt"

	"github.com/rdmago/rdmago/internal/ntcopy"
)

// Fold receives (Channel.IrecvFold) reduce a message into the receive's
// buffer as it arrives instead of copying it there: the layer above would
// otherwise receive into scratch memory and then make a pass of its own
// over both, after the whole message is in. Eager messages and the
// fragments of pipelined ones are folded straight out of the receive slots
// (under the endpoint's lock, as the copy they replace was); a message the
// peer or the provider places whole (a rendezvous) lands in memory of the
// endpoint's and is folded once it is complete.

// place puts piece, at offset off of its message, into receive r's buffer:
// folded in for a fold receive, else copied. (A staged fold receive takes
// no pieces: its message is placed whole.)
func (r *Request) place(off int, piece []byte) {
	if r.fold != nil {
		r.fold(r.buf[off:off+len(piece)], piece)
		return
	}
	ntcopy.Bulk(r.buf[off:], piece)
}

// staged reports whether fold receive r takes its message into memory of
// the endpoint's (stageFoldLocked).
func (r *Request) staged() bool { return r.reqCold != nil && r.foldTo != nil }

// stageFoldLocked makes fold receive r take its n-byte message into memory
// of the endpoint's, folded into the caller's buffer once the message is
// complete (unstageFoldLocked).
func (ep *Endpoint) stageFoldLocked(r *Request, n int) {
	ep.coldLocked(r)
	r.foldTo = r.buf
	r.buf = ep.spare.take(n)
}

// unstageFoldLocked ends the staging of fold receive r, which completes
// with err: the message is folded into the caller's buffer, which r holds
// again. After a failure the staging memory is left to the garbage
// collector rather than recycled, in case a transfer still writes to it.
func (ep *Endpoint) unstageFoldLocked(r *Request, err error) {
	staged := r.buf
	r.buf, r.foldTo = r.foldTo, nil
	if err != nil {
		return
	}
	n := r.status.Count
	r.fold(r.buf[:n], staged[:n])
	ep.spare.put(staged)
}

// foldSplits reports whether a fragment of n bytes at offset off of a
// pipelined message of size bytes would split an element of fold receive
// r: every fragment but the last must be whole elements (both ranks of a
// pair cut at the same eager limit, so this only catches a peer that
// disagrees).
func (r *Request) foldSplits(off, n, size int) bool {
	return r.fold != nil && r.unit > 1 && (off%r.unit != 0 || off+n < size && n%r.unit != 0)
}

// foldSplitError is the error of a fold receive whose message came in
// pieces that split its elements.
func foldSplitError(off, n, unit int) error {
	return fmt.Errorf("%w: a fragment of %d bytes at offset %d splits the fold's %d-byte elements", ErrInvalidArgument, n, off, unit)
}
