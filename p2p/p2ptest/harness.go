// Package p2ptest runs N ranks of a job as goroutines of one process, each
// with its own p2p endpoint over a chosen verbs provider, joined through an
// in-memory rendezvous. The p2p tests and the collectives' tests use it.
//
//	p2ptest.Run(t, 4, p2ptest.Options{Provider: "loop"}, func(ctx context.Context, ep *p2p.Endpoint) error {
//		if ep.Rank() == 0 {
//			return ep.Send(ctx, 1, 7, []byte("hi"))
//		}
//		...
//	})
//
// The "loop" provider is linked in by this package; import others (tcp,
// shm) in the test for their names to be known.
package p2ptest

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/p2p"
	_ "github.com/rdmago/rdmago/verbs/loop"
)

// Options configure a harness run.
type Options struct {
	// Provider is the verbs provider every endpoint uses; default "loop".
	// "auto" lets p2p choose per peer (shm here, as all ranks share a host).
	Provider string
	// P2P are the endpoint options (Provider is overridden by the field
	// above). With more than 4 ranks, EagerSlots defaults to 8 instead of
	// p2p's 32, as every rank's buffers live in this one process.
	P2P p2p.Options
	// Timeout bounds the whole run (set-up, the function, Close); default 60 s.
	Timeout time.Duration
}

// Start creates n endpoints joined through an in-memory rendezvous, in
// parallel (New is a collective). On error every endpoint created is closed.
func Start(ctx context.Context, n int, o Options) ([]*p2p.Endpoint, error) {
	if o.Provider == "" {
		o.Provider = "loop"
	}
	po := o.P2P
	po.Provider = o.Provider
	if po.EagerSlots == 0 && n > 4 {
		// All ranks share this process: p2p's default of 32 slots per peer
		// costs about 1 MiB per pair and rank, 260 MiB for 16 ranks.
		po.EagerSlots = 8
	}
	stores, err := bootstrap.NewMemory(n)
	if err != nil {
		return nil, err
	}
	eps := make([]*p2p.Endpoint, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { eps[r], errs[r] = p2p.New(ctx, stores[r], po) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		Close(eps)
		return nil, err
	}
	return eps, nil
}

// Close closes every non-nil endpoint, in parallel (Close waits for peers
// that still read from us).
func Close(eps []*p2p.Endpoint) {
	var wg sync.WaitGroup
	for _, ep := range eps {
		if ep != nil {
			wg.Go(func() { _ = ep.Close() })
		}
	}
	wg.Wait()
}

// Run starts n ranks and runs f on each in its own goroutine, then closes
// the endpoints. Every rank's error is reported with its rank through
// t.Errorf; a run that exceeds the timeout fails instead of hanging. When a
// rank fails (or panics), the context of the others is canceled so that
// they do not wait for it forever.
func Run(t testing.TB, n int, o Options, f func(ctx context.Context, ep *p2p.Endpoint) error) {
	t.Helper()
	if err := RunErr(n, o, f); err != nil {
		t.Error(err)
	}
}

// RunErr is Run returning the joined errors of all ranks instead of
// reporting them.
func RunErr(n int, o Options, f func(ctx context.Context, ep *p2p.Endpoint) error) error {
	if o.Timeout <= 0 {
		o.Timeout = 60 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	eps, err := Start(ctx, n, o)
	if err != nil {
		return fmt.Errorf("starting %d ranks over %s: %w", n, o.Provider, err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, ep := range eps {
		wg.Go(func() {
			defer func() {
				if v := recover(); v != nil {
					errs[r] = fmt.Errorf("rank %d panicked: %v\n%s", r, v, debug.Stack())
					cancel()
				}
			}()
			if err := f(ctx, ep); err != nil {
				errs[r] = fmt.Errorf("rank %d: %w", r, err)
				cancel() // do not leave the other ranks waiting for this one
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.Timeout + 5*time.Second):
		return fmt.Errorf("ranks still running %v after the run's timeout", o.Timeout+5*time.Second)
	}
	Close(eps)
	return errors.Join(errs...)
}
