package comm

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/internal/lightmu"
)

// Persistent is a collective set up once and started many times
// (MPI-4's persistent collectives, MPI_Allreduce_init): a training loop's
// allreduce of the same gradient buffer. Its arguments, reduction kernel
// and algorithm are settled when it is made, and the goroutine that runs
// it in the background lives as long as it does, so a Start/Wait pair
// makes no argument checks, consults no cost model and allocates no
// closure, goroutine or Request; it takes its own lock three times,
// though, where a blocking call's one locked instruction is its turn
// (see docs/comm.md for what that costs).
//
// Start begins a run, which takes its turn in the communicator's
// collective order at that moment, as a non-blocking collective does; Wait
// (or Test, or WaitAny over Request()) completes it; then it may be
// started again. Its buffer belongs to it from Start until the run
// completes. Methods may be called from any goroutine, but one run is
// active at a time. Free it when done.
type Persistent struct {
	c    *Comm
	op   string
	plan *collectives.Plan
	req  Request // what Request returns; req.pers is p

	kick chan struct{} // Start → the worker, when it sleeps
	quit chan struct{}
	wg   sync.WaitGroup

	// mu is taken three times a run (Start, Wait's claim, the run's end),
	// nearly always by the one goroutine that starts and waits: a light
	// mutex, whose Unlock is no locked instruction.
	mu     lightmu.Mutex
	state  int           // pIdle, pStarted, pRunning, pEnded, pDone
	turn   chan struct{} // the active run's turn (queue.take)
	ctx    context.Context
	err    error
	doneCh chan struct{}       // made by a waiter that must block; closed when the run ends
	waited *collectives.Waited // the worker's run, once it has one
	wanted bool                // somebody waits for the active run
	freed  bool
	asleep bool // the worker waits for a kick, not napping (see worker)
}

// A run is active (MPI's term) from Start until Wait, Test or WaitAny
// reported its completion: only then may it start again or be freed.
const (
	pIdle    = iota // never started
	pStarted        // started, nobody runs it yet
	pRunning        // the worker or a waiter runs it
	pEnded          // the run ended (err is its result), not reported yet
	pDone           // the last run's completion was reported
)

// activeLocked reports whether a run is active.
func (p *Persistent) activeLocked() bool {
	return p.state == pStarted || p.state == pRunning || p.state == pEnded
}

// AllreduceInit makes a persistent Allreduce of buf under op on c. It
// does not communicate: every rank makes its own, and starts it in the
// same collective order. Arguments that are wrong (an op the element type
// does not support) fail here; a count that differs between ranks fails
// each run with ErrMismatch, as Allreduce does.
func AllreduceInit[T Element](ctx context.Context, c *Comm, buf []T, op Op) (*Persistent, error) {
	const name = "AllreduceInit"
	if err := c.check(name); err != nil {
		return nil, err
	}
	if ctx == nil {
		return nil, c.opErr(name, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	plan := collectives.PlanAllreduce(c.eng, buf, op)
	if err := plan.Err(); err != nil {
		return nil, c.wrap(name, NoPeer, NoTag, err)
	}
	return newPersistent(c, "Allreduce", plan), nil
}

func newPersistent(c *Comm, op string, plan *collectives.Plan) *Persistent {
	p := &Persistent{c: c, op: op, plan: plan, kick: make(chan struct{}, 1), quit: make(chan struct{}), asleep: true}
	p.req = Request{c: c, op: op, pers: p}
	p.wg.Add(1)
	go p.worker()
	return p
}

// Algorithm names the algorithm every run uses (see Comm.LastAlgorithm).
func (p *Persistent) Algorithm() string { return p.plan.Algorithm().String() }

// Request is the persistent collective as a *Request, for WaitAll,
// WaitAny and TestAny; it is the same one for every run.
func (p *Persistent) Request() *Request { return &p.req }

// Start begins a run. ctx bounds the run (as a non-blocking collective's
// start ctx does); it fails if a run is active or p was freed.
func (p *Persistent) Start(ctx context.Context) error {
	c := p.c
	if err := c.check(p.op); err != nil {
		return err
	}
	if ctx == nil {
		return c.opErr(p.op, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	p.mu.Lock()
	switch {
	case p.freed:
		p.mu.Unlock()
		return c.opErr(p.op, NoPeer, NoTag, fmt.Errorf("%w: the persistent collective was freed", ErrInvalidArgument))
	case p.activeLocked():
		p.mu.Unlock()
		return c.opErr(p.op, NoPeer, NoTag, fmt.Errorf("%w: started while its previous run is active (not waited for)", ErrInvalidArgument))
	}
	p.state, p.ctx, p.err, p.doneCh, p.waited, p.wanted = pStarted, ctx, nil, nil, nil, false
	p.turn = c.q.take()
	kick := p.asleep
	p.asleep = false
	p.mu.Unlock()
	if kick {
		nudge(p.kick)
	}
	return nil
}

// The worker watches for started runs in one of two ways. Asleep, it
// waits for Start's kick. But a kick per Start readies a parked goroutine,
// and with a P to spare the runtime wakes a thread that spins looking for
// it, even when Wait comes at once and runs the call itself (the training
// loop's Start+Wait): that cost more CPU than the plan saves
// (BenchmarkPersistentOverhead with -cpu 2). So once kicked the worker naps
// instead and looks for a run nobody has claimed after each nap, which
// grows from workerNapMin to workerNapMax while it finds none (each nap
// wakes a thread too, so they must be rare in the Start+Wait loop) and is
// back at workerNapMin after the worker ran one; after workerIdle of naps
// that found none it goes back to sleep. A run left to the background
// begins within workerNapMax, within workerNapMin when the worker ran the
// previous one.
const (
	workerNapMin = 50 * time.Microsecond
	workerNapMax = 500 * time.Microsecond
	workerIdle   = 10 * time.Millisecond
)

// worker runs started runs in the background, unless a waiter took them
// first. Until somebody waits, a run naps between its checks rather than
// spin (collectives.Waited), as a non-blocking collective does.
func (p *Persistent) worker() {
	defer p.wg.Done()
	stop := p.c.w.stop
	t := time.NewTimer(workerNapMin)
	defer t.Stop()
	asleep, nap, idle := true, workerNapMin, time.Duration(0)
	for {
		if asleep {
			select {
			case <-p.kick:
			case <-p.quit:
				return
			case <-stop:
				return
			}
		} else {
			t.Reset(nap)
			select {
			case <-t.C:
			case <-p.kick:
			case <-p.quit:
				return
			case <-stop:
				return
			}
		}
		p.mu.Lock()
		if p.state != pStarted {
			if !asleep {
				idle += nap
				nap = min(2*nap, workerNapMax)
			}
			if idle >= workerIdle {
				p.asleep = true // a Start from now on kicks
			}
			if asleep = p.asleep; asleep {
				nap, idle = workerNapMin, 0
			}
			p.mu.Unlock()
			continue
		}
		asleep, nap, idle = false, workerNapMin, 0
		p.state = pRunning
		w := collectives.NewWaited()
		p.waited = w
		if p.wanted {
			w.Set()
		}
		ctx := p.ctx
		p.mu.Unlock()
		p.execute(w.Context(ctx), pEnded)
	}
}

// execute runs the active run (claimed by the caller), records its result
// and leaves p in state end: pEnded for the worker (a Wait, Test or
// WaitAny is still to report it), pDone for a Wait that runs it itself.
func (p *Persistent) execute(ctx context.Context, end int) error {
	c := p.c
	var err error
	if err = c.q.wait(ctx, p.turn); err != nil {
		err = c.opErr(p.op, NoPeer, NoTag, err)
	} else {
		err = p.plan.Run(ctx)
		c.q.done()
		if err != nil {
			err = c.wrap(p.op, NoPeer, NoTag, err)
		}
	}
	p.mu.Lock()
	p.state, p.err, p.turn = end, err, nil
	ch := p.doneCh
	p.mu.Unlock()
	if ch != nil {
		close(ch)
	}
	return err
}

// Wait waits for the active run to complete and returns its error (nil
// at once when p was never started; the last run's result when it has
// completed). When the run has not begun in the background yet, Wait runs
// it itself, bounded by Start's ctx; otherwise ctx bounds the wait only.
func (p *Persistent) Wait(ctx context.Context) error {
	p.mu.Lock()
	switch p.state {
	case pIdle:
		p.mu.Unlock()
		return nil
	case pDone, pEnded:
		p.state = pDone
		err := p.err
		p.mu.Unlock()
		return err
	case pStarted:
		p.state = pRunning
		rctx := p.ctx
		p.mu.Unlock()
		return p.execute(rctx, pDone)
	}
	ch := p.waitChanLocked()
	p.mu.Unlock()
	if ctx == nil {
		return p.c.opErr(p.op, NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return p.c.opErr(p.op, NoPeer, NoTag, fmt.Errorf("waiting: %w", ctx.Err()))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.state = pDone
	return p.err
}

// waitChanLocked is a channel closed when the active run ends (closed
// already when none is active), and marks the run waited for.
func (p *Persistent) waitChanLocked() <-chan struct{} {
	if p.state != pStarted && p.state != pRunning {
		return closedChan
	}
	p.wanted = true
	if p.waited != nil {
		p.waited.Set()
	}
	if p.doneCh == nil {
		p.doneCh = make(chan struct{})
	}
	return p.doneCh
}

var closedChan = func() chan struct{} { ch := make(chan struct{}); close(ch); return ch }()

// Test reports whether the active run has completed, without blocking,
// and its error when it has (done and nil when p was never started).
func (p *Persistent) Test() (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.state {
	case pStarted, pRunning:
		return false, nil
	case pEnded:
		p.state = pDone
	}
	return true, p.err
}

// Free stops p's goroutine. It fails while a run is active; after it p
// cannot be started again. Freeing twice is a no-op.
func (p *Persistent) Free() error {
	p.mu.Lock()
	if p.activeLocked() {
		p.mu.Unlock()
		return p.c.opErr(p.op, NoPeer, NoTag, fmt.Errorf("%w: freed while a run is active; Wait first", ErrInvalidArgument))
	}
	already := p.freed
	p.freed = true
	p.mu.Unlock()
	if !already {
		close(p.quit)
	}
	p.wg.Wait()
	return nil
}
