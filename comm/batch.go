package comm

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/rdmago/rdmago/p2p"
)

// Batch is a group of point-to-point operations posted together and
// completed as one, as NCCL's ncclGroupStart/ncclGroupEnd group sends and
// receives: a halo exchange's four sends and four receives, an all-to-all
// written by hand. BatchSend and BatchRecv add operations (checking peer
// and tag at once); Start posts them all, receives first, and returns one
// Request that completes when every operation has, with the first error
// in the order they were added. A Batch may be started again once its
// request has completed. It is not safe for concurrent use while being
// built; its Requests are.
type Batch struct {
	c   *Comm
	ops []batchOp
}

type batchOp struct {
	send      bool
	peer, tag int
	esize     int
	buf       []byte
}

// NewBatch returns an empty batch of operations on c.
func NewBatch(c *Comm) *Batch { return &Batch{c: c} }

// BatchSend adds sending buf to dest with tag to b. buf belongs to the
// batch's request from Start until it completes.
func BatchSend[T Element](b *Batch, buf []T, dest, tag int) error {
	if err := b.c.checkPeer("BatchSend", dest, tag, false); err != nil {
		return err
	}
	b.ops = append(b.ops, batchOp{send: true, peer: dest, tag: tag, esize: sizeOf[T](), buf: bytesOf(buf)})
	return nil
}

// BatchRecv adds receiving from src (or AnySource) with tag (or AnyTag)
// into buf to b; the request's Statuses tell what arrived.
func BatchRecv[T Element](b *Batch, buf []T, src, tag int) error {
	if err := b.c.checkPeer("BatchRecv", src, tag, true); err != nil {
		return err
	}
	b.ops = append(b.ops, batchOp{peer: src, tag: tag, esize: sizeOf[T](), buf: bytesOf(buf)})
	return nil
}

// Len is the number of operations in b.
func (b *Batch) Len() int { return len(b.ops) }

// Start posts every operation of b and returns the request that completes
// when all have. ctx bounds them as it bounds Isend and Irecv. When one
// cannot be posted, those already posted are canceled and waited for, and
// Start fails naming the operation.
func (b *Batch) Start(ctx context.Context) (*Request, error) {
	c := b.c
	if err := c.check("Batch"); err != nil {
		return nil, err
	}
	if err := c.checkCtx("Batch", NoPeer, NoTag, ctx); err != nil {
		return nil, err
	}
	bt := &batch{c: c, ctx: ctx, ops: b.ops[:len(b.ops):len(b.ops)], reqs: make([]*p2p.Request, len(b.ops))}
	// Receives first: a send to a peer of the batch then finds its
	// receive posted rather than becoming an unexpected message.
	for pass := range 2 {
		for i, op := range bt.ops {
			if op.send != (pass == 1) {
				continue
			}
			var err error
			if op.send {
				bt.reqs[i], err = c.user.Isend(c.members[op.peer], op.tag, op.buf)
			} else {
				bt.reqs[i], err = c.user.Irecv(c.worldOf(op.peer), op.tag, op.buf)
			}
			if err != nil {
				bt.cancel()
				p2p.WaitAll(context.WithoutCancel(ctx), bt.posted()...)
				return nil, c.wrap(bt.opName(i), op.peer, op.tag, err)
			}
		}
	}
	return &Request{c: c, op: "Batch", bat: bt}, nil
}

// batch is a started Batch: its p2p requests, and once complete, the
// statuses and the first error.
type batch struct {
	c    *Comm
	ctx  context.Context
	ops  []batchOp
	reqs []*p2p.Request

	mu   sync.Mutex
	fin  bool
	sts  []Status
	err  error
	stop func() bool
}

func (bt *batch) opName(i int) string {
	if bt.ops[i].send {
		return "BatchSend"
	}
	return "BatchRecv"
}

func (bt *batch) posted() []*p2p.Request {
	var out []*p2p.Request
	for _, r := range bt.reqs {
		if r != nil {
			out = append(out, r)
		}
	}
	return out
}

func (bt *batch) cancel() {
	for _, r := range bt.reqs {
		if r != nil {
			r.Cancel()
		}
	}
}

// wait waits for every operation; ctx ending cancels those that have not
// matched, as Wait does for one, and so does the start ctx ending.
func (bt *batch) wait(ctx context.Context) error {
	if ctx == nil {
		return bt.c.opErr("Batch", NoPeer, NoTag, fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	bt.mu.Lock()
	if bt.fin {
		defer bt.mu.Unlock()
		return bt.err
	}
	if bt.ctx.Err() != nil {
		bt.cancel()
	} else if sd := bt.ctx.Done(); sd != nil && sd != ctx.Done() && bt.stop == nil {
		bt.stop = context.AfterFunc(bt.ctx, bt.cancel)
	}
	reqs := bt.reqs
	bt.mu.Unlock()
	if err := p2p.WaitAll(ctx, reqs...); err != nil && ctx.Err() != nil && !bt.allDone() {
		return bt.c.wrap("Batch", NoPeer, NoTag, err)
	}
	return bt.finish()
}

func (bt *batch) allDone() bool {
	for _, r := range bt.reqs {
		if !r.Done() {
			return false
		}
	}
	return true
}

// test reports whether every operation has completed.
func (bt *batch) test() (bool, error) {
	bt.mu.Lock()
	fin, err := bt.fin, bt.err
	bt.mu.Unlock()
	if fin {
		return true, err
	}
	if bt.ctx.Err() != nil {
		bt.cancel()
	}
	if !bt.allDone() {
		return false, nil
	}
	return true, bt.finish()
}

// watch waits until every operation completed (true) or ctx ended
// (false), canceling nothing.
func (bt *batch) watch(ctx context.Context) bool {
	for _, r := range bt.reqs {
		if r.Done() {
			continue
		}
		if _, _, err := p2p.WaitAny(ctx, r); err != nil {
			return false
		}
	}
	return true
}

// finish records the statuses and the first error of the completed
// operations, once.
func (bt *batch) finish() error {
	bt.mu.Lock()
	defer bt.mu.Unlock()
	if bt.fin {
		return bt.err
	}
	if bt.stop != nil {
		bt.stop() // a Cancel the hook still makes finds the requests done
		bt.stop = nil
	}
	bt.sts = make([]Status, len(bt.ops))
	for i, op := range bt.ops {
		st, _, err := bt.reqs[i].Test()
		if errors.Is(err, p2p.ErrCanceled) && bt.ctx.Err() != nil {
			err = fmt.Errorf("%w: %w", bt.ctx.Err(), err)
		}
		s, err := bt.c.status(bt.opName(i), op.peer, op.tag, op.esize, st, err)
		if op.send {
			s = Status{Source: bt.c.rank, Tag: op.tag, Count: len(op.buf) / op.esize}
		}
		bt.sts[i] = s
		if err != nil && bt.err == nil {
			bt.err = err
		}
	}
	bt.fin = true
	return bt.err
}

// Statuses returns, for a completed Batch request, one Status per
// operation in the order they were added (for a send: this rank, its tag
// and element count); nil for other requests or before completion.
func (r *Request) Statuses() []Status {
	if r == nil || r.bat == nil {
		return nil
	}
	r.bat.mu.Lock()
	defer r.bat.mu.Unlock()
	if !r.bat.fin {
		return nil
	}
	return r.bat.sts
}
