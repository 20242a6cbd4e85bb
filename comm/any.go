package comm

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdmago/rdmago/p2p"
)

// TestAny reports whether one of reqs has completed, without blocking:
// when one has, it returns the lowest such index with what Wait would
// return for it. Requests of any kind may be mixed (point-to-point,
// non-blocking, persistent and grouped collectives). Nil entries are
// skipped; with none left it returns index -1 and done. A completed
// request stays completed: set its entry to nil to look at the others.
func TestAny(reqs ...*Request) (index int, st Status, done bool, err error) {
	live := false
	for i, r := range reqs {
		if r == nil {
			continue
		}
		live = true
		if st, done, err := r.Test(); done {
			return i, st, true, err
		}
	}
	return -1, Status{}, !live, nil
}

// WaitAny waits until one of reqs completes and returns its index and
// what Wait would return for it (the lowest index when several have).
// Requests of any kind may be mixed, from any communicators. Nil entries
// are skipped; with none left it returns -1 at once. When ctx ends first
// nothing is canceled and the error wraps ctx's. A completed request stays
// completed: set its entry to nil to wait for the others.
func WaitAny(ctx context.Context, reqs ...*Request) (int, Status, error) {
	var first *Request
	for _, r := range reqs {
		if r != nil {
			first = r
			break
		}
	}
	if first == nil {
		return -1, Status{}, nil
	}
	if ctx == nil {
		return -1, Status{}, first.c.opErr("WaitAny", NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	if i, st, done, err := TestAny(reqs...); done {
		return i, st, err
	}
	// Point-to-point requests of one endpoint: p2p waits for them itself.
	ep := first.endpoint()
	p2pOnly := true
	for _, r := range reqs {
		if r != nil && (r.p == nil || r.endpoint() != ep) {
			p2pOnly = false
			break
		}
	}
	if p2pOnly {
		ps := make([]*p2p.Request, len(reqs))
		for i, r := range reqs {
			if r != nil {
				r.startCtx(ctx)
				ps[i] = r.p
			}
		}
		i, _, err := p2p.WaitAny(ctx, ps...)
		if err != nil {
			return -1, Status{}, first.c.opErr("WaitAny", NoPeer, NoTag, fmt.Errorf("waiting: %w", ctx.Err()))
		}
		st, err := reqs[i].Wait(ctx) // completed: its status
		return i, st, err
	}

	// A mix: one goroutine per request that has a done channel, one per
	// endpoint for the point-to-point ones; the first to report wins.
	wctx, cancel := context.WithCancel(ctx)
	hit := make(chan int, len(reqs))
	var wg sync.WaitGroup
	byEP := map[*p2p.Endpoint][]int{}
	for i, r := range reqs {
		switch {
		case r == nil:
		case r.p != nil:
			r.startCtx(ctx)
			byEP[r.endpoint()] = append(byEP[r.endpoint()], i)
		default:
			wg.Go(func() {
				if r.watch(wctx) {
					hit <- i
				}
			})
		}
	}
	for _, idx := range byEP {
		ps := make([]*p2p.Request, len(idx))
		for j, i := range idx {
			ps[j] = reqs[i].p
		}
		wg.Go(func() {
			if j, _, err := p2p.WaitAny(wctx, ps...); err == nil {
				hit <- idx[j]
			}
		})
	}
	var err error
	select {
	case <-hit:
	case <-ctx.Done():
		err = first.c.opErr("WaitAny", NoPeer, NoTag, fmt.Errorf("waiting: %w", ctx.Err()))
	}
	cancel()
	wg.Wait()
	if err != nil {
		return -1, Status{}, err
	}
	// The lowest completed index, as TestAny reports it.
	i, st, _, err := TestAny(reqs...)
	return i, st, err
}

func (r *Request) endpoint() *p2p.Endpoint { return r.c.w.ep }

// watch waits until r, a request of a kind other than point-to-point,
// completes (true) or ctx ends (false), without canceling anything. It
// tells a collective that its caller now waits, so that it stops napping.
func (r *Request) watch(ctx context.Context) bool {
	var done <-chan struct{}
	switch {
	case r.pers != nil:
		r.pers.mu.Lock()
		done = r.pers.waitChanLocked()
		r.pers.mu.Unlock()
	case r.bat != nil:
		return r.bat.watch(ctx)
	default:
		r.waited.Set()
		r.launch()
		done = r.fin.Chan()
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}
