package p2p

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// sliceMR is a verbs.MR over plain memory, for a peer's receive slots.
type sliceMR struct{ b []byte }

func (m sliceMR) Bytes() []byte         { return m.b }
func (m sliceMR) Addr() uint64          { return 0 }
func (m sliceMR) Len() int              { return len(m.b) }
func (m sliceMR) LKey() uint32          { return 0 }
func (m sliceMR) RKey() uint32          { return 0 }
func (m sliceMR) Access() verbs.Access  { return verbs.AccessLocalWrite }
func (m sliceMR) Kind() verbs.MemKind   { return 0 }
func (m sliceMR) SupportsAtomics() bool { return false }
func (m sliceMR) Close() error          { return nil }

// steerRig is rank 1 of two with a steer on its peer, rank 0, whose frames
// arrive in 16 receive slots of 128 bytes (a 40-byte header and up to 88
// bytes of body).
type steerRig struct {
	ep *Endpoint
	p  *peer
}

func newSteerRig() *steerRig {
	ep := &Endpoint{rank: 1, size: 2, pipes: map[splitKey]*pipeIn{}}
	p := &peer{rank: 0, slot: 128, recvMR: sliceMR{make([]byte, 16*128)}, seqSlot: make([]uint32, 16)}
	p.steer = &pipeSteer{ep: ep, p: p}
	ep.peers = []*peer{p, nil}
	// Post the 16 slots in order, as recvWR numbers them.
	for i := range uint32(16) {
		p.seqSlot[int(p.postSeq)&15] = i
		p.postSeq++
	}
	return &steerRig{ep: ep, p: p}
}

// frame writes header h into the slot of receive sequence number seq and
// returns the WR id that receive has.
func (g *steerRig) frame(seq uint16, h header) uint64 {
	slot := g.p.seqSlot[int(seq)&15]
	h.put(g.p.recvBuf(slot, uint32(h.frameLen())))
	return wrID(wrRecv, 0, uint32(seq)<<16|slot)
}

func (g *steerRig) post(tag int32, n int) *Request {
	r := &Request{ep: g.ep, op: opRecv, peer: AnySource, pattern: envelope{src: AnySource, ctx: 7, tag: tag}, buf: make([]byte, n)}
	g.ep.m.post(r)
	return r
}

// steering posts a receive for a 100-byte message of tag 5 and has the
// steer start message 9 and take its first fragment's body, as the
// provider does on reading it: the steer is busy until Steered.
func (g *steerRig) steering(t *testing.T) *Request {
	t.Helper()
	r := g.post(5, 100)
	id := g.frame(0, header{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 9})
	require.NotNil(t, g.p.steer.Steer(id, pipeHead(9, 100, 0, 5), 40))
	return r
}

func pipeHead(id, size, off uint64, tag int32) []byte {
	b := make([]byte, pipeLen)
	h := header{kind: kPipe, ctx: 7, tag: tag, size: size, id: id, addr: off}
	h.put(b)
	return b
}

// A first fragment starts its message from the provider's goroutine only
// when no frame before it that the endpoint has not handled may be a
// message matching the same receive (MPI's order between two messages of
// one sender), or any message when none is posted.
func TestPendingMayMatch(t *testing.T) {
	cases := []struct {
		name    string
		pending []header // frames before the first fragment, not handled yet
		post    bool     // a receive for tag 5 is posted
		early   bool     // a pending PIPE start was started early
		want    bool
	}{
		{name: "nothing pending", post: true, want: false},
		{name: "credit", pending: []header{{kind: kCredit}}, post: true, want: false},
		{name: "FIN and CTS", pending: []header{{kind: kFIN}, {kind: kCTS, size: 1}}, post: true, want: false},
		{name: "eager of the same tag", pending: []header{{kind: kEager, ctx: 7, tag: 5}}, post: true, want: true},
		{name: "eager of another tag", pending: []header{{kind: kEager, ctx: 7, tag: 6}}, post: true, want: false},
		{name: "eager of another context", pending: []header{{kind: kEager, ctx: 8, tag: 5}}, post: true, want: false},
		{name: "eager, nothing posted", pending: []header{{kind: kEager, ctx: 7, tag: 6}}, want: true},
		{name: "RTS of the same tag", pending: []header{{kind: kRTS, ctx: 7, tag: 5, size: 1}}, post: true, want: true},
		{name: "a later PIPE fragment", pending: []header{{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 3, addr: 40}}, post: true, want: false},
		{name: "a PIPE start not handled", pending: []header{{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 3}}, post: true, want: true},
		{name: "a PIPE start started early", pending: []header{{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 3}}, post: true, early: true, want: false},
		{name: "BYE", pending: []header{{kind: kBye}}, post: true, want: true},
		{name: "too many to look at", pending: make([]header, earlyLookMax+1), post: true, want: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := newSteerRig()
			if c.name == "too many to look at" {
				g.p.seqSlot = make([]uint32, 32) // room for the look to be refused by count alone
				for i := range c.pending {
					c.pending[i] = header{kind: kCredit}
				}
			}
			for i, h := range c.pending {
				if i < 16 {
					g.frame(uint16(i), h)
				}
			}
			if c.early {
				g.ep.pipes[splitKey{0, 3}] = &pipeIn{size: 100, early: true}
			}
			var r *Request
			if c.post {
				r = g.post(5, 100)
			}
			require.Equal(t, c.want, g.ep.pendingMayMatch(g.p, uint16(len(c.pending)), r))
		})
	}
}

// A pipelined message whose first fragment the steer starts: every
// fragment's body goes straight into the receive's buffers (a parts
// receive's head and then its body, the first fragment in both), onPipe
// copies none of them out of their slots, and the receive completes with
// the last one, the steer free again.
func TestSteerPlacesEveryFragment(t *testing.T) {
	for _, headLen := range []int{0, 12, 40} {
		t.Run(fmt.Sprintf("head %d", headLen), func(t *testing.T) {
			g := newSteerRig()
			r := g.post(5, 100-headLen)
			if headLen > 0 {
				r.head = make([]byte, headLen)
			}
			want := make([]byte, 100)
			for i := range want {
				want[i] = byte(i + 1)
			}
			for i, off := range []uint64{0, 40, 80} {
				n := min(40, 100-int(off))
				head := pipeHead(9, 100, off, 5)
				id := g.frame(uint16(i), header{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 9, addr: off})
				dst := g.p.steer.Steer(id, head, n)
				require.NotNil(t, dst, "fragment at %d not steered", off)
				got := 0
				for _, b := range dst {
					got += copy(b, want[int(off)+got:])
				}
				require.Equal(t, n, got, "fragment at %d: the steer's buffers", off)
				g.p.steer.Steered(true)
				// The endpoint handles the completion: the slot holds the header
				// only, the rest of the frame is stale.
				g.p.doneSeq++
				h := header{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 9, addr: off}
				g.ep.onPipe(g.p, &h, make([]byte, n))
				require.Equal(t, off+uint64(n) == 100, r.done.Load())
			}
			require.NoError(t, r.err)
			if headLen > 0 {
				require.Equal(t, want[:headLen], r.head, "the head")
			}
			require.Equal(t, want[headLen:], r.buf, "the body")
			require.Equal(t, uint64(3), g.p.stats.SteeredRecv.Msgs)
			require.Equal(t, steerOff, g.p.steer.state.Load())
			require.Empty(t, g.ep.pipes)
		})
	}
}

// A first fragment behind a pending message that may match the same
// receive is left to onPipe, and so is the rest of its message when it has
// not matched by then: the fragments come through their slots.
func TestSteerWaitsForAnEarlierMessage(t *testing.T) {
	g := newSteerRig()
	first := g.post(5, 100)
	g.frame(0, header{kind: kEager, ctx: 7, tag: 5})
	id := g.frame(1, header{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 9})
	require.Nil(t, g.p.steer.Steer(id, pipeHead(9, 100, 0, 5), 40))
	require.Empty(t, g.ep.pipes, "the PIPE started ahead of the EAGER before it")
	require.False(t, first.done.Load())
	require.Equal(t, steerOff, g.p.steer.state.Load())
}

// A receive whose steered fragment is still being read when its sender is
// lost is not completed (the caller would reuse the buffer the provider is
// writing into) until the provider has let go of it.
func TestSteerParksAFailedReceive(t *testing.T) {
	g := newSteerRig()
	r := g.steering(t)
	// Still reading the first fragment's body.
	cause := &PeerLostError{Rank: 0, Reporter: 1}
	g.ep.dropPipesLocked(g.p, cause)
	require.False(t, r.done.Load(), "completed while the provider writes its buffer")
	require.Len(t, g.ep.steerParked, 1)
	g.ep.unparkLocked(false)
	require.False(t, r.done.Load())

	g.p.steer.Steered(false)
	g.ep.unparkLocked(false)
	require.True(t, r.done.Load())
	require.ErrorIs(t, r.err, ErrPeerLost)
	require.Empty(t, g.ep.steerParked)
	require.Equal(t, steerOff, g.p.steer.state.Load())
}

// A receive that fails between fragments, the steer idle, completes at
// once; so does a parked one when its endpoint closes.
func TestSteerFailsAnIdleReceiveAtOnce(t *testing.T) {
	g := newSteerRig()
	r := g.steering(t)
	g.p.steer.Steered(true)
	g.ep.dropPipesLocked(g.p, &PeerLostError{Rank: 0, Reporter: 1})
	require.True(t, r.done.Load())
	require.ErrorIs(t, r.err, ErrPeerLost)

	g = newSteerRig()
	r = g.steering(t)
	g.ep.dropPipesLocked(g.p, &PeerLostError{Rank: 0, Reporter: 1})
	require.False(t, r.done.Load())
	g.ep.unparkLocked(true) // Close, once the queue pairs are gone
	require.True(t, r.done.Load())
}

// Only a plain or parts receive is steered into: the message a fold
// receive takes does not start early (its steer leaves it at once, with
// no pipeline started), and its fragments are folded out of their slots
// as the endpoint handles them.
func TestSteerLeavesAFoldReceive(t *testing.T) {
	g := newSteerRig()
	r := g.post(5, 100)
	folds := 0
	r.fold = func(dst, src []byte) { folds++; copy(dst, src) }
	id := g.frame(0, header{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 9})
	require.Nil(t, g.p.steer.Steer(id, pipeHead(9, 100, 0, 5), 40))
	require.Empty(t, g.ep.pipes, "a fold receive's message started early")
	require.Equal(t, steerOff, g.p.steer.state.Load())
	want := make([]byte, 100)
	for i := range want {
		want[i] = byte(3*i + 1)
	}
	for _, off := range []uint64{0, 40, 80} {
		n := min(40, 100-int(off))
		g.p.doneSeq++
		h := header{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 9, addr: off}
		g.ep.onPipe(g.p, &h, want[off:int(off)+n])
	}
	require.True(t, r.done.Load())
	require.NoError(t, r.err)
	require.Equal(t, want, r.buf)
	require.Equal(t, 3, folds, "each fragment folded as it came")
	require.Zero(t, g.p.stats.SteeredRecv.Msgs)
	require.Empty(t, g.ep.pipes)
}

// A message that comes whole in one PIPE fragment and is not steered
// (nobody waits for it yet) is what an EAGER frame would have been: no
// pipeline starts, early or at its handling, and it waits among the
// unexpected until a receive takes it.
func TestSteerLeavesAWholeUnexpectedMessageEager(t *testing.T) {
	g := newSteerRig()
	id := g.frame(0, header{kind: kPipe, ctx: 7, tag: 5, size: 60, id: 9})
	require.Nil(t, g.p.steer.Steer(id, pipeHead(9, 60, 0, 5), 60))
	require.Empty(t, g.ep.pipes, "started early with no receive posted")
	want := make([]byte, 60)
	for i := range want {
		want[i] = byte(i + 7)
	}
	g.p.doneSeq++
	h := header{kind: kPipe, ctx: 7, tag: 5, size: 60, id: 9}
	g.ep.onPipe(g.p, &h, want)
	require.Empty(t, g.ep.pipes, "a pipeline for a message that came whole")
	in := g.ep.m.find(envelope{ctx: 7, src: 0, tag: 5}, true)
	require.NotNil(t, in, "the message is not among the unexpected")
	require.Nil(t, in.pipe)
	require.Equal(t, want, in.data)
	require.Equal(t, uint64(1), g.p.stats.PipeRecv.Msgs)
}

// A later fragment whose header gives its message another size than the
// first did is a protocol error, not a fragment taken as placed: the steer
// measured it against the first's size and left it in its slot.
func TestSteerRefusesAFragmentOfAnotherSize(t *testing.T) {
	g := newSteerRig()
	r := g.steering(t)
	g.p.steer.Steered(true)
	g.p.doneSeq++
	h := header{kind: kPipe, ctx: 7, tag: 5, size: 100, id: 9}
	g.ep.onPipe(g.p, &h, make([]byte, 40))
	require.False(t, r.done.Load())
	g.ep.failErr = ErrClosed // the loss goes no further than this peer's messages

	id := g.frame(1, header{kind: kPipe, ctx: 7, tag: 5, size: 200, id: 9, addr: 40})
	require.Nil(t, g.p.steer.Steer(id, pipeHead(9, 200, 40, 5), 160), "steered past the receive's buffer")
	h = header{kind: kPipe, ctx: 7, tag: 5, size: 200, id: 9, addr: 40}
	g.ep.onPipe(g.p, &h, make([]byte, 160))
	require.True(t, g.p.broken)
	require.True(t, r.done.Load())
	var pe *ProtocolError
	require.ErrorAs(t, r.err, &pe)
}
