package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest" // p2p registers the shm and tcp providers
)

// p2pGroup adapts a p2p channel (one private context per Engine, as comm
// gives each communicator) to collectives.Group, with windows for the
// one-sided ring. comm carries the production version of this adapter.
type p2pGroup struct {
	ep *p2p.Endpoint
	ch *p2p.Channel
}

func (g *p2pGroup) Rank() int { return g.ep.Rank() }
func (g *p2pGroup) Size() int { return g.ep.Size() }

type p2pReq struct{ r *p2p.Request }

func (q p2pReq) Wait(ctx context.Context) (int, error) {
	st, err := q.r.Wait(ctx)
	return st.Count, err
}

func (q p2pReq) Cancel() { q.r.Cancel() }

func wrap(r *p2p.Request, err error) (collectives.Request, error) {
	if err != nil {
		return nil, err
	}
	return p2pReq{r}, nil
}

func (g *p2pGroup) Isend(peer, tag int, buf []byte) (collectives.Request, error) {
	return wrap(g.ch.Isend(peer, tag, buf))
}

func (g *p2pGroup) Irecv(peer, tag int, buf []byte) (collectives.Request, error) {
	return wrap(g.ch.Irecv(peer, tag, buf))
}

// p2pSharedGroup adds shared memory: a p2p window of provider memory that
// every rank maps (Window.Direct) over the shm transport.
type p2pSharedGroup struct {
	p2pGroup
	w *p2p.Window
}

func (g *p2pSharedGroup) Shared() collectives.SharedRegion { return g }
func (g *p2pSharedGroup) Mem(rank int) []byte              { return g.w.Direct(rank) }
func (g *p2pSharedGroup) Failed() <-chan struct{}          { return g.ep.Failed() }
func (g *p2pSharedGroup) Err() error                       { return g.ep.Err() }

// WaitPolicy: the ranks are goroutines of this process; waits never sleep.
func (g *p2pSharedGroup) WaitPolicy() shmsync.Policy {
	return shmsync.Policy{Yield: shmsync.Forever, Gosched: true}
}

func (g *p2pGroup) Expose(ctx context.Context, buf []byte) (collectives.Window, error) {
	w, err := g.ep.NewWindow(ctx, buf)
	if err != nil {
		return nil, err
	}
	return &p2pWin{w: w}, nil
}

type p2pWin struct{ w *p2p.Window }

func (w *p2pWin) Put(peer, off int, src []byte, imm uint32) (collectives.Request, error) {
	return wrap(w.w.Iwrite(peer, off, src, true, imm))
}

func (w *p2pWin) WaitNotify(ctx context.Context, peer int) (uint32, error) {
	n, err := w.w.WaitNotify(ctx, peer)
	return n.Value, err
}

func (w *p2pWin) Close() error { return w.w.Close(context.Background()) }

// TestOverP2P runs every collective and algorithm over real p2p endpoints
// (in-process harness; loop, shm and tcp providers) against the serial
// references: the contract the fake models is the one p2p keeps. With
// RDMAGO_LONG=1: every rank count and size on every provider.
func TestOverP2P(t *testing.T) {
	t.Parallel()
	type run struct {
		provider string
		p        int
	}
	runs := []run{{"loop", 1}, {"loop", 2}, {"loop", 3}, {"loop", 5}, {"shm", 3}, {"tcp", 3}}
	if raceEnabled {
		runs = []run{{"loop", 2}, {"loop", 3}, {"shm", 3}, {"tcp", 2}}
	}
	ns := []int{0, 7, 1000}
	if long {
		runs, ns = nil, sizes
		for _, prov := range []string{"loop", "shm", "tcp"} {
			for _, p := range rankCounts {
				runs = append(runs, run{prov, p})
			}
		}
	}
	for _, rn := range runs {
		p := rn.p
		t.Run(name("provider", rn.provider, "p", p), func(t *testing.T) {
			p2ptest.Run(t, p, p2ptest.Options{Provider: rn.provider}, func(ctx context.Context, ep *p2p.Endpoint) error {
				id := uint32(100)
				for _, coll := range collectives.Collectives() {
					algs := collectives.Algorithms(coll)
					for _, alg := range algs {
						if alg == collectives.Hierarchical {
							continue // needs a topology; covered over the fake
						}
						if alg == collectives.SharedMemory && rn.provider != "shm" {
							continue // needs shared memory
						}
						id++
						ch, err := ep.Channel(id)
						if err != nil {
							return err
						}
						var g collectives.Group = &p2pGroup{ep: ep, ch: ch}
						if alg == collectives.SharedMemory {
							// A fresh region per Engine, as the Engine's
							// round ids start over.
							w, err := ep.AllocWindow(ctx, collectives.SharedRegionSize(16<<10))
							if err != nil {
								return err
							}
							defer w.Close(ctx)
							g = &p2pSharedGroup{p2pGroup{ep: ep, ch: ch}, w}
						}
						e, err := collectives.New(g, force(coll, alg))
						if err != nil {
							return err
						}
						for _, n := range ns {
							if f := gridCases[coll]; f != nil {
								err = f(ctx, e, ep.Rank(), p, n)
							} else {
								err = collectives.Barrier(ctx, e)
							}
							if err == nil {
								err = checkAlg(e, alg)
							}
							if err != nil {
								e.Close()
								return fmt.Errorf("%v/%v n=%d: %w", coll, alg, n, err)
							}
						}
						if err := e.Close(); err != nil {
							return err
						}
					}
				}
				// One large allreduce: split payloads through p2p's rendezvous.
				ch, err := ep.Channel(id + 1)
				if err != nil {
					return err
				}
				e, err := collectives.New(&p2pGroup{ep: ep, ch: ch}, collectives.Options{})
				if err != nil {
					return err
				}
				defer e.Close()
				buf := make([]float32, 1<<18+3)
				for i := range buf {
					buf[i] = float32(i%5 + ep.Rank())
				}
				if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
					return err
				}
				for i, v := range buf {
					if want := float32(p*(i%5) + p*(p-1)/2); v != want {
						return fmt.Errorf("large allreduce: element %d is %v, want %v", i, v, want)
					}
				}
				return nil
			})
		})
	}
}

// TestPeerLostOverP2P: rank 1 revokes the endpoint in the middle of a
// stream of allreduces (as p2p does when it sees a link die); every rank
// must fail with p2p's ErrPeerLost naming rank 2, none may hang.
func TestPeerLostOverP2P(t *testing.T) {
	t.Parallel()
	const p = 4
	errs := make([]error, p)
	err := p2ptest.RunErr(p, p2ptest.Options{Provider: "loop"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		ch, err := ep.Channel(7)
		if err != nil {
			return err
		}
		e, err := collectives.New(&p2pGroup{ep: ep, ch: ch}, collectives.Options{})
		if err != nil {
			return err
		}
		defer e.Close()
		buf := make([]float64, 5000)
		for i := 0; i < 1000; i++ {
			if ep.Rank() == 1 && i == 20 {
				ep.Revoke(2, fmt.Errorf("test: rank 2 declared dead"))
			}
			if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
				errs[ep.Rank()] = err
				return nil
			}
		}
		return fmt.Errorf("rank %d: 1000 allreduces and no failure", ep.Rank())
	})
	if err != nil {
		t.Fatal(err)
	}
	for r, err := range errs {
		var pl *p2p.PeerLostError
		if !errors.As(err, &pl) || pl.Rank != 2 {
			t.Errorf("rank %d: %v, want p2p.PeerLostError for rank 2", r, err)
		}
		if !errors.Is(err, p2p.ErrPeerLost) {
			t.Errorf("rank %d: %v does not match p2p.ErrPeerLost", r, err)
		}
	}
}
