package softrc

import (
	"context"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/futex"
	"github.com/rdmago/rdmago/verbs"
)

// CQ is a FIFO completion queue. Waiters block on a one-token channel: a
// completion pushed while someone waits drops a token in, and a woken waiter
// that leaves completions behind passes the token on, so several waiters
// never miss a wake-up and idle waiting costs nothing (no allocation per
// wake-up either). Close closes the channel, waking everyone.
//
// When every completion the CQ can get from a peer arrives through one link
// that is a Driver (one connected tcp QP uses the CQ), a waiter does not
// park: it drives that link itself, reading and handling frames on its own
// goroutine until its completion is there (see Driver). One waiter at a time
// drives; the others park as before and are woken by its pushes.
type CQ struct {
	dev     *Device
	mu      sync.Mutex
	buf     []verbs.WC
	head    int
	sig     chan struct{}
	waiters int
	closed  bool
	drivers []Driver // links of the QPs that use this CQ, when they are Drivers
	driving Driver   // the link a waiter drives now, nil if none
	// arrivals watches the drivers' sockets for Arrived, made at its
	// first call (arrivalSet); nil before, or where it cannot be made.
	arrivals    *arrivalSet
	arrivalsTry bool // Arrived tried to make arrivals
	// pending mirrors head < len(buf) || closed for Pending, which a driver
	// calls between frames, without the lock.
	pending atomic.Bool
}

var (
	_ verbs.CQ       = (*CQ)(nil)
	_ verbs.Arrivals = (*CQ)(nil)
)

// Driver is a Link that can make progress on the goroutine that waits for a
// completion. It saves the hand-off from the link's own goroutine to the
// waiter, which on a busy machine costs more than the work itself.
//
// Drive reads and handles the link's incoming frames on the calling
// goroutine until cq.Pending reports true (checked between frames), ctx
// ends, the link fails, or cq.Signal fires while Drive waits for its turn.
// It returns false at once, having done nothing, when another goroutine
// drives the link; the caller then parks and calls Parked(true) meanwhile,
// so that the link's goroutine resumes reading when that driver stops.
// Interrupt makes a Drive blocked in a read return to its checks; the CQ
// calls it when a completion arrives by another way, or the CQ closes.
// All three may be called concurrently with each other and the link's own
// goroutine.
type Driver interface {
	Link
	Drive(ctx context.Context, cq *CQ) bool
	Interrupt()
	Parked(on bool)
}

func (c *CQ) addDriver(d Driver) {
	c.mu.Lock()
	c.drivers = append(c.drivers, d)
	if c.arrivals != nil {
		c.arrivals.add(d)
	}
	c.mu.Unlock()
}

func (c *CQ) removeDriver(d Driver) {
	c.mu.Lock()
	if i := slices.Index(c.drivers, d); i >= 0 {
		// A copy: a spinning waiter reads the old slice without the lock.
		c.drivers = slices.Delete(slices.Clone(c.drivers), i, i+1)
	}
	if c.arrivals != nil {
		c.arrivals.remove(d)
	}
	c.mu.Unlock()
}

// Writer is an Arriver that says whether its own goroutine is writing: a
// write the socket did not take at once waits for Go's network poller,
// which a poller that keeps the thread keeps from running, so Arrived
// reports waiting for it (Incoming says so too; the epoll set asks this).
type Writer interface {
	Writing() bool
}

// FDArriver is an Arriver whose arrivals show as the readability of one
// file descriptor (a socket): ControlFD runs f with it, as
// syscall.RawConn.Control does (the descriptor stays open during f), and
// fails once it is closed. A CQ whose links all are FDArrivers watches
// them with one epoll set for Arrived (Linux).
type FDArriver interface {
	Arriver
	ControlFD(f func(fd int)) error
}

// arrivalSet returns the CQ's epoll set of its links' sockets, making it
// at the first call; nil where it cannot be made.
func (c *CQ) arrivalSet() *arrivalSet {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.arrivalsTry && !c.closed {
		c.arrivalsTry = true
		if s := newArrivalSet(); s != nil {
			for _, d := range c.drivers {
				s.add(d)
			}
			c.arrivals = s
		}
	}
	return c.arrivals
}

// Pending reports whether Poll would return a completion or Wait would
// return at once because the CQ is closed.
func (c *CQ) Pending() bool { return c.pending.Load() }

// Signal is the channel a parked waiter of the CQ is woken by; a Driver
// waiting for its turn selects on it too (Wait counts it as a waiter).
func (c *CQ) Signal() <-chan struct{} { return c.sig }

func (c *CQ) push(wc verbs.WC) {
	var d Driver
	c.mu.Lock()
	if !c.closed {
		c.buf = append(c.buf, wc)
		c.pending.Store(true)
		if c.waiters > 0 {
			select {
			case c.sig <- struct{}{}:
			default:
			}
		}
		d = c.driving
	}
	c.mu.Unlock()
	if d != nil {
		// Cheap when the driver is the pusher (it is not blocked in a read).
		d.Interrupt()
	}
}

// Poll moves up to len(wc) completions into wc.
func (c *CQ) Poll(wc []verbs.WC) int {
	c.mu.Lock()
	n := copy(wc, c.buf[c.head:])
	c.head += n
	if c.head == len(c.buf) {
		c.buf = c.buf[:0]
		c.head = 0
	} else if c.head > 1024 && c.head > len(c.buf)/2 {
		k := copy(c.buf, c.buf[c.head:])
		c.buf = c.buf[:k]
		c.head = 0
	}
	c.pending.Store(c.head < len(c.buf) || c.closed)
	c.mu.Unlock()
	return n
}

// waitOverLocked reports whether a wait is over (a completion is queued,
// the CQ closed or ctx ended) and with what; the caller holds c.mu.
func (c *CQ) waitOverLocked(ctx context.Context) (bool, error) {
	switch {
	case c.head < len(c.buf):
		return true, nil
	case c.closed:
		return true, c.dev.err("CQ.Wait", 0, -1, verbs.ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return true, err
	}
	return false, nil
}

// Wait blocks until a completion is available, ctx ends or the CQ closes.
func (c *CQ) Wait(ctx context.Context) error {
	spun := false
	for {
		c.mu.Lock()
		if done, err := c.waitOverLocked(ctx); done {
			c.mu.Unlock()
			return err
		}
		// parked is set when this CQ's only link is driven for another CQ:
		// it must know, so that its own goroutine takes over when that
		// driver stops. While another waiter of this CQ drives, we just
		// park: it wakes one of us when it stops (below).
		var parked Driver
		if len(c.drivers) == 1 && c.driving == nil {
			d := c.drivers[0]
			c.driving = d
			c.waiters++
			c.mu.Unlock()
			drove := d.Drive(ctx, c)
			c.mu.Lock()
			c.driving = nil
			c.waiters--
			if c.waiters > 0 && !c.closed {
				// Others wait here: one of them drives next, or takes
				// what we leave.
				select {
				case c.sig <- struct{}{}:
				default:
				}
			}
			if drove || c.head < len(c.buf) || c.closed {
				c.mu.Unlock()
				continue
			}
			parked = d
		} else if !spun && len(c.drivers) > 1 && c.dev.cfg.YieldSpin > 0 {
			spun = true
			c.mu.Unlock()
			if c.spinIncoming(ctx) {
				spun = false // it took frames: look again, then spin anew
			}
			continue
		}
		c.waiters++
		c.mu.Unlock()
		if parked != nil {
			parked.Parked(true)
		}
		select {
		case <-c.sig:
			c.mu.Lock()
			c.waiters--
			if c.head < len(c.buf) && c.waiters > 0 && !c.closed {
				// Pass the wake-up on: there may be more than we take.
				select {
				case c.sig <- struct{}{}:
				default:
				}
			}
			c.mu.Unlock()
		case <-ctx.Done():
			c.mu.Lock()
			c.waiters--
			c.mu.Unlock()
			if parked != nil {
				parked.Parked(false)
			}
			return ctx.Err()
		}
		if parked != nil {
			parked.Parked(false)
		}
	}
}

// WaitSleep implements verbs.SleepWaiter where the ranks outnumber the
// CPUs (Config.YieldSpin set): Wait that neither drives a link nor spins,
// parked until a completion is queued, ctx ends or the CQ closes, while
// the links, marked parked (Driver.Parked), are read by their own
// goroutines, asleep in Go's network poller, whenever no poller holds
// them. There a background goroutine that drove a link in Wait kept
// reading its socket while the foreground came back to poll: with
// GOMAXPROCS=1 the foreground got the P only between its reads, and the
// link's token not at all (a 2x2 hierarchical alltoall over hosts whose
// ranks share cores took 4x its time for as long as that lasted). With a
// CPU a rank it is Wait: there a driving background goroutine takes no P
// a poller needs, and it serves promptly the traffic nobody polls for (a
// window's target: a 1 MiB put ping-pong over tcp took 4-24 ms a round
// without it, against 0.15).
func (c *CQ) WaitSleep(ctx context.Context) error {
	if c.dev.cfg.YieldSpin <= 0 {
		return c.Wait(ctx)
	}
	for {
		c.mu.Lock()
		if done, err := c.waitOverLocked(ctx); done {
			c.mu.Unlock()
			return err
		}
		c.waiters++
		ds := c.drivers
		c.mu.Unlock()
		for _, d := range ds {
			d.Parked(true)
		}
		var err error
		select {
		case <-c.sig:
		case <-ctx.Done():
			err = ctx.Err()
		}
		c.mu.Lock()
		c.waiters--
		if err == nil && c.head < len(c.buf) && c.waiters > 0 && !c.closed {
			// Pass the wake-up on, as Wait does.
			select {
			case c.sig <- struct{}{}:
			default:
			}
		}
		c.mu.Unlock()
		for _, d := range ds {
			d.Parked(false)
		}
		if err != nil {
			return err
		}
	}
}

// Arriver is a Driver that can tell, without reading, whether bytes for
// it have arrived (a socket's queue), or its own goroutines have work that
// waits for Go's network poller (a write the socket did not take); Wait's
// spin polls it (see Config.YieldSpin). Incoming may run concurrently with
// anything.
type Arriver interface {
	Incoming() bool
}

// QueuedDriver is a Driver that can also handle what has arrived for it
// without waiting for more: DriveQueued handles the link's whole frames
// that are here on the calling goroutine (took: it handled some) and
// reports bytes it had to leave to the link's own goroutine (left). It
// may be called concurrently with anything, as Drive.
type QueuedDriver interface {
	DriveQueued(ctx context.Context, cq *CQ) (took, left bool)
}

// Arrived implements verbs.Arrivals: for every link of the CQ with bytes
// queued in its socket (Arriver), the frames that are whole are handled
// on the caller's goroutine when the link can (QueuedDriver); waiting
// reports bytes only the links' goroutines can take.
func (c *CQ) Arrived(ctx context.Context) (took, waiting bool) {
	if s := c.arrivalSet(); s != nil {
		if took, waiting, ok := s.arrived(ctx, c); ok {
			return took, waiting
		}
	}
	c.mu.Lock()
	ds := c.drivers
	c.mu.Unlock()
	for _, d := range ds {
		if a, ok := d.(Arriver); ok && a.Incoming() {
			t, l := c.take(ctx, a)
			took, waiting = took || t, waiting || l
		}
	}
	return took, waiting
}

// take has link a handle what has arrived for it on this goroutine
// (QueuedDriver); left reports work only the link's own goroutines can do,
// all of it when a cannot take anything itself.
func (c *CQ) take(ctx context.Context, a Arriver) (took, left bool) {
	q, ok := a.(QueuedDriver)
	if !ok {
		return false, true
	}
	return q.DriveQueued(ctx, c)
}

// spinIncoming polls the CQ and its links for Config.YieldSpin, yielding
// the CPU (sched_yield) between polls, until a completion is there, bytes
// arrive on a link, or ctx ends. What a link can take on this goroutine
// (Arrived) it takes, and then it reports true: the caller looks for its
// completion and spins again if it is not among them. Work that only a
// link's goroutines can do ends the spin, and the caller parks so that
// they run.
func (c *CQ) spinIncoming(ctx context.Context) bool {
	deadline := time.Now().Add(c.dev.cfg.YieldSpin)
	for i := 0; ; i++ {
		if c.pending.Load() {
			return false
		}
		if took, waiting := c.Arrived(ctx); took || waiting {
			return took && !waiting
		}
		// The CPU to other processes (the sender of what we wait for may
		// need it), then the P to this one's goroutines: with GOMAXPROCS=1
		// a link's reader or writer that is runnable (a large frame half
		// read or written) would otherwise wait out the whole spin.
		futex.Yield()
		runtime.Gosched()
		if i&7 == 7 && (ctx.Err() != nil || time.Now().After(deadline)) {
			return false
		}
	}
}

// Close wakes every waiter with ErrClosed; later completions are dropped.
func (c *CQ) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.dev.err("CQ.Close", 0, -1, verbs.ErrClosed)
	}
	c.closed = true
	c.pending.Store(true)
	close(c.sig)
	c.buf = nil
	c.head = 0
	d := c.driving
	if c.arrivals != nil {
		c.arrivals.close()
		c.arrivals = nil
	}
	c.mu.Unlock()
	if d != nil {
		d.Interrupt()
	}
	c.dev.mu.Lock()
	delete(c.dev.cqs, c)
	c.dev.mu.Unlock()
	return nil
}
