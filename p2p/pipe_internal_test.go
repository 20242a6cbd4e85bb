package p2p

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A pipelined send is canceled only while none of its fragments has gone,
// and then all of them leave the queue.
func TestPipeUnqueue(t *testing.T) {
	ep := &Endpoint{}
	p := &peer{slot: hdrLen + 256, frag: 240} // no free staging slot: everything queues
	r := &Request{ep: ep, op: opSend}
	require.NoError(t, p.sendPipe(ep, r, 0, 1, make([]byte, 1000)))
	require.Len(t, p.queue, 5) // 240-byte fragments
	other := &outItem{h: header{kind: kEager}}
	p.queue = append(p.queue, other)
	for i, it := range p.queue[:5] {
		require.Equal(t, uint64(i*240), it.h.addr)
		require.Equal(t, i == 4, it.complete)
	}
	require.True(t, p.unqueue(r))
	require.Equal(t, []*outItem{other}, p.queue)

	// The first fragment has been posted: too late.
	p.queue = nil
	r2 := &Request{ep: ep, op: opSend}
	require.NoError(t, p.sendPipe(ep, r2, 0, 1, make([]byte, 1000)))
	p.queue = p.queue[1:]
	require.False(t, p.unqueue(r2))
	require.Len(t, p.queue, 4)
}

// A sender lost in the middle of pipelined messages: the receive that
// matched one fails with the cause; one still unexpected leaves the queue
// (no receive may match half a message); one claimed by a matched probe
// fails its receive later; another sender's message is untouched.
func TestDropPipes(t *testing.T) {
	ep := &Endpoint{rank: 1, pipes: map[splitKey]*pipeIn{}}
	p0 := &peer{rank: 0}
	recv := func(src int) *Request {
		return &Request{ep: ep, op: opRecv, peer: src, pattern: envelope{src: src, tag: 1}, buf: make([]byte, 100)}
	}
	// Matched, half arrived.
	matched := recv(0)
	ep.pipes[splitKey{0, 1}] = &pipeIn{size: 100, got: 50, r: matched}
	// Unexpected, half arrived.
	unexp := &pipeIn{size: 100, got: 10}
	unexp.in = &inbound{env: envelope{src: 0, tag: 1}, size: 100, data: make([]byte, 100), pipe: unexp}
	ep.m.addUnexpected(unexp.in)
	ep.pipes[splitKey{0, 2}] = unexp
	// Claimed by Mprobe (no longer in the unexpected queue).
	claimed := &pipeIn{size: 100, got: 20}
	claimed.in = &inbound{env: envelope{src: 0, tag: 1}, size: 100, data: make([]byte, 100), pipe: claimed}
	ep.pipes[splitKey{0, 3}] = claimed
	// From another peer.
	other := &pipeIn{size: 100, got: 30, r: recv(2)}
	ep.pipes[splitKey{2, 1}] = other

	cause := &PeerLostError{Rank: 0, Reporter: 1}
	ep.dropPipesLocked(p0, cause)

	require.True(t, matched.done.Load())
	require.ErrorIs(t, matched.err, ErrPeerLost)
	require.Zero(t, ep.m.unexp.len(), "half a message stayed matchable")
	late := recv(0)
	ep.deliverLocked(late, claimed.in)
	require.True(t, late.done.Load())
	require.ErrorIs(t, late.err, ErrPeerLost)
	require.Len(t, ep.pipes, 1)
	require.False(t, other.r.done.Load())
}

// A pipelined message of k times the provider's size goes as k fragments
// of exactly that size each (not of the eager limit, which has room for a
// layer's header beyond it): the receive buffers have room for the PIPE
// header in front of a full eager payload.
func TestPipeFragmentsCarryTheProviderSize(t *testing.T) {
	for _, eager := range []int{256, 64 << 10} {
		for _, k := range []int{2, 4} {
			ep := &Endpoint{}
			p := &peer{slot: slotLen(eager + eagerHeadroom), frag: eager} // no free staging slot: everything queues
			r := &Request{ep: ep, op: opSend}
			require.NoError(t, p.sendPipe(ep, r, 0, 1, make([]byte, k*eager)))
			require.Len(t, p.queue, k, "eager %d, message of %d bytes", eager, k*eager)
			for i, it := range p.queue {
				require.Len(t, it.payload, eager)
				require.Equal(t, uint64(i*eager), it.h.addr)
				require.LessOrEqual(t, it.h.frameLen()+len(it.payload), p.slot, "a fragment must fit a receive buffer")
			}
			// One byte more takes one more fragment, of that byte.
			ep2 := &Endpoint{}
			p2 := &peer{slot: slotLen(eager + eagerHeadroom), frag: eager}
			require.NoError(t, p2.sendPipe(ep2, &Request{ep: ep2, op: opSend}, 0, 1, make([]byte, k*eager+1)))
			require.Len(t, p2.queue, k+1)
			require.Len(t, p2.queue[k].payload, 1)
		}
	}
}
