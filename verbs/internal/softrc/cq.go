package softrc

import (
	"context"

	"sync"

	"github.com/rdmago/rdmago/verbs"
)

// CQ is a FIFO completion queue. Waiters block on a channel that the next
// completion closes, so idle waiting costs nothing.
type CQ struct {
	dev     *Device
	mu      sync.Mutex
	buf     []verbs.WC
	head    int
	sig     chan struct{}
	waiters int
	closed  bool
}

var _ verbs.CQ = (*CQ)(nil)

func (c *CQ) push(wc verbs.WC) {
	c.mu.Lock()
	if !c.closed {
		c.buf = append(c.buf, wc)
		if c.waiters > 0 {
			close(c.sig)
			c.sig = make(chan struct{})
			c.waiters = 0
		}
	}
	c.mu.Unlock()
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
	c.mu.Unlock()
	return n
}

// Wait blocks until a completion is available, ctx ends or the CQ closes.
func (c *CQ) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		if c.head < len(c.buf) {
			c.mu.Unlock()
			return nil
		}
		if c.closed {
			c.mu.Unlock()
			return c.dev.err("CQ.Wait", 0, -1, verbs.ErrClosed)
		}
		ch := c.sig
		c.waiters++
		c.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
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
	close(c.sig)
	c.buf = nil
	c.head = 0
	c.mu.Unlock()
	c.dev.mu.Lock()
	delete(c.dev.cqs, c)
	c.dev.mu.Unlock()
	return nil
}
