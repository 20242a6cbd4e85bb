package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

var small = p2ptest.Options{P2P: p2p.Options{EagerLimit: 256, EagerSlots: 4}}

// A sender far ahead of its receiver: many more messages than credits, in
// both protocols, received only after they were all sent; order must hold.
// Several buffer counts, because receivers repost consumed buffers in
// batches (up to two of an eighth of them each): none may leave the sender without
// credits.
func TestFlowControlAndOrder(t *testing.T) {
	const n = 200
	for _, slots := range []int{2, 4, 9, 32} {
		t.Run(fmt.Sprint("slots=", slots), func(t *testing.T) { flowControl(t, n, slots) })
	}
}

func flowControl(t *testing.T, n, slots int) {
	opts := small
	opts.P2P.EagerSlots = slots
	s := newStream(n, 3, []int{0, 10, 256, 257, 5000})
	p2ptest.Run(t, 2, opts, s.run)
}

// stream has rank 0 start n sends of sizes[i%len(sizes)] bytes to rank 1
// at once, and rank 1 receive them only once all n are started (so the
// sender has run out of credits), checking each payload and the order.
// Make one per p2ptest run: started is closed once.
type stream struct {
	n, tag  int
	sizes   []int
	started chan struct{} // closed by rank 0 once its n sends are started
}

func newStream(n, tag int, sizes []int) *stream {
	return &stream{n: n, tag: tag, sizes: sizes, started: make(chan struct{})}
}

func (s *stream) run(ctx context.Context, ep *p2p.Endpoint) error {
	n, tag, sizes := s.n, s.tag, s.sizes
	size := func(i int) int { return sizes[i%len(sizes)] }
	if ep.Rank() == 0 {
		reqs := make([]*p2p.Request, n)
		for i := range n {
			r, err := ep.Isend(1, tag, pattern(size(i), byte(i)))
			if err != nil {
				return err
			}
			reqs[i] = r
		}
		close(s.started)
		return p2p.WaitAll(ctx, reqs...)
	}
	select {
	case <-s.started:
	case <-ctx.Done(): // rank 0 failed (the harness cancels) or the run timed out
		return fmt.Errorf("waiting for rank 0 to start its sends: %w", ctx.Err())
	}
	buf := make([]byte, slices.Max(sizes))
	for i := range n {
		st, err := ep.Recv(ctx, 0, tag, buf)
		if err != nil {
			return err
		}
		if st.Count != size(i) || !bytes.Equal(buf[:st.Count], pattern(size(i), byte(i))) {
			return fmt.Errorf("message %d: got %d bytes, want %d (overtaken?)", i, st.Count, size(i))
		}
	}
	return nil
}

func TestTruncation(t *testing.T) {
	for _, size := range []int{100, 4000} { // eager and rendezvous
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			p2ptest.Run(t, 2, small, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 0 {
					if err := ep.Send(ctx, 1, 1, pattern(size, 1)); err != nil {
						return err
					}
					// The connection still works afterwards.
					return ep.Send(ctx, 1, 2, []byte("after"))
				}
				_, err := ep.Recv(ctx, 0, 1, make([]byte, 10))
				require.ErrorIs(t, err, p2p.ErrTruncated)
				var te *p2p.TruncatedError
				require.ErrorAs(t, err, &te)
				assert.Equal(t, size, te.Size)
				assert.Equal(t, 10, te.Cap)
				assert.ErrorContains(t, err, fmt.Sprintf("message of %d bytes does not fit the 10-byte receive buffer", size))
				buf := make([]byte, 5)
				st, err := ep.Recv(ctx, 0, 2, buf)
				require.NoError(t, err)
				assert.Equal(t, "after", string(buf[:st.Count]))
				return nil
			})
		})
	}
}

func TestWildcardsManyRanks(t *testing.T) {
	const n = 5
	p2ptest.Run(t, n, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() != 0 {
			for i := range 3 {
				msg := []byte(fmt.Sprintf("from %d #%d", ep.Rank(), i))
				if i == 2 {
					msg = bytes.Repeat(msg, 100) // rendezvous
				}
				if err := ep.Send(ctx, 0, ep.Rank()*10+i, msg); err != nil {
					return err
				}
			}
			return nil
		}
		next := make([]int, n)
		for range 3 * (n - 1) {
			buf := make([]byte, 2000)
			st, err := ep.Recv(ctx, p2p.AnySource, p2p.AnyTag, buf)
			if err != nil {
				return err
			}
			i := next[st.Source]
			next[st.Source]++
			if st.Tag != st.Source*10+i {
				return fmt.Errorf("from %d: tag %d, want %d (non-overtaking broken)", st.Source, st.Tag, st.Source*10+i)
			}
			want := []byte(fmt.Sprintf("from %d #%d", st.Source, i))
			if !bytes.HasPrefix(buf[:st.Count], want) {
				return fmt.Errorf("from %d: payload %q", st.Source, buf[:min(st.Count, 40)])
			}
		}
		return nil
	})
}

func TestProbeAndMprobe(t *testing.T) {
	p2ptest.Run(t, 3, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		switch ep.Rank() {
		case 1, 2:
			return ep.Send(ctx, 0, 40+ep.Rank(), pattern(300*ep.Rank(), 9))
		}
		_, ok, err := ep.Iprobe(0, 0)
		require.NoError(t, err)
		require.False(t, ok)
		st, err := ep.Probe(ctx, 2, p2p.AnyTag)
		require.NoError(t, err)
		require.Equal(t, p2p.Status{Source: 2, Tag: 42, Count: 600}, st)
		// Probe does not receive: a second probe sees it again.
		st2, ok, err := ep.Iprobe(p2p.AnySource, 42)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, st, st2)
		// Mprobe claims: nobody else can see the message any more.
		m, err := ep.Mprobe(ctx, p2p.AnySource, 41)
		require.NoError(t, err)
		require.Equal(t, p2p.Status{Source: 1, Tag: 41, Count: 300}, m.Status())
		_, ok, err = ep.Iprobe(1, 41)
		require.NoError(t, err)
		require.False(t, ok)
		buf := make([]byte, m.Status().Count)
		st, err = m.Recv(ctx, buf)
		require.NoError(t, err)
		require.Equal(t, pattern(300, 9), buf)
		_, err = m.Recv(ctx, buf)
		require.ErrorIs(t, err, p2p.ErrInvalidArgument)
		buf = make([]byte, 600)
		_, err = ep.Recv(ctx, 2, 42, buf)
		require.NoError(t, err)
		require.Equal(t, pattern(600, 9), buf)
		return nil
	})
}

func TestSelfAndChannels(t *testing.T) {
	p2ptest.Run(t, 2, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		// Self messages of both sizes.
		for _, n := range []int{5, 5000} {
			r, err := ep.Irecv(ep.Rank(), 1, make([]byte, n))
			require.NoError(t, err)
			require.NoError(t, ep.Send(ctx, ep.Rank(), 1, pattern(n, 3)))
			st, err := r.Wait(ctx)
			require.NoError(t, err)
			require.Equal(t, n, st.Count)
		}
		// A message on channel 7 is invisible to context 0 and vice versa.
		c7, err := ep.Channel(7)
		require.NoError(t, err)
		peer := 1 - ep.Rank()
		require.NoError(t, c7.Send(ctx, peer, 1, []byte("seven")))
		require.NoError(t, ep.Send(ctx, peer, 1, []byte("zero")))
		buf := make([]byte, 10)
		st, err := ep.Recv(ctx, peer, 1, buf)
		require.NoError(t, err)
		require.Equal(t, "zero", string(buf[:st.Count]))
		st, err = c7.Recv(ctx, peer, 1, buf)
		require.NoError(t, err)
		require.Equal(t, "seven", string(buf[:st.Count]))
		return nil
	})
}

func TestDeadlineNamesRanks(t *testing.T) {
	p2ptest.Run(t, 3, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() != 0 {
			return nil
		}
		short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel()
		_, err := ep.Recv(short, 2, 5, make([]byte, 4))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		var de *p2p.DeadlineError
		require.ErrorAs(t, err, &de)
		require.Equal(t, []int{2}, de.Ranks)
		// The peer is named once, by the error's frame.
		require.ErrorContains(t, err, "Recv peer 2 tag 5: context deadline exceeded: had not arrived")

		// WaitAll names every rank not arrived.
		short2, cancel2 := context.WithTimeout(ctx, 30*time.Millisecond)
		defer cancel2()
		r1, _ := ep.Irecv(1, 9, nil)
		r2, _ := ep.Irecv(2, 9, nil)
		r3, _ := ep.Isend(1, 9, make([]byte, 4000)) // rendezvous: waits for rank 1
		err = p2p.WaitAll(short2, r1, r2, r3)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorAs(t, err, &de)
		require.Equal(t, []int{1, 2}, de.Ranks)
		return nil
	})
}

func TestCancel(t *testing.T) {
	p2ptest.Run(t, 2, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			r, err := ep.Irecv(1, 1, make([]byte, 10))
			require.NoError(t, err)
			r.Cancel()
			_, err = r.Wait(ctx)
			require.ErrorIs(t, err, p2p.ErrCanceled)
			// A rendezvous send canceled before the receiver matched it.
			s, err := ep.Isend(1, 2, make([]byte, 4000))
			require.NoError(t, err)
			s.Cancel()
			_, err = s.Wait(ctx)
			require.ErrorIs(t, err, p2p.ErrCanceled)
			require.NoError(t, ep.Send(ctx, 1, 3, nil)) // go ahead
			// The peer then gets the next message with tag 2, not the canceled one.
			return ep.Send(ctx, 1, 2, []byte("real"))
		}
		if _, err := ep.Recv(ctx, 0, 3, nil); err != nil {
			return err
		}
		buf := make([]byte, 4000)
		st, err := ep.Recv(ctx, 0, 2, buf)
		require.NoError(t, err)
		require.Equal(t, 4, st.Count)
		require.Equal(t, "real", string(buf[:4]))
		return nil
	})
}

func TestContextCancelBlockedRecv(t *testing.T) {
	p2ptest.Run(t, 2, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 1 {
			return nil
		}
		c, cancel := context.WithCancel(ctx)
		blocked := make(chan error, 1)
		go func() {
			// Cancel the Recv once it waits (or, should it never, after 10 s).
			blocked <- awaitBlocked("TestContextCancelBlockedRecv", "(*Endpoint).Recv(")
			cancel()
		}()
		_, err := ep.Recv(c, 1, 0, nil)
		require.NoError(t, <-blocked)
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, errors.Is(err, context.DeadlineExceeded))
		return nil
	})
}

func TestWaitAnyAndTest(t *testing.T) {
	p2ptest.Run(t, 3, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 2 {
			return ep.Send(ctx, 0, 1, []byte("x"))
		}
		if ep.Rank() == 1 {
			return nil
		}
		r1, _ := ep.Irecv(1, 1, make([]byte, 1))
		r2, _ := ep.Irecv(2, 1, make([]byte, 1))
		i, st, err := p2p.WaitAny(ctx, r1, nil, r2)
		require.NoError(t, err)
		require.Equal(t, 2, i)
		require.Equal(t, 2, st.Source)
		_, done, err := r1.Test()
		require.NoError(t, err)
		require.False(t, done)
		r1.Cancel()
		_, done, err = r1.Test()
		require.True(t, done)
		require.ErrorIs(t, err, p2p.ErrCanceled)
		return nil
	})
}

// TestWaitAnyLeavesRequestWhenCtxEnds: WaitAny for one request (which
// blocks as Wait does) returns ctx's error when ctx ends first and leaves
// the request pending, where Wait would cancel it: the message sent after
// still completes it. Every provider, as each blocks its own way.
func TestWaitAnyLeavesRequestWhenCtxEnds(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 1 {
					if _, err := ep.Recv(ctx, 0, 2, nil); err != nil {
						return err
					}
					return ep.Send(ctx, 0, 1, []byte("late"))
				}
				// Errors are returned, not required: Run then ends rank 1's
				// wait at once instead of at its timeout.
				buf := make([]byte, 4)
				r, err := ep.Irecv(1, 1, buf)
				if err != nil {
					return err
				}
				short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				i, _, err := p2p.WaitAny(short, r)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || i != -1 {
					return fmt.Errorf("WaitAny past its ctx: %d, %v; want -1 and a deadline error", i, err)
				}
				if r.Done() {
					return errors.New("WaitAny completed the request it gave up on")
				}
				if err := ep.Send(ctx, 1, 2, nil); err != nil {
					return err
				}
				st, err := r.Wait(ctx)
				if err != nil || st.Count != 4 || string(buf) != "late" {
					return fmt.Errorf("the message after WaitAny gave up: %+v, %v, %q", st, err, buf)
				}
				return nil
			})
		})
	}
}

func TestPeerClosedFailsReceive(t *testing.T) {
	p2ptest.Run(t, 2, small, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 1 {
			return ep.Close()
		}
		_, err := ep.Recv(ctx, 1, 0, nil)
		require.ErrorIs(t, err, p2p.ErrClosed)
		require.ErrorContains(t, err, "Recv peer 1 tag 0: closed its endpoint")
		require.NoError(t, ep.Err())
		return nil
	})
}

func TestUseAfterClose(t *testing.T) {
	eps, err := p2ptest.Start(context.Background(), 2, small)
	require.NoError(t, err)
	p2ptest.Close(eps)
	_, err = eps[0].Isend(1, 0, nil)
	require.ErrorIs(t, err, p2p.ErrClosed)
	_, err = eps[1].Recv(context.Background(), 0, 0, nil)
	require.ErrorIs(t, err, p2p.ErrClosed)
	require.NoError(t, eps[0].Close())
}

// TestSplitRendezvousFallback: from rndvSplitMin a rendezvous receiver
// over shm asks the sender to write the second half (CTS). Between the
// devices of one process the sender cannot (no process_vm_writev), says
// so (WDONE), and the receiver READs that half itself; the sender then
// stops offering. Every message arrives whole either way. (Across
// processes the write succeeds: bench's TestJobs validates it.)
func TestSplitRendezvousFallback(t *testing.T) {
	const n = 300 << 10
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		for i := range 3 {
			if ep.Rank() == 0 {
				if err := ep.Send(ctx, 1, 5, pattern(n+i, byte(i))); err != nil {
					return err
				}
				continue
			}
			buf := make([]byte, n+10)
			st, err := ep.Recv(ctx, 0, 5, buf)
			if err != nil {
				return err
			}
			if st.Count != n+i || !bytes.Equal(buf[:st.Count], pattern(n+i, byte(i))) {
				return fmt.Errorf("message %d: %d bytes, or wrong data", i, st.Count)
			}
		}
		return nil
	})
}

// A rendezvous receiver over shm splits the copy with an idle sender
// (CTS), but below 1 MiB not with one that has a large rendezvous of its
// own in flight to it, which it READs: its core already copies. (Between
// the devices of one process the sender cannot write and falls back, and
// offers no more splits: so the idle case comes first, the other way
// round.)
func TestSplitRendezvousOnlyWithIdleSender(t *testing.T) {
	const n, huge = 300 << 10, 1 << 20
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		buf := make([]byte, huge)
		before := p2p.CTSSent()
		// Rank 1 to rank 0, nothing else in flight: rank 0 splits.
		if ep.Rank() == 1 {
			if err := ep.Send(ctx, 0, 1, pattern(n, 1)); err != nil {
				return err
			}
		} else {
			if _, err := ep.Recv(ctx, 1, 1, buf); err != nil {
				return err
			}
			if got := p2p.CTSSent() - before; got != 1 {
				return fmt.Errorf("a receiver with nothing to send asked for %d split(s), want 1", got)
			}
		}
		// Rank 0 to rank 1, while rank 1's own message to rank 0 waits to
		// be read (rank 0 receives it last): rank 1 does not split.
		if ep.Rank() == 1 {
			r, err := ep.Isend(0, 2, pattern(n, 2))
			if err != nil {
				return err
			}
			if err := ep.Send(ctx, 0, 9, nil); err != nil {
				return err
			}
			for i, size := range []int{n, huge} {
				st, err := ep.Recv(ctx, 0, 3+i, buf)
				if err != nil {
					return err
				}
				if !bytes.Equal(buf[:st.Count], pattern(size, byte(3+i))) {
					return fmt.Errorf("message %d received while sending differs", i)
				}
			}
			_, err = r.Wait(ctx)
			return err
		}
		if _, err := ep.Recv(ctx, 1, 9, nil); err != nil {
			return err
		}
		if err := ep.Send(ctx, 1, 3, pattern(n, 3)); err != nil {
			return err
		}
		if got := p2p.CTSSent() - before; got != 1 {
			return fmt.Errorf("a receiver with its own large message in flight to the sender asked for a split (%d CTS in all, want 1)", got)
		}
		// From 1 MiB the split pays even then.
		if err := ep.Send(ctx, 1, 4, pattern(huge, 4)); err != nil {
			return err
		}
		if got := p2p.CTSSent() - before; got != 2 {
			return fmt.Errorf("a receiver of %d bytes with its own message in flight did not split (%d CTS in all, want 2)", huge, got)
		}
		if _, err := ep.Recv(ctx, 1, 2, buf); err != nil {
			return err
		}
		if !bytes.Equal(buf[:n], pattern(n, 2)) {
			return fmt.Errorf("the message sent while receiving differs")
		}
		return nil
	})
}

// TestSplitRendezvousSenderGone: a receive of a split rendezvous waits for
// the sender's WDONE after its own READ; if the sender never answers the
// CTS and then closes its endpoint, the receive fails naming it instead of
// waiting forever, and the sender's request fails too (Close gave up on
// it). The hook is package-wide: this test must not run in parallel with
// others (none in this package calls t.Parallel).
func TestSplitRendezvousSenderGone(t *testing.T) {
	p2p.SetIgnoreCTS(true)
	defer p2p.SetIgnoreCTS(false)
	const n = 300 << 10
	opts := p2ptest.Options{Provider: "shm", P2P: p2p.Options{CloseTimeout: 300 * time.Millisecond}, Timeout: 20 * time.Second}
	posted := make(chan struct{})
	p2ptest.Run(t, 2, opts, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			<-posted // the RTS matches at once
			before := p2p.IgnoredCTS()
			r, err := ep.Isend(1, 5, pattern(n, 1))
			if err != nil {
				return err
			}
			// Rank 1 matched and sent its CTS once this sender has ignored one.
			if err := waitUntil(ctx, "the receiver's CTS", func() bool { return p2p.IgnoredCTS() > before }); err != nil {
				return err
			}
			if err := ep.Close(); err != nil {
				return err
			}
			if _, err := r.Wait(ctx); err == nil {
				return fmt.Errorf("the send completed although its receiver never got the second half")
			}
			return nil
		}
		r, err := ep.Irecv(0, 5, make([]byte, n))
		close(posted)
		if err != nil {
			return err
		}
		_, err = r.Wait(ctx)
		if err == nil {
			return fmt.Errorf("the receive completed without the sender's half")
		}
		if !errors.Is(err, p2p.ErrClosed) && !errors.Is(err, p2p.ErrPeerLost) {
			return fmt.Errorf("receive: %v, want the sender's close or loss", err)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("the receive only ended with the test's deadline: %v", err)
		}
		return nil
	})
}

// TestIdleRepost: a receiver posts a full batch of consumed buffers again
// once it is idle (here, a receive that waits for a message that never
// comes), not only when a second batch fills up; otherwise a sender would
// run on fewer credits than the receiver has buffers.
func TestIdleRepost(t *testing.T) {
	for _, prov := range []string{"loop", "shm"} {
		t.Run(prov, func(t *testing.T) {
			opts := p2ptest.Options{Provider: prov, P2P: p2p.Options{EagerSlots: 32}}
			const early = 6 // more than a batch (4 of 32 buffers), less than two
			p2ptest.Run(t, 2, opts, func(ctx context.Context, ep *p2p.Endpoint) error {
				buf := make([]byte, 8)
				if ep.Rank() == 0 {
					for range early {
						if err := ep.Send(ctx, 1, 1, buf); err != nil {
							return err
						}
					}
					_, err := ep.Recv(ctx, 1, 3, buf) // rank 1 is done
					return err
				}
				for range early {
					if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
						return err
					}
				}
				// Polls that find nothing: the endpoint is idle.
				wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
				_, err := ep.Recv(wctx, 0, 2, buf)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("the idle receive: %v, want a deadline error", err)
				}
				// A full batch (4) must have gone; fewer may wait for more.
				if n := ep.Unposted(0); n >= 4 {
					return fmt.Errorf("%d consumed buffers still unposted after an idle wait", n)
				}
				return ep.Send(ctx, 0, 3, buf)
			})
		})
	}
}

// TestRepostWarmsBuffers: a receive buffer that took a small frame is
// written once per page up to the largest frame its peer has sent before
// it is posted again (peer.warm), and not beyond, so that the next large
// frame it takes does not meet cold pages. Without it the marks below
// the largest frame stay as the test left them.
func TestRepostWarmsBuffers(t *testing.T) {
	const large, small = 10000, 16 // large spans pages 0-2 of a buffer
	opts := p2ptest.Options{P2P: p2p.Options{EagerSlots: 32}}
	p2ptest.Run(t, 2, opts, func(ctx context.Context, ep *p2p.Endpoint) error {
		buf := make([]byte, large)
		if ep.Rank() == 0 {
			if err := ep.Send(ctx, 1, 1, buf); err != nil {
				return err
			}
			if _, err := ep.Recv(ctx, 1, 2, buf[:1]); err != nil { // rank 1 marked its buffers
				return err
			}
			for range 16 {
				if err := ep.Send(ctx, 1, 3, buf[:small]); err != nil {
					return err
				}
			}
			_, err := ep.Recv(ctx, 1, 4, buf[:1]) // rank 1 is done
			return err
		}
		if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
			return err
		}
		mem, slot := ep.RecvBuffers(0)
		if slot < 4*4096 {
			return fmt.Errorf("buffers of %d bytes: the test needs four pages", slot)
		}
		// Nothing is in flight: mark pages 1-3 of every buffer.
		for off := 0; off+slot <= len(mem); off += slot {
			for pg := 1; pg <= 3; pg++ {
				mem[off+pg*4096] = 0xAA
			}
		}
		if err := ep.Send(ctx, 0, 2, buf[:1]); err != nil {
			return err
		}
		for range 16 {
			if _, err := ep.Recv(ctx, 0, 3, buf[:small]); err != nil {
				return err
			}
		}
		// An idle wait reposts the consumed buffers.
		wctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
		_, err := ep.Recv(wctx, 0, 9, buf[:1])
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("the idle receive: %v, want a deadline error", err)
		}
		warmed := 0
		for off := 0; off+slot <= len(mem); off += slot {
			if mem[off+4096] == 0 && mem[off+2*4096] == 0 {
				warmed++
			} else if mem[off+4096] == 0 || mem[off+2*4096] == 0 {
				return fmt.Errorf("buffer at %d warmed in part: page 1 %#x, page 2 %#x", off/slot, mem[off+4096], mem[off+2*4096])
			}
			if mem[off+3*4096] != 0xAA {
				return fmt.Errorf("buffer %d written at page 3, beyond the largest frame (%d bytes)", off/slot, large)
			}
		}
		// 16 small frames consumed 16 buffers; a batch of them may wait
		// for more (see TestIdleRepost), the rest went back warm.
		if warmed < 8 {
			return fmt.Errorf("%d buffers warmed before their repost, want at least 8 of the 16 the small frames took", warmed)
		}
		return ep.Send(ctx, 0, 4, buf[:1])
	})
}

// TestSlotsGrow: a receiver whose sender ran out of credits posts more
// buffers, doubling up to EagerSlotsMax and no further, and every message
// still arrives whole and in order; a ping-pong, which never runs out,
// leaves the buffers as they were.
func TestSlotsGrow(t *testing.T) {
	for _, prov := range []string{"loop", "shm"} {
		t.Run(prov, func(t *testing.T) {
			// No rings: over shm they would carry the ping-pong, and the
			// credits of the few control frames that still take the slots
			// (the window exchange, heartbeats) come back only once a lot
			// are owed, so a sender can run short of them (growth).
			opts := p2ptest.Options{Provider: prov, P2P: p2p.Options{EagerLimit: 256, EagerSlots: 4, EagerSlotsMax: 16, RingLines: -1}}
			s := newStream(300, 2, []int{0, 9, 256, 3000}) // eager and rendezvous
			p2ptest.Run(t, 2, opts, func(ctx context.Context, ep *p2p.Endpoint) error {
				buf := make([]byte, 8)
				// A ping-pong first: one message in flight, no growth.
				for range 20 {
					if ep.Rank() == 0 {
						if err := ep.Send(ctx, 1, 1, buf); err != nil {
							return err
						}
						if _, err := ep.Recv(ctx, 1, 1, buf); err != nil {
							return err
						}
					} else {
						if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
							return err
						}
						if err := ep.Send(ctx, 0, 1, buf); err != nil {
							return err
						}
					}
				}
				if got := ep.Posted(1 - ep.Rank()); got != 4 {
					return fmt.Errorf("after a ping-pong: %d buffers posted, want 4", got)
				}
				if err := s.run(ctx, ep); err != nil || ep.Rank() == 0 {
					return err
				}
				if got := ep.Posted(0); got != 16 {
					return fmt.Errorf("after a stream: %d buffers posted, want 16 (EagerSlotsMax)", got)
				}
				return nil
			})
		})
	}
}

// TestInlineAccounting: small frames over shm and tcp (providers with
// InlineSends) go inline, never through a staging slot, and mostly
// unsignaled; the send queue entries they hold are given back when a
// signaled one completes. Thousands of them, streamed and answered, must
// neither stall the send queue nor leave more entries counted in use than
// the unsignaled run between two signaled frames.
func TestInlineAccounting(t *testing.T) {
	const n = 3000
	for _, prov := range []string{"shm", "tcp"} {
		t.Run(prov, func(t *testing.T) {
			// No rings, which would carry these messages over shm instead of the QP.
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov, P2P: p2p.Options{RingLines: -1}}, func(ctx context.Context, ep *p2p.Endpoint) error {
				peer := 1 - ep.Rank()
				buf := make([]byte, 36)
				for round := range 2 {
					if ep.Rank() == round {
						if err := streamTo(ctx, ep, peer, n, 64, func(i int) []byte { return pattern(i%37, byte(i)) }); err != nil {
							return err
						}
					} else {
						for i := range n {
							st, err := ep.Recv(ctx, peer, 5, buf)
							if err != nil {
								return err
							}
							if st.Count != i%37 || !bytes.Equal(buf[:st.Count], pattern(i%37, byte(i))) {
								return fmt.Errorf("message %d: got %d bytes, want %d", i, st.Count, i%37)
							}
						}
						if err := ep.Send(ctx, peer, 6, nil); err != nil {
							return err
						}
					}
				}
				if ep.StagingUsed(peer) {
					return fmt.Errorf("a small frame to rank %d was copied into a staging slot, not posted inline", peer)
				}
				// The last signaled completion may still be on its way to the
				// poller; a leak keeps the count up for good.
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				if err := waitUntil(wctx, "the send queue to drain", func() bool { return ep.SendOutstanding(peer) < 16 }); err != nil {
					return fmt.Errorf("%d send queue entries still counted in use: %w", ep.SendOutstanding(peer), err)
				}
				return nil
			})
		})
	}
}

// streamTo sends msg(0..n-1) to peer with tag 5, at most window in flight,
// and then waits for the peer's empty acknowledgement with tag 6.
func streamTo(ctx context.Context, ep *p2p.Endpoint, peer, n, window int, msg func(i int) []byte) error {
	reqs := make([]*p2p.Request, 0, window)
	for i := range n {
		r, err := ep.Isend(peer, 5, msg(i))
		if err != nil {
			return err
		}
		if reqs = append(reqs, r); len(reqs) == cap(reqs) {
			if err := p2p.WaitAll(ctx, reqs...); err != nil {
				return err
			}
			reqs = reqs[:0]
		}
	}
	if err := p2p.WaitAll(ctx, reqs...); err != nil {
		return err
	}
	_, err := ep.Recv(ctx, peer, 6, nil)
	return err
}

// TestEagerInline: over shm an eager frame of any size up to EagerLimit
// goes inline (no staging slot, mostly no send completion). A stream of
// them, sizes across the limits of the completion's own line and of the
// non-temporal copy, arrives intact and in order, and leaves no send
// queue entry counted in use.
func TestEagerInline(t *testing.T) {
	const n = 400
	sizes := []int{0, 37, 200, 2000, 4095, 4096, 9000}
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm", P2P: p2p.Options{RingLines: -1}}, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		if !ep.EagerInline(peer) {
			return fmt.Errorf("eager frames of up to %d bytes do not go inline over shm", ep.EagerLimit(peer))
		}
		size := func(i int) int { return min(sizes[i%len(sizes)], ep.EagerLimit(peer)) }
		if ep.Rank() == 0 {
			if err := streamTo(ctx, ep, peer, n, 32, func(i int) []byte { return pattern(size(i), byte(i)) }); err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := waitUntil(wctx, "the send queue to drain", func() bool { return ep.SendOutstanding(peer) < 16 }); err != nil {
				return fmt.Errorf("%d send queue entries still counted in use: %w", ep.SendOutstanding(peer), err)
			}
			return nil
		}
		buf := make([]byte, ep.EagerLimit(peer))
		for i := range n {
			st, err := ep.Recv(ctx, peer, 5, buf)
			if err != nil {
				return err
			}
			if want := pattern(size(i), byte(i)); st.Count != len(want) || !bytes.Equal(buf[:st.Count], want) {
				return fmt.Errorf("message %d: got %d bytes (or other data), want %d", i, st.Count, len(want))
			}
		}
		return ep.Send(ctx, peer, 6, nil)
	})
}

// TestPipeFragmentsInline: over shm the fragments of a pipelined message
// go inline from the caller's buffer, as eager frames do, never through a
// staging slot (a copy more each), and arrive intact.
func TestPipeFragmentsInline(t *testing.T) {
	sizes := []int{32<<10 + 1, 48 << 10, 64 << 10, 40000} // above the 32 KiB eager limit
	opts := p2p.Options{EagerLimit: 32 << 10, PipelineLimit: 64 << 10}
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm", P2P: opts}, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		if ep.Rank() == 0 {
			for i, n := range sizes {
				if err := ep.Send(ctx, peer, 5, pattern(n, byte(i+1))); err != nil {
					return err
				}
			}
			if _, err := ep.Recv(ctx, peer, 6, nil); err != nil {
				return err
			}
			if s := ep.Stats().Peers[peer].PipeSent; s.Msgs != uint64(len(sizes)) {
				return fmt.Errorf("%d of %d messages went pipelined", s.Msgs, len(sizes))
			}
			if ep.StagingUsed(peer) {
				return fmt.Errorf("a pipelined fragment was copied into a staging slot")
			}
			return nil
		}
		buf := make([]byte, 64<<10)
		for i, n := range sizes {
			st, err := ep.Recv(ctx, peer, 5, buf)
			if err != nil {
				return err
			}
			if want := pattern(n, byte(i+1)); !bytes.Equal(buf[:st.Count], want) {
				return fmt.Errorf("message %d: got %d bytes (or other data), want %d", i, st.Count, len(want))
			}
		}
		return ep.Send(ctx, peer, 6, nil)
	})
}

// TestEagerInlinePair: over shm an inline eager frame's payload (of at
// least 2 KiB) goes from the caller's buffer to the provider beside
// its header, never through the endpoint's inline frame buffer, and
// arrives intact.
func TestEagerInlinePair(t *testing.T) {
	sizes := []int{2048, 4096, 9000, 16384}
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm", P2P: p2p.Options{RingLines: -1}}, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		if ep.Rank() == 0 {
			for i, n := range sizes {
				if err := ep.Send(ctx, peer, 5, pattern(min(n, ep.EagerLimit(peer)), byte(i+1))); err != nil {
					return err
				}
			}
			if _, err := ep.Recv(ctx, peer, 6, nil); err != nil {
				return err
			}
			if ep.InlineStaged(peer) {
				return fmt.Errorf("a payload was copied into the inline frame buffer")
			}
			return nil
		}
		buf := make([]byte, ep.EagerLimit(peer))
		for i, n := range sizes {
			st, err := ep.Recv(ctx, peer, 5, buf)
			if err != nil {
				return err
			}
			if want := pattern(min(n, ep.EagerLimit(peer)), byte(i+1)); !bytes.Equal(buf[:st.Count], want) {
				return fmt.Errorf("message %d: got %d bytes (or other data), want %d", i, st.Count, len(want))
			}
		}
		return ep.Send(ctx, peer, 6, nil)
	})
}

// A request given back with Release is the next one the endpoint hands
// out, zeroed: a loop of Isend/Irecv/Wait/Release cycles the same few
// requests instead of allocating, and nothing of the previous use (status,
// error, completion) shows through.
func TestReleaseRecycles(t *testing.T) {
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		buf := make([]byte, 8)
		var prev *p2p.Request
		for i := range 20 {
			var r *p2p.Request
			var err error
			if ep.Rank() == 0 {
				r, err = ep.Isend(peer, i, buf)
			} else {
				r, err = ep.Irecv(peer, i, buf)
			}
			if err != nil {
				return err
			}
			if prev != nil && r != prev {
				return fmt.Errorf("round %d: a new request, not the one released in round %d", i, i-1)
			}
			st, err := r.Wait(ctx)
			if err != nil {
				return err
			}
			if ep.Rank() == 1 && (st.Tag != i || st.Source != peer || st.Count != 8) {
				return fmt.Errorf("round %d: status %+v", i, st)
			}
			r.Release()
			prev = r
		}
		return nil
	})
}
