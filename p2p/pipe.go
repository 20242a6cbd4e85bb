package p2p

import (
	"fmt"

	"github.com/rdmago/rdmago/internal/ntcopy"
)

// The pipelined eager protocol (Options.PipelineLimit).
//
// Over tcp a rendezvous costs three trips through both kernels (RTS, READ
// request, READ response) where the data alone needs one, and from
// 128 KiB to 512 KiB the two extra trips cost more than the two copies
// that eager buffers take. A message in that range therefore goes as a
// train of PIPE frames, each filling one receive buffer, sent back to back
// under the usual credits: the receiver matches the message on its first
// fragment and copies each fragment into the receive's buffer as it
// arrives, while the sender is still copying out the next. The sender's
// request completes when its last fragment is posted, as an eager send
// does. A message that arrives before its receive is gathered into memory
// of its own, as an eager one is.
//
// The fragments of one message leave in order on the pair's queue pair
// (they enter the peer's queue together, under the endpoint's lock), but
// each carries the message id and its offset so the receiver never
// assumes it: a fragment of an unknown message, or out of order, is a
// protocol error.

// maxPipe caps PipelineLimit. A receiver refuses a larger PIPE message
// (a protocol error) rather than allocate what a corrupt header asks for.
const maxPipe = 64 << 20

// pipeIn is a pipelined message whose fragments are still arriving.
type pipeIn struct {
	size, got int
	r         *Request // the receive it matched; nil while unexpected or when it is discarded
	in        *inbound // while unmatched: in.data gathers the fragments
	err       error    // the sender is gone: the rest will never come
}

// sendPipe queues buf to p as PIPE fragments; r completes when the last
// one is posted. Called with ep.mu held.
func (p *peer) sendPipe(ep *Endpoint, r *Request, ctxID uint32, tag int, buf []byte) error {
	frag := p.slot - pipeLen
	n := (len(buf) + frag - 1) / frag
	items := make([]outItem, n)
	ep.nextID++
	id := ep.nextID
	for i := range items {
		off := i * frag
		items[i] = outItem{h: header{kind: kPipe, ctx: ctxID, tag: int32(tag), size: uint64(len(buf)),
			id: id, addr: uint64(off)}, payload: buf[off:min(off+frag, len(buf))], req: r}
	}
	items[n-1].complete = true
	r.pipeFirst = &items[0]
	p.stats.PipeSent.add(len(buf))
	for i := range items {
		if err := p.send(ep, &items[i]); err != nil {
			return err
		}
	}
	return nil
}

// onPipe handles one PIPE fragment from p.
func (ep *Endpoint) onPipe(p *peer, h *header, data []byte) {
	key := splitKey{p.rank, h.id}
	pi := ep.pipes[key]
	if h.addr == 0 {
		if pi != nil {
			ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("PIPE message %d started twice", h.id)})
			return
		}
		if h.size > maxPipe {
			ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("PIPE message of %d bytes exceeds %d", h.size, maxPipe)})
			return
		}
		env := envelope{ctx: h.ctx, src: p.rank, tag: h.tag}
		p.stats.PipeRecv.add(int(h.size))
		pi = &pipeIn{size: int(h.size)}
		ep.pipes[key] = pi
		if r := ep.m.arrive(env); r != nil {
			ep.matchPipeLocked(r, env, pi)
		} else {
			pi.in = &inbound{env: env, size: pi.size, data: ep.spare.take(pi.size), pipe: pi}
			ep.m.addUnexpected(pi.in)
			ep.wakeArrivalsLocked()
		}
	} else if pi == nil || h.addr != uint64(pi.got) {
		ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("PIPE fragment at offset %d of message %d out of order", h.addr, h.id)})
		return
	}
	switch {
	case pi.r != nil && pi.r.foldSplits(pi.got, len(data), pi.size):
		r := pi.r
		pi.r = nil // the rest is discarded
		ep.completeLocked(r, ep.opErr(r, foldSplitError(pi.got, len(data), int(r.unit))))
	case pi.r != nil:
		pi.r.place(pi.got, data)
	case pi.in != nil:
		ntcopy.Bulk(pi.in.data[pi.got:], data)
	}
	pi.got += len(data)
	if pi.got < pi.size {
		return
	}
	delete(ep.pipes, key)
	if pi.in != nil {
		pi.in.pipe = nil // complete: an ordinary unexpected eager message now
	}
	if pi.r != nil {
		ep.completeLocked(pi.r, nil)
	}
}

// matchPipeLocked makes r the receive of pipelined message pi (env): it
// takes the fragments from now on; what has arrived already is in pi.in.
func (ep *Endpoint) matchPipeLocked(r *Request, env envelope, pi *pipeIn) {
	r.status = Status{Source: env.src, Tag: int(env.tag), Count: pi.size}
	in := pi.in
	pi.in = nil
	switch {
	case pi.err != nil:
		ep.completeLocked(r, ep.opErr(r, pi.err))
	case pi.size > r.capacity():
		r.status.Count = 0
		ep.completeLocked(r, ep.opErr(r, &TruncatedError{Size: pi.size, Cap: r.capacity()}))
	default:
		if in != nil {
			// What arrived so far: whole fragments, so whole elements
			// for a fold receive (see foldSplits).
			r.place(0, in.data[:pi.got])
			ep.spare.put(in.data) // the rest is placed as it comes
			in.data = nil
		}
		if pi.got == pi.size {
			ep.completeLocked(r, nil)
			return
		}
		pi.r = r
	}
}

// fail ends pi because its sender is gone (or the endpoint failed).
func (pi *pipeIn) fail(ep *Endpoint, err error) {
	pi.err = err
	if pi.r != nil {
		ep.completeLocked(pi.r, ep.opErr(pi.r, err))
		pi.r = nil
	}
}

// dropPipesLocked fails the pipelined messages still arriving from p,
// which can send no more. One not matched yet leaves the unexpected queue:
// a receive must not match half a message.
func (ep *Endpoint) dropPipesLocked(p *peer, cause error) {
	for k, pi := range ep.pipes {
		if k.peer != p.rank {
			continue
		}
		delete(ep.pipes, k)
		if pi.in != nil {
			in := pi.in
			ep.m.removeUnexpected(func(x *inbound) bool { return x == in })
		}
		pi.fail(ep, cause)
	}
}
