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

// place puts piece, at offset off of its message, into receive r's buffers:
// folded in for a fold receive, else copied (the first len(r.head) bytes of
// a parts receive into its head). (A staged receive takes no pieces: its
// message is placed whole.)
func (r *Request) place(off int, piece []byte) {
	if r.fold != nil {
		r.fold(r.buf[off:off+len(piece)], piece)
		return
	}
	if off < len(r.head) {
		n := copy(r.head[off:], piece)
		if piece = piece[n:]; len(piece) == 0 {
			return
		}
		off += n
	}
	ntcopy.Bulk(r.buf[off-len(r.head):], piece)
}

// capacity is the largest message receive r takes.
func (r *Request) capacity() int { return len(r.head) + len(r.buf) }

// placed reports whether r's message goes through place rather than
// straight into buf: a fold or a parts receive.
func (r *Request) placed() bool { return r.fold != nil || r.head != nil }

// staged reports whether receive r takes its message into memory of the
// endpoint's (stageLocked).
func (r *Request) staged() bool { return r.reqCold != nil && r.staging }

// stageLocked makes fold or parts receive r take its n-byte message into
// memory of the endpoint's, placed into the caller's buffers once the
// message is complete (unstageLocked): the peer or the provider write a
// rendezvous message whole, into one registered buffer.
func (ep *Endpoint) stageLocked(r *Request, n int) {
	ep.coldLocked(r)
	r.stagedTo, r.staging = r.buf, true
	r.buf = ep.spare.take(n)
	// A parts receive's head waits beside stagedTo: place splits the
	// message only once it is whole.
	r.head, r.stagedHead = nil, r.head
}

// unstageLocked ends the staging of receive r, which completes with err:
// the message is placed into the caller's buffers, which r holds again.
// After a failure the staging memory is left to the garbage collector
// rather than recycled, in case a transfer still writes to it.
func (ep *Endpoint) unstageLocked(r *Request, err error) {
	staged := r.buf
	r.buf, r.stagedTo, r.staging = r.stagedTo, nil, false
	r.head, r.stagedHead = r.stagedHead, nil
	if err != nil {
		return
	}
	r.place(0, staged[:r.status.Count])
	ep.spare.put(staged)
}

// foldSplits reports whether a fragment of n bytes at offset off of a
// pipelined message of size bytes would split an element of fold receive
// r: every fragment but the last must be whole elements (both ranks of a
// pair cut at the same eager limit, so this only catches a peer that
// disagrees).
func (r *Request) foldSplits(off, n, size int) bool {
	u := int(r.unit)
	return r.fold != nil && u > 1 && (off%u != 0 || off+n < size && n%u != 0)
}

// foldSplitError is the error of a fold receive whose message came in
// pieces that split its elements.
func foldSplitError(off, n, unit int) error {
	return fmt.Errorf("%w: a fragment of %d bytes at offset %d splits the fold's %d-byte elements", ErrInvalidArgument, n, off, unit)
}
