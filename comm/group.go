package comm

import (
	"context"
	"time"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/p2p"
)

// group adapts a communicator's collective channel (context 2id+1 of the
// endpoint) to collectives.Group, translating communicator ranks to world
// ranks. It also offers Topology (host of each rank), LinkInfo (the
// device's estimate of latency and bandwidth to each peer), Crowding,
// EagerLimiter and AnySourceReceiver.
type group struct{ c *Comm }

var (
	_ collectives.Group             = (*group)(nil)
	_ collectives.Topology          = (*group)(nil)
	_ collectives.LinkInfo          = (*group)(nil)
	_ collectives.SingleCopy        = (*group)(nil)
	_ collectives.Crowding          = (*group)(nil)
	_ collectives.AnySourceReceiver = (*group)(nil)
	_ collectives.EagerLimiter      = (*group)(nil)
	_ collectives.NowSender         = (*group)(nil)
	_ collectives.OneSided          = (*worldGroup)(nil)
	_ collectives.SharedMemoryGroup = (*worldGroup)(nil)
	_ collectives.PassiveWaiter     = groupReq{}
	_ collectives.Releaser          = groupReq{}
)

func (g *group) Rank() int { return g.c.rank }
func (g *group) Size() int { return g.c.size }

func (g *group) Isend(peer, tag int, buf []byte) (collectives.Request, error) {
	r, err := g.c.collCh.Isend(g.c.members[peer], tag, buf)
	if err != nil {
		return nil, err
	}
	return groupReq{r}, nil
}

// SendNow is the collectives.NowSender capability (p2p.Channel.SendNow,
// and SendPartsNow for a message of two buffers).
func (g *group) SendNow(peer, tag int, head, body []byte) (bool, error) {
	if head != nil {
		return g.c.collCh.SendPartsNow(g.c.members[peer], tag, head, body)
	}
	return g.c.collCh.SendNow(g.c.members[peer], tag, body)
}

func (g *group) Irecv(peer, tag int, buf []byte) (collectives.Request, error) {
	r, err := g.c.collCh.Irecv(g.c.members[peer], tag, buf)
	if err != nil {
		return nil, err
	}
	return groupReq{r}, nil
}

// IrecvFold is the collectives.FoldReceiver capability: p2p folds the
// message into buf as it arrives (p2p.Channel.IrecvFold).
func (g *group) IrecvFold(peer, tag int, buf []byte, unit int, fold func(dst, src []byte)) (collectives.Request, error) {
	r, err := g.c.collCh.IrecvFold(g.c.members[peer], tag, buf, unit, fold)
	if err != nil {
		return nil, err
	}
	return groupReq{r}, nil
}

// IsendParts is the collectives.PartsSender capability: p2p sends head
// and body as one message from where they are (p2p.Channel.IsendParts).
func (g *group) IsendParts(peer, tag int, head, body []byte) (collectives.Request, error) {
	r, err := g.c.collCh.IsendParts(g.c.members[peer], tag, head, body)
	if err != nil {
		return nil, err
	}
	return groupReq{r}, nil
}

// IrecvParts is the collectives.PartsReceiver capability: p2p places the
// message's head and the rest apart (p2p.Channel.IrecvParts).
func (g *group) IrecvParts(peer, tag int, head, body []byte) (collectives.Request, error) {
	r, err := g.c.collCh.IrecvParts(g.c.members[peer], tag, head, body)
	if err != nil {
		return nil, err
	}
	return groupReq{r}, nil
}

// FoldLimit is p2p's (Endpoint.FoldLimit): above it a message comes by
// rendezvous, which the engine receives into its own scratch memory.
func (g *group) FoldLimit(peer int) int { return g.c.w.ep.FoldLimit(g.c.members[peer]) }

func (g *group) HostOf(rank int) int { return g.c.w.hostIdx[g.c.members[rank]] }

// Link is the world's estimate (world.link): the transport's, or the
// network Init measured between hosts where that is clearly slower.
func (g *group) Link(peer int) (time.Duration, float64) {
	return g.c.w.link(g.c.members[peer])
}

// EagerLimit is p2p's, the same on both ranks of a pair: the collectives
// send a payload that fits one eager message with its header in that
// message.
func (g *group) EagerLimit(peer int) int { return g.c.w.ep.EagerLimit(g.c.members[peer]) }

// Crowding is the job's: the processes of every communicator share the
// hosts' CPUs, and every rank reads it from the same host records.
func (g *group) Crowding() float64 { return g.c.w.ep.Crowding() }

// SingleCopyMin is what Init measured on rank 0's host, the same on every
// rank (Comm.SingleCopyMin).
func (g *group) SingleCopyMin() int { return g.c.w.singleCopy }

// IrecvAny receives from any rank of the communicator: only its members
// send on its collective context (see Split), so AnySource cannot match a
// stranger. The Engine's mismatch watcher then needs one goroutine, not
// one per peer.
func (g *group) IrecvAny(tag int, buf []byte) (collectives.Request, error) {
	r, err := g.c.collCh.Irecv(p2p.AnySource, tag, buf)
	if err != nil {
		return nil, err
	}
	return groupReq{r}, nil
}

// groupReq is a p2p request as a collectives.Request. It is a value
// wrapping one pointer, so converting it to the interface allocates
// nothing.
type groupReq struct{ r *p2p.Request }

func (gr groupReq) Wait(ctx context.Context) (int, error) {
	st, err := gr.r.Wait(ctx)
	return st.Count, err
}

func (gr groupReq) Cancel() { gr.r.Cancel() }

// Release recycles the p2p request (the Engine calls it once per request).
func (gr groupReq) Release() { gr.r.Release() }

// WaitPassive lets the Engine's watchers sleep instead of poll.
func (gr groupReq) WaitPassive(ctx context.Context) (int, error) {
	st, err := gr.r.WaitPassive(ctx)
	return st.Count, err
}

// worldGroup is the world communicator's group: it adds one-sided windows.
// Only the world has them, because p2p's window notifications are per
// endpoint: two communicators writing with notifications at once could not
// tell theirs apart.
type worldGroup struct{ group }

// Shared is the world's shared memory, when every rank is on one host.
func (g *worldGroup) Shared() collectives.SharedRegion {
	if s := g.c.w.shared; s != nil {
		return s
	}
	return nil
}

func (g *worldGroup) Expose(ctx context.Context, buf []byte) (collectives.Window, error) {
	w, err := g.c.w.ep.NewWindow(ctx, buf)
	if err != nil {
		return nil, err
	}
	return &window{w: w, ep: g.c.w.ep}, nil
}

type window struct {
	w  *p2p.Window
	ep *p2p.Endpoint
}

func (w *window) Put(peer, off int, src []byte, imm uint32) (collectives.Request, error) {
	r, err := w.w.Iwrite(peer, off, src, true, imm)
	if err != nil {
		return nil, err
	}
	return groupReq{r}, nil
}

func (w *window) WaitNotify(ctx context.Context, peer int) (uint32, error) {
	n, err := w.ep.WaitNotify(ctx, peer)
	return n.Value, err
}

// windowCloseTimeout bounds the collective window Close (the engine's
// Close has no ctx): peers that never close theirs must not hang this one.
const windowCloseTimeout = 10 * time.Second

func (w *window) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), windowCloseTimeout)
	defer cancel()
	return w.w.Close(ctx)
}
