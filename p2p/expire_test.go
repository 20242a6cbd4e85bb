package p2p_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestExpireUnboundedByPeer: a wait whose ctx has ended returns at once,
// even when what it waits for needs an answer from a peer that makes no
// progress. Rank 0 starts a rendezvous send to rank 1 and then more
// notifying writes than rank 1 has receive buffers, while rank 1 handles
// nothing (HoldProgress): the last writes queue for credits, and the
// send's CANCEL queues behind them. WaitAll with an ended ctx must return
// an error naming rank 0, peer 1 and the tag and wrapping ctx.Err(), for
// the send alone and for the writes (queued ones are canceled); once rank 1
// moves again everything completes and the window closes.
func TestExpireUnboundedByPeer(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			const slots, writes, tag = 4, 12, 7
			opts := p2p.Options{EagerSlots: slots, EagerSlotsMax: slots, EagerLimit: 1024, PipelineLimit: -1, RingLines: -1}
			held := make(chan func(), 1)
			resumed := make(chan struct{})
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov, P2P: opts, Timeout: 20 * time.Second}, func(ctx context.Context, ep *p2p.Endpoint) error {
				w, err := ep.NewWindow(ctx, make([]byte, 64))
				if err != nil {
					return err
				}
				if err := barrier(ctx, ep); err != nil {
					return err
				}
				big := make([]byte, 64<<10)
				if ep.Rank() == 1 {
					held <- ep.HoldProgress()
					<-resumed
					return w.Close(ctx)
				}
				release := <-held
				defer func() {
					select {
					case <-resumed:
					default:
						release()
						close(resumed)
					}
				}()
				send, err := ep.Isend(1, tag, big)
				if err != nil {
					return err
				}
				var ws []*p2p.Request
				for i := range writes {
					r, err := w.Iwrite(1, 0, []byte{byte(i)}, true, uint32(i))
					if err != nil {
						return err
					}
					ws = append(ws, r)
				}
				ended, cancel := context.WithCancel(ctx)
				cancel()
				check := func(what string, reqs ...*p2p.Request) error {
					done := make(chan error, 1)
					go func() { done <- p2p.WaitAll(ended, reqs...) }()
					var err error
					select {
					case err = <-done:
					case <-time.After(5 * time.Second):
						return fmt.Errorf("WaitAll of %s with an ended ctx still blocked after 5 s", what)
					}
					var pe *p2p.Error
					if !errors.Is(err, context.Canceled) || !errors.As(err, &pe) || pe.Rank != 0 || pe.Peer != 1 {
						return fmt.Errorf("WaitAll of %s with an ended ctx: %v, want an error of rank 0 about peer 1 wrapping context.Canceled", what, err)
					}
					return nil
				}
				if err := check("the rendezvous send", send); err != nil {
					return err
				}
				var pe *p2p.Error
				if err := p2p.WaitAll(ended, send); !errors.As(err, &pe) || pe.Tag != tag {
					return fmt.Errorf("the send's error names tag %v (%v), want %d", pe, err, tag)
				}
				if err := check("the notifying writes", ws...); err != nil {
					return err
				}
				release()
				close(resumed)
				// Everything finishes once rank 1 moves: the send canceled or
				// delivered, the writes placed or canceled.
				if _, err := send.Wait(ctx); err != nil && !errors.Is(err, p2p.ErrCanceled) {
					return fmt.Errorf("the send after rank 1 resumed: %w", err)
				}
				canceled := 0
				for i, r := range ws {
					_, err := r.Wait(ctx)
					switch {
					case errors.Is(err, context.Canceled):
						canceled++ // queued when ctx ended
					case err != nil:
						return fmt.Errorf("write %d after rank 1 resumed: %w", i, err)
					}
				}
				if canceled == 0 {
					return fmt.Errorf("no write of %d was queued for credits: the test did not test", writes)
				}
				return w.Close(ctx)
			})
		})
	}
}
