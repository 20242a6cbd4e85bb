package main

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/comm"
)

// tagPutAck carries -c's acknowledgements of checked Puts.
const tagPutAck = 102

// putKernel is put_latency's and put_bw's kernel (see the methodology in
// run.go). With -c, rank 0 waits for rank 1's acknowledgement of the
// previous iteration before it fills the buffer, and rank 1 waits for the
// last Put's signal (Puts on one link are placed in order), checks its
// window and acknowledges: both outside rank 0's timed op. One signal per
// window, not per Put: each signal takes one of the receiver's posted
// receive buffers, which come back with its messages.
func (b *runner[T]) putKernel(size, count int) (kernel, int, int) {
	c, rank, w := b.c, b.c.Rank(), b.win
	if count == 0 {
		return nil, 0, 0
	}
	large := size > largeMsg
	iters, skip, puts := 10000, 100, 1
	if b.cfg.Test == "put_bw" {
		iters, skip, puts = 100, 10, window
		if large {
			iters, skip = 20, 2
		}
	} else if large {
		iters, skip = 1000, 10
	}
	if rank > 1 {
		return idle, iters, skip
	}
	s, v := b.send[:count], b.cfg.Validate
	ack := make([]T, 1)
	if rank == 1 {
		if !v {
			return idle, iters, skip
		}
		return b.loop(func(ctx context.Context) error {
			return w.WaitSignal(ctx, 0, 0, 1)
		}, func(int) {}, func(it int) {
			b.expect(w.Local()[:count], func(i int) T { return pattern[T](i, 0, it) }, fmt.Sprintf("%s %d bytes from rank 0", b.cfg.Test, size), it)
			if err := comm.Send(b.ctx, c, ack, 0, tagPutAck); err != nil && b.firstErr == "" {
				b.errs++
				b.firstErr = fmt.Sprintf("rank 1: acknowledging iteration %d: %v", it, err)
			}
		}), iters, skip
	}
	if !v {
		fill(s, 0, rank, 0)
	}
	op := func(ctx context.Context) error {
		for i := range puts {
			var err error
			if v && i == puts-1 {
				err = w.PutSignal(1, 0, s, 0)
			} else {
				err = w.Put(1, 0, s)
			}
			if err != nil {
				return err
			}
		}
		return w.Flush(ctx)
	}
	return b.loop(op, func(it int) {
		if it > 0 {
			if _, err := comm.Recv(b.ctx, c, ack, 1, tagPutAck); err != nil && b.firstErr == "" {
				b.errs++
				b.firstErr = fmt.Sprintf("rank 0: waiting for the acknowledgement of iteration %d: %v", it-1, err)
			}
		}
		fill(s, 0, rank, it)
	}, func(int) {}), iters, skip
}
