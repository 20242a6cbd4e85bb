//go:build linux && cgo && rdma

package ibv

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// pollBatch is how many completions one ibv_poll_cq call may return.
const pollBatch = 64

// cq wraps an ibv_cq with its own completion channel.
//
// Waiting: the channel's fd is non-blocking and a duplicate of it is handed
// to Go's netpoller (os.NewFile), so a waiting goroutine is parked in the
// runtime, never blocked in C. One pump goroutine per CQ (started by the
// first Wait) takes each event, acknowledges it at once (so destroy never
// waits for acks) and wakes every waiter by closing the current notify
// channel. A waiter captures that channel, arms the CQ (ibv_req_notify_cq),
// and then polls once: a completion that arrived before the arming is found
// by the poll, one that arrives after it raises an event; none is lost.
//
// Completions a Wait (or a queue pair's Close) polled out of the device are
// kept in buf, in order, and handed out by Poll before anything newer.
type cq struct {
	dev   *device
	h     unsafe.Pointer // struct ibv_cq
	ch    unsafe.Pointer // struct ibv_comp_channel
	fd    int
	depth int
	tmp   unsafe.Pointer // C: pollBatch struct ibv_wc
	out   unsafe.Pointer // C: pollBatch wcDesc

	mu     sync.Mutex // guards polling, buf and closed
	buf    []verbs.WC
	closed bool
	nQP    int // queue pairs using this CQ (guarded by dev.mu)

	overrun atomic.Bool // the device reported IBV_EVENT_CQ_ERR

	wmu      sync.Mutex // guards the waiting machinery below
	notify   chan struct{}
	file     *os.File
	pumpDone chan struct{}
	closedCh chan struct{}
}

func (d *device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 || depth > d.caps.MaxCQE {
		return nil, errorf("CreateCQ", 0, fmt.Errorf("%w: depth %d, want 1..%d", verbs.ErrInvalidArgument, depth, d.caps.MaxCQE))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errorf("CreateCQ", 0, verbs.ErrClosed)
	}
	ch, fd, err := cCreateChannel(d.ctx)
	if err != nil {
		return nil, errorf("CreateCQ", 0, errnoErr("ibv_create_comp_channel", err))
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = cDestroyChannel(ch)
		return nil, errorf("CreateCQ", 0, fmt.Errorf("%w: O_NONBLOCK on the completion channel: %w", verbs.ErrUnavailable, err))
	}
	h, n, err := cCreateCQ(d.ctx, depth, ch)
	if err != nil {
		_ = cDestroyChannel(ch)
		return nil, errorf("CreateCQ", 0, errnoErr("ibv_create_cq", err))
	}
	c := &cq{dev: d, h: h, ch: ch, fd: fd, depth: n,
		tmp: cAlloc(pollBatch * sizeofWC), out: cAlloc(pollBatch * int(unsafe.Sizeof(wcDesc{}))),
		notify: make(chan struct{}), closedCh: make(chan struct{})}
	d.cqs[c] = struct{}{}
	return c, nil
}

// Poll hands out buffered completions first, then polls the device in
// batches of up to pollBatch (one cgo call each).
func (c *cq) Poll(wc []verbs.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0
	}
	n := copy(wc, c.buf)
	if n > 0 {
		c.buf = c.buf[:copy(c.buf, c.buf[n:])]
	}
	for n < len(wc) {
		got := cPoll(c.h, c.tmp, c.out, min(len(wc)-n, pollBatch))
		if got <= 0 {
			break
		}
		descs := unsafe.Slice((*wcDesc)(c.out), got)
		for i := range descs {
			if w, ok := c.dev.translate(&descs[i]); ok {
				wc[n] = w
				n++
			}
		}
		if got < pollBatch {
			break
		}
	}
	return n
}

// fillLocked moves everything the device has into buf.
func (c *cq) fillLocked() {
	for {
		got := cPoll(c.h, c.tmp, c.out, pollBatch)
		if got <= 0 {
			return
		}
		descs := unsafe.Slice((*wcDesc)(c.out), got)
		for i := range descs {
			if w, ok := c.dev.translate(&descs[i]); ok {
				c.buf = append(c.buf, w)
			}
		}
		if got < pollBatch {
			return
		}
	}
}

// fill moves everything the device has into buf.
func (c *cq) fill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.closed {
		c.fillLocked()
	}
}

func (c *cq) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		if c.closed {
			c.mu.Unlock()
			return errorf("CQ.Wait", 0, verbs.ErrClosed)
		}
		if c.overrun.Load() {
			c.mu.Unlock()
			return errorf("CQ.Wait", 0, fmt.Errorf("%w: completion queue overrun: more than its %d entries were due at once, "+
				"completions are lost and the CQ is unusable; size CQs for all outstanding work", verbs.ErrQueueFull, c.depth))
		}
		if len(c.buf) > 0 {
			c.mu.Unlock()
			return nil
		}
		ch, err := c.waitChan()
		if err != nil {
			c.mu.Unlock()
			return err
		}
		if err := cReqNotify(c.h); err != nil {
			c.mu.Unlock()
			return errorf("CQ.Wait", 0, errnoErr("ibv_req_notify_cq", err))
		}
		c.fillLocked()
		ready := len(c.buf) > 0
		c.mu.Unlock()
		if ready {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closedCh:
			return errorf("CQ.Wait", 0, verbs.ErrClosed)
		}
	}
}

// waitChan returns the channel the next event closes, starting the pump on
// first use.
func (c *cq) waitChan() (chan struct{}, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.file == nil {
		// A duplicate descriptor for the poller: closing it (in Close) stops
		// the pump without touching the channel's own fd, which
		// ibv_destroy_comp_channel closes. O_NONBLOCK is shared by both.
		dup, err := unix.FcntlInt(uintptr(c.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, errorf("CQ.Wait", 0, fmt.Errorf("%w: dup of the completion channel: %w", verbs.ErrUnavailable, err))
		}
		f := os.NewFile(uintptr(dup), "ibv-comp-channel")
		rc, err := f.SyscallConn()
		if err != nil {
			f.Close()
			return nil, errorf("CQ.Wait", 0, fmt.Errorf("%w: completion channel: %w", verbs.ErrUnavailable, err))
		}
		c.file = f
		c.pumpDone = make(chan struct{})
		go c.pump(rc)
	}
	return c.notify, nil
}

func (c *cq) pump(rc interface {
	Read(func(fd uintptr) bool) error
}) {
	defer close(c.pumpDone)
	for {
		var gerr error
		err := rc.Read(func(uintptr) bool {
			var got bool
			got, gerr = cGetCQEvent(c.ch)
			return got || gerr != nil
		})
		if err != nil {
			return // the duplicate fd was closed
		}
		c.wmu.Lock()
		close(c.notify)
		c.notify = make(chan struct{})
		c.wmu.Unlock()
		if gerr != nil {
			if c.dev.log != nil {
				c.dev.log.Error("ibv: completion channel failed", "device", c.dev.name, "err", gerr)
			}
			return
		}
	}
}

// setOverrun records a CQ_ERR event and wakes the waiters, who report it.
func (c *cq) setOverrun() {
	c.overrun.Store(true)
	c.wmu.Lock()
	close(c.notify)
	c.notify = make(chan struct{})
	c.wmu.Unlock()
}

// Close fails with ErrInUse while queue pairs use the CQ. Completions still
// buffered are dropped.
func (c *cq) Close() error {
	c.dev.mu.Lock()
	if c.nQP > 0 {
		n := c.nQP
		c.dev.mu.Unlock()
		return errorf("CQ.Close", 0, fmt.Errorf("%w: %d queue pair(s) still use the CQ", verbs.ErrInUse, n))
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.dev.mu.Unlock()
		return errorf("CQ.Close", 0, verbs.ErrClosed)
	}
	c.closed = true
	c.buf = nil
	c.mu.Unlock()
	delete(c.dev.cqs, c)
	c.dev.mu.Unlock()

	close(c.closedCh)
	c.wmu.Lock()
	f, done := c.file, c.pumpDone
	c.wmu.Unlock()
	if f != nil {
		_ = f.Close()
		<-done
	}
	var err error
	if e := cDestroyCQ(c.h); e != nil {
		err = errorf("CQ.Close", 0, errnoErr("ibv_destroy_cq", e))
	}
	if e := cDestroyChannel(c.ch); e != nil && err == nil {
		err = errorf("CQ.Close", 0, errnoErr("ibv_destroy_comp_channel", e))
	}
	cFree(c.tmp)
	cFree(c.out)
	return err
}
