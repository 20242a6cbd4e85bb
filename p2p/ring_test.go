package p2p_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/shm"
)

// Over shm, small messages go through a ring in the receiver's memory and
// the rest through the queue pair; one tag's messages must still arrive in
// the order sent. A small ring fills at once (later small messages fall
// back to the queue pair, marked) and few credits make the queue pair's
// frames queue too; the receiver starts only once everything is sent,
// so the two paths are both full when it reads. Sizes cross every
// boundary: the ring's one- and two-line messages, its largest (2032
// bytes in 64 lines, half the ring; 4096, the eager limit here, in 1024)
// and one byte beyond, the rendezvous.
func TestRingOrder(t *testing.T) {
	sizes := []int{0, 8, 48, 49, 112, 113, 1072, 2032, 2033, 2096, 2097, 4096, 4097, 1000, 5000, 1, 200}
	for _, lines := range []int{64, 1024} {
		t.Run(fmt.Sprint("lines=", lines), func(t *testing.T) {
			o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second,
				P2P: p2p.Options{EagerLimit: 4096, EagerSlots: 4, RingLines: lines}}
			s := newStream(600, 7, sizes)
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if err := s.run(ctx, ep); err != nil {
					return err
				}
				if ep.Rank() == 0 {
					ps := ep.Stats().Peers[1]
					assert.NotZero(t, ps.RingSent.Msgs, "no message went through the ring")
					assert.Less(t, ps.RingSent.Msgs, ps.EagerSent.Msgs, "no small message fell back to the queue pair")
				}
				return nil
			})
		})
	}
}

// Ring messages in both directions at once, with AnyTag and AnySource
// receives mixed in: every payload arrives intact and in order per tag.
func TestRingPingPong(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		buf := make([]byte, 1100)
		for i := range 3000 {
			n := i % 1073
			if (i+ep.Rank())%2 == 0 {
				if err := ep.Send(ctx, peer, i%3, pattern(n, byte(i))); err != nil {
					return err
				}
				continue
			}
			src, tag := peer, i%3
			if i%5 == 0 {
				src, tag = p2p.AnySource, p2p.AnyTag
			}
			st, err := ep.Recv(ctx, src, tag, buf)
			if err != nil {
				return err
			}
			if st.Count != n || st.Tag != i%3 || st.Source != peer || string(buf[:n]) != string(pattern(n, byte(i))) {
				return fmt.Errorf("message %d: %d bytes, tag %d from %d", i, st.Count, st.Tag, st.Source)
			}
		}
		// One message in flight each way at most: every one fits the ring.
		ps := ep.Stats().Peers[peer]
		assert.Equal(t, uint64(1500), ps.EagerSent.Msgs)
		assert.Equal(t, uint64(1500), ps.RingSent.Msgs)
		assert.Equal(t, uint64(1500), ps.RingRecv.Msgs)
		return nil
	})
}

// A receiver asleep in its completion queue must wake for a ring message,
// which rings no doorbell by itself: no spin and no yield send it to sleep
// at once, and the sender waits until it sleeps in futex(2). No heartbeats,
// which would wake it too.
func TestRingWakesSleeper(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second,
		P2P: p2p.Options{Spin: -1, Yield: -1, Heartbeat: time.Hour, LivenessTimeout: -1}}
	var round atomic.Int32 // the round rank 1 waits in
	round.Store(-1)
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		for i := range 3 {
			if ep.Rank() == 0 {
				for round.Load() != int32(i) {
					if err := ctx.Err(); err != nil {
						return err
					}
					time.Sleep(time.Millisecond)
				}
				if err := awaitFutexSleep("TestRingWakesSleeper"); err != nil {
					return err
				}
				if err := ep.Send(ctx, 1, i, []byte("wake up")); err != nil {
					return err
				}
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			buf := make([]byte, 16)
			round.Store(int32(i))
			st, err := ep.Recv(rctx, 0, i, buf)
			cancel()
			require.NoError(t, err, "round %d", i)
			assert.Equal(t, "wake up", string(buf[:st.Count]))
		}
		if ep.Rank() == 0 {
			assert.Equal(t, uint64(3), ep.Stats().Peers[1].RingSent.Msgs)
		}
		return nil
	})
}

// RingLines must be a power of two that holds two of the largest messages.
func TestRingLinesInvalid(t *testing.T) {
	for _, n := range []int{3, 32, 100, 1 << 17} {
		_, err := p2ptest.Start(context.Background(), 2, p2ptest.Options{Provider: "shm", P2P: p2p.Options{RingLines: n}})
		require.ErrorIs(t, err, p2p.ErrInvalidArgument, "RingLines %d", n)
		assert.ErrorContains(t, err, fmt.Sprintf("RingLines %d", n))
	}
}

// The matching rules hold for ring messages as for any other: a message
// too large for its receive fails with both sizes, whether the receive was
// posted first (the ring's direct copy) or came later (the unexpected
// queue); probes see ring messages, and a matched probe claims one.
func TestRingSemantics(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			if _, err := ep.Recv(ctx, 1, 99, nil); err != nil { // rank 1 has posted its receives
				return err
			}
			for i, n := range []int{400, 400, 500, 60, 1072} {
				if err := ep.Send(ctx, 1, i, pattern(n, byte(i))); err != nil {
					return err
				}
			}
			assert.Equal(t, uint64(5), ep.Stats().Peers[1].RingSent.Msgs)
			return nil
		}
		// Posted before the messages come: a receive too small, one that fits.
		small, err := ep.Irecv(0, 0, make([]byte, 100))
		require.NoError(t, err)
		fits := make([]byte, 450)
		ok, err := ep.Irecv(0, 1, fits)
		require.NoError(t, err)
		require.NoError(t, ep.Send(ctx, 0, 99, nil))
		_, err = small.Wait(ctx)
		var te *p2p.TruncatedError
		require.ErrorAs(t, err, &te)
		assert.Equal(t, 400, te.Size)
		assert.Equal(t, 100, te.Cap)
		st, err := ok.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, 400, st.Count)
		assert.Equal(t, pattern(400, 1), fits[:400])
		// Arrived before any receive (unexpected): probe, claim, receive.
		st, err = ep.Probe(ctx, 0, 2)
		require.NoError(t, err)
		assert.Equal(t, p2p.Status{Source: 0, Tag: 2, Count: 500}, st)
		_, err = ep.Recv(ctx, 0, 2, make([]byte, 499))
		require.ErrorAs(t, err, &te)
		assert.Equal(t, 500, te.Size)
		m, err := ep.Mprobe(ctx, p2p.AnySource, p2p.AnyTag)
		require.NoError(t, err)
		assert.Equal(t, p2p.Status{Source: 0, Tag: 3, Count: 60}, m.Status())
		buf := make([]byte, 1100)
		st, err = m.Recv(ctx, buf)
		require.NoError(t, err)
		assert.Equal(t, pattern(60, 3), buf[:st.Count])
		st, err = ep.Recv(ctx, 0, 4, buf)
		require.NoError(t, err)
		assert.Equal(t, pattern(1072, 4), buf[:st.Count])
		return nil
	})
}

// Rings are an optimization: a rank whose shm heap has no room for its
// ring window still joins (the key exchange completes on every rank) and
// talks through the queue pairs. A 6 MiB heap holds the queue pairs of two
// ranks with 16 KiB eager buffers but not, beside them, a window of
// 16384-line rings.
func TestRingWindowWithoutRoom(t *testing.T) {
	open := func(ctx context.Context, provider string, do verbs.DeviceOptions) (verbs.Device, error) {
		return shm.Open(ctx, shm.Options{DeviceOptions: do, HeapSize: 6 << 20})
	}
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second,
		P2P: p2p.Options{RingLines: 16384, OpenDevice: open, EagerLimit: 16 << 10}}
	s := newStream(100, 1, []int{8, 300, 5000})
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if err := s.run(ctx, ep); err != nil {
			return err
		}
		ps := ep.Stats().Peers[1-ep.Rank()]
		assert.Zero(t, ps.RingSent.Msgs+ps.RingRecv.Msgs, "a ring in a heap without room")
		return nil
	})
}

// A ring message whose header breaks the rules (a size beyond the ring's
// limit) breaks the link as a protocol error: the receiver's Recv fails
// naming the sender instead of waiting for a message that never comes.
func TestRingCorrupt(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second, P2P: p2p.Options{LivenessTimeout: -1}}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			require.True(t, ep.CorruptRing(1, 100000))
			_, _ = ep.Recv(ctx, 1, 0, nil) // fails once rank 1 reports the loss
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := ep.Recv(rctx, 0, 0, make([]byte, 8))
		require.ErrorIs(t, err, p2p.ErrPeerLost)
		require.ErrorIs(t, err, p2p.ErrProtocol)
		assert.NotErrorIs(t, err, context.DeadlineExceeded)
		return nil
	})
}

// Both ranks post a window of receives and a window of small sends at
// once, window after window (the bibw benchmark's pattern): the queue
// pair's credits run out, CREDIT frames flow both ways, and small messages
// alternate between the ring and the queue pair. Every message must
// arrive intact and in the order sent. This broke when a CREDIT frame was
// acknowledged before its reserved buffer was posted again: the sender's
// next CREDIT took a buffer its credits counted on, a later marked frame
// met no posted receive and waited in the provider (RNR) while ring
// messages sent after it went ahead ("ring mark ..., but the ring was read
// up to ...").
func TestRingBidirectionalWindows(t *testing.T) {
	const window, windows = 64, 1000
	for _, slots := range []int{8, 32} {
		t.Run(fmt.Sprint("slots=", slots), func(t *testing.T) {
			o := p2ptest.Options{Provider: "shm", Timeout: 60 * time.Second,
				P2P: p2p.Options{EagerSlots: slots}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				peer := 1 - ep.Rank()
				bufs := make([][]byte, window)
				for i := range bufs {
					bufs[i] = make([]byte, 8)
				}
				reqs := make([]*p2p.Request, 0, 2*window)
				msg := func(k int) []byte { // message k: 1-8 bytes, k's low bytes
					b := make([]byte, 1+k%8)
					for j := range b {
						b[j] = byte(k >> (8 * (j % 4)))
					}
					return b
				}
				for w := range windows {
					reqs = reqs[:0]
					for i := range window {
						r, err := ep.Irecv(peer, 5, bufs[i])
						if err != nil {
							return err
						}
						reqs = append(reqs, r)
					}
					for i := range window {
						r, err := ep.Isend(peer, 5, msg(w*window+i))
						if err != nil {
							return err
						}
						reqs = append(reqs, r)
					}
					if err := p2p.WaitAll(ctx, reqs...); err != nil {
						return fmt.Errorf("window %d: %w", w, err)
					}
					for i, r := range reqs[:window] {
						want := msg(w*window + i)
						st, _, err := r.Test()
						if err != nil {
							return err
						}
						if st.Count != len(want) || string(bufs[i][:st.Count]) != string(want) {
							return fmt.Errorf("window %d, message %d: got %x, want %x (overtaken?)", w, i, bufs[i][:st.Count], want)
						}
					}
				}
				return nil
			})
		})
	}
}

// A goroutine that went to sleep in its completion queue before the rings
// existed (the background goroutine starts before Open sets up the ring
// window) was never counted in the sleepers word, so a sender of a ring
// message saw nobody asleep and sent no PING, and a rank waiting without
// polling (NewWindow's WaitAll) slept until the next heartbeat: about 1
// in 2000 runs of TestWindowSignalCreditAck over shm. Here rank 1 forgets
// its rings, lets its background goroutine block uncounted, installs the
// rings again and waits for a ring message without polling.
func TestRingWakesEarlySleeper(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second,
		P2P: p2p.Options{Spin: -1, Yield: -1, Heartbeat: time.Hour, LivenessTimeout: -1}}
	var step atomic.Int32 // rank 1 sets 1: send the large message; 2: send the ring message
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		await := func(v int32) error {
			for step.Load() != v {
				if err := ctx.Err(); err != nil {
					return err
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		}
		if ep.Rank() == 0 {
			if err := await(1); err != nil {
				return err
			}
			// Too large for the ring: a frame, which wakes rank 1's
			// background goroutine, which then blocks again, uncounted.
			if err := ep.Send(ctx, 1, 1, make([]byte, 5000)); err != nil {
				return err
			}
			if err := await(2); err != nil {
				return err
			}
			return ep.Send(ctx, 1, 2, []byte("wake up"))
		}
		restore := ep.ForgetRings()
		step.Store(1)
		require.Eventually(t, func() bool {
			return ep.Stats().Peers[0].EagerRecv.Msgs == 1 && ep.BlockedUncounted() == 1
		}, 10*time.Second, time.Millisecond, "the background goroutine never blocked again after the frame")
		restore()
		r, err := ep.Irecv(0, 2, make([]byte, 16))
		if err != nil {
			return err
		}
		step.Store(2)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if _, err := r.WaitPassive(rctx); err != nil {
			return fmt.Errorf("the ring message did not wake the background goroutine: %w", err)
		}
		_, err = ep.Recv(ctx, 0, 1, make([]byte, 5000))
		return err
	})
}

// A ring message orders what its sender wrote before it ahead of what its
// receiver reads after it, as every message does: goroutine ranks may hand
// plain Go memory to each other by messages (comm's window fences rely on
// it). The rings are shared memory outside the Go heap, so under -race
// this fails unless the ring tells the race detector about the edge.
func TestRingMessageOrdersMemory(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
	shared := make([]int64, 1)
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		buf := make([]byte, 8)
		for i := range 200 {
			if i%2 == ep.Rank() {
				shared[0] = int64(i)
				if err := ep.Send(ctx, peer, 0, buf); err != nil {
					return err
				}
				continue
			}
			if _, err := ep.Recv(ctx, peer, 0, buf); err != nil {
				return err
			}
			if shared[0] != int64(i) {
				return fmt.Errorf("after message %d the shared word holds %d", i, shared[0])
			}
		}
		assert.NotZero(t, ep.Stats().Peers[peer].RingSent.Msgs, "no message went through the ring")
		return nil
	})
}

// The default ring holds an OSU window (64 messages in flight) of
// messages up to 2000 bytes (32 lines), and 31 of the largest (4 KiB, 65
// lines), half a window: in the bw and bibw loops, and in a collective's burst of Isends,
// a sender posts the whole window before the receiver reads, and what does
// not fit pays the queue pair's path. With 256 lines, 28 of 64 528-byte
// messages (9 lines each) fitted.
func TestDefaultRingHoldsWindow(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		assert.GreaterOrEqual(t, ep.RingLines(1-ep.Rank()), 31*p2p.RingMaxLinesPerMessage)
		return nil
	})
}

// A receiver that has handled what it saw tells the sender how far it
// read at once, not only every quarter of the ring: a window of sends must
// find the room it freed. Rank 0 sends two messages of
// RingMaxLinesPerMessage lines, each acknowledged, and after each ack
// finds the tail past it, far below a quarter of the default ring.
func TestRingTailAfterDrain(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		const k = p2p.RingMaxLinesPerMessage
		size := (k - 1) * 64 // k lines: 48 bytes in the first, up to 64 in each further one
		if ep.Rank() == 1 {
			buf := make([]byte, size)
			for i := range 2 {
				if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
					return fmt.Errorf("message %d: %w", i, err)
				}
				if err := ep.Send(ctx, 0, 2, nil); err != nil {
					return err
				}
			}
			return nil
		}
		if l := ep.RingLines(1); l < 8*k {
			return fmt.Errorf("a ring of %d lines to rank 1: too shallow for the test", l)
		}
		want := []uint32{k, 2 * k}
		for i := range 2 {
			if err := ep.Send(ctx, 1, 1, pattern(size, byte(i))); err != nil {
				return err
			}
			if _, err := ep.Recv(ctx, 1, 2, nil); err != nil {
				return fmt.Errorf("ack %d: %w", i, err)
			}
			assert.Equal(t, want[i], ep.RingTail(1), "the tail rank 1 published after message %d", i)
		}
		assert.Equal(t, uint64(2), ep.Stats().Peers[1].RingSent.Msgs, "both messages went through the ring")
		return nil
	})
}

// A ring message's further lines carry payload only, and a later lap's
// scan polls them as first lines: payload bytes that read as the stamp of
// the line's next-lap position (with a context, tag and size after it)
// must not publish a message. Rank 0 sends, in lockstep so that nothing
// falls back to the queue pair, a 1072-byte message whose last line looks
// like the first line of a message at position 80 of a 64-line ring, then
// 1-line messages up to position 80; rank 1, with nothing more sent,
// must find no message there.
func TestRingStaleLineNotPublished(t *testing.T) {
	const lines, pos, tag = 64, 80, 77
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second,
		P2P: p2p.Options{RingLines: lines}}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			big := pattern(1072, 9)
			// Line 16 (the last further line) starts at payload byte
			// 48 + 15*64: stamp pos+1, context 0, tag, size 8.
			l := big[48+15*64:]
			binary.LittleEndian.PutUint32(l, pos+1)
			binary.LittleEndian.PutUint32(l[4:], 0)
			binary.LittleEndian.PutUint32(l[8:], tag)
			binary.LittleEndian.PutUint32(l[12:], 8)
			msgs := [][]byte{big}
			for range pos - 17 {
				msgs = append(msgs, pattern(8, 1))
			}
			for i, m := range msgs {
				if err := ep.Send(ctx, 1, 1, m); err != nil {
					return err
				}
				if _, err := ep.Recv(ctx, 1, 2, nil); err != nil {
					return fmt.Errorf("ack %d: %w", i, err)
				}
			}
			assert.Equal(t, uint64(pos-16), ep.Stats().Peers[1].RingSent.Msgs, "every message went through the ring")
			return ep.Send(ctx, 1, 3, nil)
		}
		buf := make([]byte, 1072)
		for i := range pos - 16 {
			if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
				return fmt.Errorf("message %d: %w", i, err)
			}
			if i == pos-17 {
				// Rank 0 waits for this ack: the ring's line at pos holds
				// only what the big message left there.
				for range 100 {
					if st, ok, err := ep.Iprobe(p2p.AnySource, p2p.AnyTag); err != nil || ok {
						return fmt.Errorf("a message that was never sent: %+v, %v", st, err)
					}
				}
			}
			if err := ep.Send(ctx, 0, 2, nil); err != nil {
				return err
			}
		}
		_, err := ep.Recv(ctx, 0, 3, nil)
		return err
	})
}

// A PING that announces a ring message to a sleeper may be polled by
// another goroutine (the background one, woken by an earlier completion)
// whose look at the rings came before the message: that poll must handle
// the message, or the sleeper, its wake-up gone from the CQ, sleeps on
// with the message in the ring (TestRingPingPong hung so under load,
// about once in 50 runs). Rank 0 plays both: a counted sleeper, and a
// poll that scans the rings, lets rank 1 send, then takes the PING.
func TestRingPingStaleScan(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
	send, sent := make(chan struct{}), make(chan error, 1)
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 1 {
			select {
			case <-send:
			case <-ctx.Done():
				return ctx.Err()
			}
			sent <- ep.Send(ctx, 0, 5, []byte("after the scan"))
			return nil
		}
		buf := make([]byte, 32)
		r, err := ep.Irecv(1, 5, buf)
		require.NoError(t, err)
		withdraw := ep.AnnounceSleeper()
		require.NotNil(t, withdraw, "no rings")
		done := false
		var sendErr, waitErr error
		ep.StalePoll(func(cq verbs.CQ) {
			close(send)
			if sendErr = <-sent; sendErr == nil {
				wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				waitErr = cq.Wait(wctx) // the PING is there
				cancel()
			}
		}, func() { done = r.Done() })
		withdraw()
		require.NoError(t, sendErr)
		require.NoError(t, waitErr)
		assert.True(t, done, "the poll that took the PING left its ring message unhandled")
		st, err := r.Wait(ctx)
		require.NoError(t, err)
		assert.Equal(t, "after the scan", string(buf[:st.Count]))
		return nil
	})
}

// The ring takes messages of up to 4144 bytes (65 lines), or half its
// lines in a smaller ring: a 4 KiB message, the weak size of the queue
// pair's path, goes through the default ring, 4145 bytes through the
// queue pair; in a 64-line ring 2032 bytes (32 lines) go through the
// ring and 2033 through the queue pair.
func TestRingLargestMessage(t *testing.T) {
	for _, c := range []struct {
		lines         int
		ring, notRing int
	}{{0, 4144, 4145}, {64, 2032, 2033}} {
		t.Run(fmt.Sprint("lines=", c.lines), func(t *testing.T) {
			o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second, P2P: p2p.Options{RingLines: c.lines}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				sizes := []int{c.ring, c.notRing}
				if ep.Rank() == 0 {
					for i, n := range sizes {
						if err := ep.Send(ctx, 1, 1, pattern(n, byte(i))); err != nil {
							return err
						}
						if _, err := ep.Recv(ctx, 1, 2, nil); err != nil {
							return err
						}
						if got, want := ep.Stats().Peers[1].RingSent.Msgs, uint64(1); got != want {
							return fmt.Errorf("after %d bytes: %d messages through the ring, want %d", n, got, want)
						}
					}
					return nil
				}
				buf := make([]byte, 8192)
				for i, n := range sizes {
					st, err := ep.Recv(ctx, 0, 1, buf)
					if err != nil {
						return err
					}
					if !bytes.Equal(buf[:st.Count], pattern(n, byte(i))) {
						return fmt.Errorf("message %d: got %d bytes (or other data), want %d", i, st.Count, n)
					}
					if err := ep.Send(ctx, 0, 2, nil); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// A sender writes its ring message after it has let go of the endpoint's
// lock, so other goroutines may send to the same peer while messages are
// still in writing. A frame through the queue pair must not promise the
// receiver ring messages that are not written yet (its mark: "queue
// pair"), and a ring claim must not reuse the slot of one in writing
// ("slots"): both wait. Rank 0 holds claims of tag 5 unwritten, then sends
// the next message from another goroutine: 3000 bytes (the queue pair,
// tag 6) after one claim, or a 17th small one of tag 5 after 16. It may
// not reach rank 1 before the held messages are written, and tag 5
// arrives in claim order.
func TestRingClaimInWriting(t *testing.T) {
	for _, tc := range []struct {
		name      string
		held, tag int
		size      int
	}{
		{"queue pair", 1, 6, 3000},
		{"slots", 16, 5, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
			early := make(chan struct{}, 1) // rank 1 received the last message before the writes
			var written atomic.Bool
			last := binary.LittleEndian.AppendUint64(make([]byte, 0, tc.size), uint64(tc.held))[:tc.size]
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 1 {
					buf := make([]byte, tc.size)
					n := tc.held
					if tc.tag == 5 {
						n++
					} else if _, err := ep.Recv(ctx, 0, tc.tag, buf); err != nil {
						return fmt.Errorf("the queue pair's message: %w", err)
					} else if !written.Load() {
						early <- struct{}{}
					}
					for i := range n {
						st, err := ep.Recv(ctx, 0, 5, buf)
						if err != nil {
							return fmt.Errorf("tag 5's message %d: %w", i, err)
						}
						if i == tc.held && !written.Load() {
							early <- struct{}{}
						}
						if got := binary.LittleEndian.Uint64(buf[:st.Count]); got != uint64(i) {
							return fmt.Errorf("tag 5's message %d carries %d", i, got)
						}
					}
					return nil
				}
				var writes []func()
				for i := range tc.held {
					w, ok := ep.ClaimRing(1, 5, binary.LittleEndian.AppendUint64(nil, uint64(i)))
					require.True(t, ok, "claim %d", i)
					writes = append(writes, w)
				}
				sent := make(chan error, 1)
				go func() { sent <- ep.Send(ctx, 1, tc.tag, last) }()
				var failed error
				select {
				case <-early:
					failed = errors.New("the last message reached rank 1 before the messages claimed before it were written")
				case err := <-sent:
					failed = fmt.Errorf("the last send returned (%v) while the ring held claims in writing", err)
					sent <- err
				case <-time.After(200 * time.Millisecond):
				}
				written.Store(true)
				// Written whatever happened (Close waits for claims in
				// writing), one goroutine each, as senders write: a writer
				// that finds rank 1 asleep takes the lock for a PING after
				// its write, which a wait for the next write could hold.
				for _, w := range writes {
					go w()
				}
				if err := <-sent; failed == nil {
					failed = err
				}
				return failed
			})
		})
	}
}

// A ring send prefetches the next message's line only in a burst: from the
// third message in a row with nothing read from the peer in between (a
// window of Isends). A ping-pong, whose receiver polls that line next,
// never counts as one, nor does a message sent in two parts.
func TestRingBurstOnlyInWindows(t *testing.T) {
	o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second}
	const window, rounds = 5, 4
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		buf := make([]byte, 8)
		if ep.Rank() == 1 {
			// Nothing reaches rank 0 while it sends its window.
			for i := range window + rounds {
				if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
					return err
				}
				if i < window-1 {
					continue
				}
				n := 1
				if i == window-1 {
					n = window
				}
				for range n {
					if err := ep.Send(ctx, 0, 2, buf); err != nil {
						return err
					}
				}
			}
			return nil
		}
		var got []bool
		send := func() error {
			if err := ep.Send(ctx, 1, 1, buf); err != nil {
				return err
			}
			got = append(got, ep.RingBurst(1))
			return nil
		}
		for range window { // a window
			if err := send(); err != nil {
				return err
			}
		}
		for range window {
			if _, err := ep.Recv(ctx, 1, 2, buf); err != nil {
				return err
			}
		}
		for range rounds { // a ping-pong
			if err := send(); err != nil {
				return err
			}
			if _, err := ep.Recv(ctx, 1, 2, buf); err != nil {
				return err
			}
		}
		want := []bool{false, false, true, true, true, false, false, false, false}
		if !slices.Equal(got, want) {
			return fmt.Errorf("bursts by send: got %v, want %v", got, want)
		}
		return nil
	})
}

// Options.RingAhead reaches every ring: the default, the next message only
// (negative), an explicit depth; one beyond the largest fails New with an
// error that names it.
func TestRingAheadOption(t *testing.T) {
	for _, c := range []struct{ set, want int }{{0, 3}, {-1, 1}, {5, 5}} {
		o := p2ptest.Options{Provider: "shm", Timeout: 30 * time.Second, P2P: p2p.Options{RingAhead: c.set}}
		p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
			if got := ep.RingAhead(1 - ep.Rank()); got != c.want {
				return fmt.Errorf("RingAhead %d: the ring to rank %d prefetches %d ahead, want %d", c.set, 1-ep.Rank(), got, c.want)
			}
			return nil
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm", P2P: p2p.Options{RingAhead: 17}})
	require.ErrorIs(t, err, p2p.ErrInvalidArgument)
	require.ErrorContains(t, err, "RingAhead 17")
}
