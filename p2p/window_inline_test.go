package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
)

// Over tcp, whose doorbell is a system call, a small IwriteNow goes
// inline and gives no request; Ifence gives one request per rank so
// written, which completes only with the completion of its own signaled
// write (held back here by the injector: a fence that completed at once
// would not wait for the writes before it), after which the writes are in
// the peer's window. A write past the inline limit keeps its request, and
// a second Ifence has nothing to fence. The fence's completion frees the
// send-queue entries of the writes before it, which have no completion of
// their own (a run of larger writes after them found the queue short).
func TestInlineWritesFence(t *testing.T) {
	inj := faulty.NewInjector()
	o := p2ptest.Options{Provider: "tcp", P2P: p2p.Options{LivenessTimeout: -1,
		OpenDevice: faulty.Opener(inj)}}
	const small, large = 8, 2048
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := ep.NewWindow(ctx, make([]byte, 8192))
		if err != nil {
			return err
		}
		want := make([]byte, 5*small)
		for i := range 5 {
			copy(want[i*small:], pattern(small, byte(i+1)))
		}
		if ep.Rank() == 1 {
			if _, err := ep.Recv(ctx, 0, 1, nil); err != nil {
				return err
			}
			if got := w.Bytes()[:len(want)]; !bytes.Equal(got, want) {
				return fmt.Errorf("rank 1's window holds %v, want %v", got, want)
			}
			if got := w.Bytes()[4096 : 4096+large]; !bytes.Equal(got, pattern(large, 9)) {
				return errors.New("rank 1's window lacks the large write")
			}
			return w.Close(ctx)
		}
		if w.Unfenced() {
			return errors.New("a new window has writes to fence")
		}
		if reqs, err := w.Ifence(nil); err != nil || len(reqs) != 0 {
			return fmt.Errorf("Ifence with nothing written: %d requests, error %v; want none", len(reqs), err)
		}
		// Fewer writes than p2p signals one in, so that the fence's is
		// the only write completion the injector holds back.
		for i := range 5 {
			r, err := w.IwriteNow(1, i*small, pattern(small, byte(i+1)))
			if err != nil {
				return err
			}
			if r != nil {
				return fmt.Errorf("inline write %d gave a request", i)
			}
		}
		if !w.Unfenced() {
			return errors.New("inline writes left nothing to fence")
		}
		rl, err := w.IwriteNow(1, 4096, pattern(large, 9))
		if err != nil || rl == nil {
			return fmt.Errorf("a %d-byte IwriteNow: request %v, error %v; want a request", large, rl, err)
		}
		if _, err := rl.Wait(ctx); err != nil {
			return err
		}
		const hold = 2 * time.Second
		inj.DelayCompletions(1, hold, func(wc verbs.WC) bool { return wc.Opcode == verbs.WCRDMAWrite })
		reqs, err := w.Ifence(nil)
		if err != nil {
			return err
		}
		if len(reqs) != 1 || reqs[0].Peer() != 1 {
			return fmt.Errorf("Ifence gave %d requests, want one to rank 1", len(reqs))
		}
		if w.Unfenced() {
			return errors.New("writes left to fence after Ifence")
		}
		start := time.Now()
		for time.Since(start) < hold/4 {
			if _, done, err := reqs[0].Test(); done || err != nil {
				return fmt.Errorf("the fence completed (error %v) while its completion was held back", err)
			}
		}
		if _, err := reqs[0].Wait(ctx); err != nil {
			return err
		}
		// Its completion frees the send-queue entries of the unsignaled
		// writes before it too (without it they stayed: 6 entries). No
		// pings run; a control frame posted since (a credit) may hold one.
		if n := ep.SendOutstanding(1); n >= 5 {
			return fmt.Errorf("%d send-queue entries still taken after the fence", n)
		}
		if more, err := w.Ifence(nil); err != nil || len(more) != 0 {
			return fmt.Errorf("a second Ifence: %d requests, error %v; want none", len(more), err)
		}
		if err := ep.Send(ctx, 1, 1, nil); err != nil {
			return err
		}
		return w.Close(ctx)
	})
}
