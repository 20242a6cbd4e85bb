package softrc

import (
	"context"

	"sync"

	"github.com/rdmago/rdmago/verbs"
)

// CQ is a FIFO completion queue. Waiters block on a one-token channel: a
// completion pushed while someone waits drops a token in, and a woken waiter
// that leaves completions behind passes the token on, so several waiters
// never miss a wake-up and idle waiting costs nothing (no allocation per
// wake-up either). Close closes the channel, waking everyone.
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
			select {
			case c.sig <- struct{}{}:
			default:
			}
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
		c.waiters++
		c.mu.Unlock()
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
