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
// device's estimate of latency and bandwidth to each peer) and
// AnySourceReceiver.
type group struct{ c *Comm }

var (
	_ collectives.Group             = (*group)(nil)
	_ collectives.Topology          = (*group)(nil)
	_ collectives.LinkInfo          = (*group)(nil)
	_ collectives.AnySourceReceiver = (*group)(nil)
	_ collectives.OneSided          = (*worldGroup)(nil)
)

func (g *group) Rank() int { return g.c.rank }
func (g *group) Size() int { return g.c.size }

func (g *group) Isend(ctx context.Context, peer, tag int, buf []byte) (collectives.Request, error) {
	r, err := g.c.collCh.Isend(g.c.members[peer], tag, buf)
	if err != nil {
		return nil, err
	}
	return newGroupReq(ctx, r), nil
}

func (g *group) Irecv(ctx context.Context, peer, tag int, buf []byte) (collectives.Request, error) {
	r, err := g.c.collCh.Irecv(g.c.members[peer], tag, buf)
	if err != nil {
		return nil, err
	}
	return newGroupReq(ctx, r), nil
}

func (g *group) HostOf(rank int) int { return g.c.w.hostIdx[g.c.members[rank]] }

func (g *group) Link(peer int) (time.Duration, float64) {
	return g.c.w.ep.Link(g.c.members[peer])
}

// IrecvAny receives from any rank of the communicator: only its members
// send on its collective context (see Split), so AnySource cannot match a
// stranger. The Engine's mismatch watcher then needs one goroutine, not
// one per peer.
func (g *group) IrecvAny(ctx context.Context, tag int, buf []byte) (collectives.Request, error) {
	r, err := g.c.collCh.Irecv(p2p.AnySource, tag, buf)
	if err != nil {
		return nil, err
	}
	return newGroupReq(ctx, r), nil
}

// groupReq is a p2p request that the ctx it was started with cancels, as
// the Group contract asks: p2p requests take no ctx of their own.
type groupReq struct {
	r    *p2p.Request
	stop func() bool
}

func newGroupReq(ctx context.Context, r *p2p.Request) *groupReq {
	gr := &groupReq{r: r}
	if ctx.Done() != nil && !r.Done() {
		gr.stop = context.AfterFunc(ctx, r.Cancel)
	}
	return gr
}

func (gr *groupReq) Wait(ctx context.Context) (int, error) {
	st, err := gr.r.Wait(ctx)
	if gr.stop != nil && gr.r.Done() {
		gr.stop()
	}
	return st.Count, err
}

// worldGroup is the world communicator's group: it adds one-sided windows.
// Only the world has them, because p2p's window notifications are per
// endpoint: two communicators writing with notifications at once could not
// tell theirs apart.
type worldGroup struct{ group }

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

func (w *window) Put(ctx context.Context, peer, off int, src []byte, imm uint32) (collectives.Request, error) {
	r, err := w.w.Iwrite(peer, off, src, true, imm)
	if err != nil {
		return nil, err
	}
	return newGroupReq(ctx, r), nil
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
