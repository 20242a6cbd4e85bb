//go:build linux

package shm

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// cq is a completion queue. Completions come from two places: the local
// queue (requester completions and flushes, produced by this process) and
// the shared receive rings of the queue pairs whose RecvCQ it is (receive
// completions, produced by the peers that wrote them). Poll drains both;
// Wait spins, yields, then sleeps on the CQ's futex doorbell, which every
// producer rings after it publishes, if somebody sleeps (internal/shmsync).
type cq struct {
	d     *Device
	idx   uint32
	db    doorbell
	depth int

	mu     sync.Mutex
	local  []verbs.WC
	lhead  int
	nlocal atomic.Int64
	rr     int

	rqs    atomic.Pointer[[]*QP] // copy on write, under mu
	nQP    atomic.Int32
	closed atomic.Bool

	// WaitSleep's parking socket (park.go), made on first use.
	park       atomic.Pointer[net.UnixConn]
	parkMake   sync.Mutex // makes park; guards parkFailed
	parkFailed bool
	parkTurn   chan struct{} // one parked sleeper at a time
	// The parked sleeper's drain of its socket (drainPark), its buffer and
	// what it found: kept here, under parkTurn, so that a sleep allocates
	// no closure.
	parkDrain func(fd uintptr) bool
	parkBuf   [16]byte
	parkGot   bool
}

func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 || depth > d.Caps().MaxCQE {
		return nil, d.opErr("CreateCQ", 0, -1, fmt.Errorf("%w: depth %d (1..%d)", verbs.ErrInvalidArgument, depth, d.Caps().MaxCQE))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, d.opErr("CreateCQ", 0, -1, verbs.ErrClosed)
	}
	idx := -1
	for i := 1; i < maxCQ; i++ {
		if !d.cqUsed[i] {
			idx = i
			break
		}
	}
	if idx < 0 {
		return nil, d.opErr("CreateCQ", 0, -1, fmt.Errorf("%w: all %d completion queues of the device are in use", verbs.ErrInvalidArgument, maxCQ-1))
	}
	d.cqUsed[idx] = true
	c := &cq{d: d, idx: uint32(idx), db: d.doorbellAt(d.mem, uint32(idx), d.sockName), depth: depth,
		local: make([]verbs.WC, 0, min(depth, 4096)), parkTurn: make(chan struct{}, 1)}
	c.db.bell.Reset()
	atomic.StoreUint32(c.db.parked, 0)
	atomic.StoreUint32(c.db.woken, 0)
	c.rqs.Store(&[]*QP{})
	d.cqs[c] = struct{}{}
	return c, nil
}

// push adds a locally produced completion.
func (c *cq) push(wc verbs.WC) {
	c.mu.Lock()
	c.local = append(c.local, wc)
	c.nlocal.Add(1)
	c.mu.Unlock()
	c.db.ring()
}

func (c *cq) Poll(wc []verbs.WC) int {
	if len(wc) == 0 || c.closed.Load() || !c.ready() {
		return 0 // the common empty poll takes no lock
	}
	rqs := *c.rqs.Load()
	for _, q := range rqs {
		q.checkRemoteErr()
	}
	racesync.Acquire()
	c.mu.Lock()
	n := 0
	for n < len(wc) && c.lhead < len(c.local) {
		wc[n] = c.local[c.lhead]
		c.lhead++
		n++
	}
	if n > 0 {
		c.nlocal.Add(int64(-n))
		if c.lhead == len(c.local) {
			c.local, c.lhead = c.local[:0], 0
		}
	}
	rqs = *c.rqs.Load()
	if k := len(rqs); k > 0 && n < len(wc) {
		c.rr++
		for i := 0; i < k && n < len(wc); i++ {
			n += rqs[(c.rr+i)%k].pollRecv(wc[n:])
		}
	}
	c.mu.Unlock()
	return n
}

// ready reports whether Poll would find a completion (or a queue pair
// needs to flush because a peer put it in ERR).
func (c *cq) ready() bool {
	if c.nlocal.Load() > 0 {
		return true
	}
	for _, q := range *c.rqs.Load() {
		if q.recvReady() {
			return true
		}
	}
	return false
}

func (c *cq) Wait(ctx context.Context) error { return c.wait(ctx, c.d.wait) }

var _ verbs.SleepWaiter = (*cq)(nil)

// wait polls (spins, yields) and then sleeps on the CQ's doorbell by p
// (internal/shmsync), which every producer rings after it publishes.
func (c *cq) wait(ctx context.Context, p shmsync.Policy) error {
	if c.ready() {
		return nil
	}
	if err := c.stopped(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// The loop is here, not in Policy.Poll, so that ready is inlined, and
	// polls 32 times between checks with a counter in a register: per poll
	// this costs about the instructions of the loop before shmsync (a
	// call through a func value doubled them). w is declared outside the
	// for statement, whose init variables are copied on every iteration.
	p.CheckEvery = 1
	w := p.Poller(c.stopped)
	for {
		for range 32 {
			if c.ready() {
				return nil
			}
		}
		if w.Over(ctx) {
			if err := w.Err(ctx); err != nil {
				return err
			}
			return c.sleep(ctx, p)
		}
	}
}

// sleep is wait's last phase.
func (c *cq) sleep(ctx context.Context, p shmsync.Policy) error {
	// The futex words live in the device memory: hold it mapped while we
	// sleep on them (Device.Close wakes us before it unmaps; Sleep's own
	// kick on cancellation is over when it returns).
	c.d.memGuard.RLock()
	defer c.d.memGuard.RUnlock()
	if c.d.memGone {
		return c.d.opErr("CQ.Wait", 0, -1, verbs.ErrClosed)
	}
	// The nap is a backstop only: producers, Close and ctx wake us.
	return c.db.bell.Sleep(ctx, c.ready, c.stopped, time.Second)
}

// stopped is ErrClosed once the CQ is closed, else nil.
func (c *cq) stopped() error {
	if c.closed.Load() {
		return c.d.opErr("CQ.Wait", 0, -1, verbs.ErrClosed)
	}
	return nil
}

// sleepOver is the re-check of a waiter that has announced itself on the
// doorbell (parked): whether it must not sleep after all, and with what
// result (nil: a completion is ready).
func (c *cq) sleepOver(ctx context.Context) (bool, error) {
	if c.ready() {
		return true, nil
	}
	if err := c.stopped(); err != nil {
		return true, err
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return false, nil
}

func (c *cq) Close() error {
	d := c.d
	d.mu.Lock()
	if c.closed.Load() {
		d.mu.Unlock()
		return d.opErr("CQ.Close", 0, -1, verbs.ErrClosed)
	}
	if n := c.nQP.Load(); n != 0 && !d.closed {
		d.mu.Unlock()
		return d.opErr("CQ.Close", 0, -1, fmt.Errorf("%w: %d queue pairs still use the CQ", verbs.ErrInUse, n))
	}
	d.mu.Unlock()
	c.shut()
	return nil
}

// shut closes the CQ and wakes its waiters.
func (c *cq) shut() {
	d := c.d
	d.mu.Lock()
	if c.closed.Swap(true) {
		d.mu.Unlock()
		return
	}
	delete(d.cqs, c)
	d.mu.Unlock()
	c.db.kick()
	c.closePark()
	d.mu.Lock()
	d.cqUsed[c.idx] = false
	d.mu.Unlock()
}

func (c *cq) addRQ(q *QP) {
	c.mu.Lock()
	old := *c.rqs.Load()
	n := append(append(make([]*QP, 0, len(old)+1), old...), q)
	c.rqs.Store(&n)
	c.mu.Unlock()
}

// removeRQ detaches q, first moving what its ring still holds (completed or
// flushed receives) to the local queue so that nothing is lost.
func (c *cq) removeRQ(q *QP) {
	c.mu.Lock()
	var buf [64]verbs.WC
	for {
		n := q.pollRecv(buf[:])
		c.local = append(c.local, buf[:n]...)
		c.nlocal.Add(int64(n))
		if n < len(buf) {
			break
		}
	}
	old := *c.rqs.Load()
	n := make([]*QP, 0, len(old))
	for _, x := range old {
		if x != q {
			n = append(n, x)
		}
	}
	c.rqs.Store(&n)
	c.mu.Unlock()
	c.db.kick()
}
