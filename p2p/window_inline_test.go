package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
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
// the peer's window. A write past what a run takes keeps its request, and
// a second Ifence has nothing to fence. The fence's completion frees the
// send-queue entries of the writes before it, which have no completion of
// their own (a run of larger writes after them found the queue short).
func TestInlineWritesFence(t *testing.T) {
	inj := faulty.NewInjector()
	o := p2ptest.Options{Provider: "tcp", P2P: p2p.Options{LivenessTimeout: -1,
		OpenDevice: faulty.Opener(inj)}}
	const small, large = 8, 8192
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := ep.NewWindow(ctx, make([]byte, 4096+large))
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

// Over tcp, inline writes held for a later post travel as runs, one
// request each (verbs.RunWriter), and stay in program order with the
// writes that take requests of their own: rank 1's window ends as the
// writes applied one after another would leave it, where small and large
// writes overlap. Thousands of writes with no fence between them release
// runs as they go (every 128 held writes) without filling the send queue.
func TestInlineWritesTravelAsRuns(t *testing.T) {
	o := p2ptest.Options{Provider: "tcp", P2P: p2p.Options{LivenessTimeout: -1}}
	const size, large = 16384, 6000
	// image applies rank 0's writes, in order, to a window of size bytes.
	type write struct {
		off  int
		data []byte
	}
	var writes []write
	for i := range 3000 {
		n := 1 + i%61
		switch {
		case i%97 == 50:
			n = large // past what a run takes: a request of its own
		case i%89 == 3:
			n = 1500 // past the inline limit, in a run still
		}
		writes = append(writes, write{off: (i * 131) % (size - n), data: pattern(n, byte(i))})
	}
	image := make([]byte, size)
	for _, w := range writes {
		copy(image[w.off:], w.data)
	}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := ep.NewWindow(ctx, make([]byte, size))
		if err != nil {
			return err
		}
		if ep.Rank() == 1 {
			if _, err := ep.Recv(ctx, 0, 1, nil); err != nil {
				return err
			}
			if got := w.Bytes(); !bytes.Equal(got, image) {
				i := 0
				for got[i] == image[i] {
					i++
				}
				return fmt.Errorf("rank 1's window differs from the writes applied in order from byte %d", i)
			}
			return w.Close(ctx)
		}
		var reqs []*p2p.Request
		for i, wr := range writes {
			r, err := w.IwriteNow(1, wr.off, wr.data)
			if err != nil {
				return fmt.Errorf("write %d: %w", i, err)
			}
			if r != nil {
				reqs = append(reqs, r)
			}
			if i == 1000 {
				// A fence midway, and a window's worth more after it.
				if reqs, err = w.Ifence(reqs); err != nil {
					return err
				}
			}
		}
		if reqs, err = w.Ifence(reqs); err != nil {
			return err
		}
		for _, r := range reqs {
			if _, err := r.Wait(ctx); err != nil {
				return err
			}
			r.Release()
		}
		st := ep.Stats().Peers[1]
		if st.WriteRuns.Msgs == 0 || st.WriteRuns.Msgs*8 > uint64(len(writes)) {
			return fmt.Errorf("%d writes went in %d runs; want runs of 8 or more writes on average", len(writes), st.WriteRuns.Msgs)
		}
		if n := ep.SendOutstanding(1); n > 2 {
			return fmt.Errorf("%d send-queue entries still taken after the fences", n)
		}
		if err := ep.Send(ctx, 1, 1, nil); err != nil {
			return err
		}
		return w.Close(ctx)
	})
}

// A run of held inline writes leaves when the deferred posts' grace runs
// out, with no fence, wait or other post to make it go; a write past the
// inline limit, within what a run takes, goes in it too.
func TestInlineRunLeavesAfterGrace(t *testing.T) {
	old := p2p.SetDeferGrace(time.Millisecond)
	t.Cleanup(func() { p2p.SetDeferGrace(old) })
	o := p2ptest.Options{Provider: "tcp", Timeout: 20 * time.Second, P2P: p2p.Options{LivenessTimeout: -1}}
	want := pattern(40+1500, 7)
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := ep.NewWindow(ctx, make([]byte, 2048))
		if err != nil {
			return err
		}
		if ep.Rank() == 1 {
			if _, err := ep.Recv(ctx, 0, 1, nil); err != nil {
				return err
			}
			if got := w.Bytes()[:len(want)]; !bytes.Equal(got, want) {
				return errors.New("rank 1's window lacks the writes")
			}
			return w.Close(ctx)
		}
		for i := range 5 {
			if _, err := w.IwriteNow(1, i*8, want[i*8:(i+1)*8]); err != nil {
				return err
			}
		}
		if r, err := w.IwriteNow(1, 40, want[40:]); err != nil || r != nil {
			return fmt.Errorf("a 1500-byte write: a request %t, error %v; want neither", r != nil, err)
		}
		for ep.Stats().Peers[1].WriteRuns.Msgs == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("the held writes never left: %w", err)
			}
			runtime.Gosched()
		}
		if st := ep.Stats().Peers[1].WriteRuns; st.Msgs != 1 || st.Bytes != uint64(len(want)) {
			return fmt.Errorf("the writes left in %d runs of %d bytes; want one of %d", st.Msgs, st.Bytes, len(want))
		}
		// The data is placed by the time a message after it arrives.
		if err := ep.Send(ctx, 1, 1, nil); err != nil {
			return err
		}
		return w.Close(ctx)
	})
}

// A run of held writes whose post fails fails the fence that was to
// cover it, with the post's error: its writes were never sent, and
// nothing may report them placed. As any failed post does, it costs the
// link to that peer.
func TestInlineRunPostFailureFailsFence(t *testing.T) {
	// The run must still be held when the fence comes: with the default
	// grace (100 µs) a loaded machine, under -race, let it leave by
	// itself before the check below.
	old := p2p.SetDeferGrace(time.Minute)
	t.Cleanup(func() { p2p.SetDeferGrace(old) })
	inj := faulty.NewInjector()
	o := p2ptest.Options{Provider: "tcp", P2P: p2p.Options{LivenessTimeout: -1,
		OpenDevice: faulty.Opener(inj)}}
	boom := errors.New("boom")
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := ep.NewWindow(ctx, make([]byte, 64))
		if err != nil || ep.Rank() == 1 {
			return err
		}
		for i := range 3 {
			if _, err := w.IwriteNow(1, i*8, pattern(8, byte(i))); err != nil {
				return err
			}
		}
		if ep.Stats().Peers[1].WriteRuns.Msgs != 0 {
			return errors.New("the run left before the fence")
		}
		inj.FailPosts(1, boom, func(_ uint32, recv bool) bool { return !recv })
		reqs, err := w.Ifence(nil)
		if !errors.Is(err, boom) {
			return fmt.Errorf("Ifence after a failed run: %d requests, error %v; want the post's error", len(reqs), err)
		}
		if st := ep.Stats().Peers[1].WriteRuns; st.Msgs != 0 {
			return fmt.Errorf("%d runs counted sent after the failed post", st.Msgs)
		}
		if _, err := w.IwriteNow(1, 0, pattern(8, 9)); err == nil {
			return errors.New("a write to the peer whose run failed went on")
		}
		return nil
	})
}
