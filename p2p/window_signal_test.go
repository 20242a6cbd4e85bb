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
)

// TestWindowSignals: a signal-carrying write is counted on its window,
// per source and index, and never taken for an endpoint notification (nor
// the other way round), its data in place when WaitSignal returns; a
// window over a group of ranks is made by its members only, refuses the
// others, and leaves the world windows' numbering alone; the notification
// bit that signals use is refused to WriteNotify.
func TestWindowSignals(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			const n = 3
			p2ptest.Run(t, n, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				me := ep.Rank()
				next, prev := (me+1)%n, (me+n-1)%n
				var g *p2p.Window
				if me != 1 {
					ch, err := ep.Channel(9)
					if err != nil {
						return err
					}
					if g, err = ep.NewGroupWindow(ctx, make([]byte, 32), me == 0, []int{0, 2}, ch, 4); err != nil {
						return err
					}
				}
				w, err := ep.NewWindow(ctx, make([]byte, 4*n))
				if err != nil {
					return err
				}
				if _, err := w.Iwrite(next, 0, nil, true, 1<<30|5); !errors.Is(err, p2p.ErrInvalidArgument) {
					return fmt.Errorf("a notification with bit 30: %v", err)
				}
				// An endpoint notification, then two signals of index 3 and
				// one of index 4, to the next rank.
				if err := w.WriteNotify(ctx, next, 0, []byte{1}, 77); err != nil {
					return err
				}
				for i, sig := range []int{3, 3, 4} {
					r, err := w.IwriteSignal(next, 4*me+i, []byte{byte(10*me + i)}, sig)
					if err != nil {
						return err
					}
					if _, err := r.Wait(ctx); err != nil {
						return err
					}
				}
				if err := w.WaitSignal(ctx, prev, 3, 2); err != nil {
					return err
				}
				if err := w.WaitSignal(ctx, prev, 4, 1); err != nil {
					return err
				}
				if got := w.Bytes()[4*prev : 4*prev+3]; !bytes.Equal(got, []byte{byte(10 * prev), byte(10*prev + 1), byte(10*prev + 2)}) {
					return fmt.Errorf("after the signals, rank %d's slot holds %v", prev, got)
				}
				nt, err := ep.WaitNotify(ctx, prev)
				if err != nil || nt.Value != 77 {
					return fmt.Errorf("endpoint notification: %+v, %v", nt, err)
				}
				if ok, err := w.TestSignal(prev, 3, 1); ok || err != nil {
					return fmt.Errorf("a third signal 3 was taken (%v, %v)", ok, err)
				}
				short, cancel := context.WithTimeout(ctx, 0)
				err = w.WaitSignal(short, prev, 4, 1)
				cancel()
				var de *p2p.DeadlineError
				if !errors.As(err, &de) || len(de.Ranks) != 1 || de.Ranks[0] != prev {
					return fmt.Errorf("WaitSignal past its deadline: %v", err)
				}
				if g != nil {
					other := 2 - me
					if err := g.Write(ctx, 1, 0, []byte{1}); !errors.Is(err, p2p.ErrInvalidRank) {
						return fmt.Errorf("a write to rank 1, not in the group: %v", err)
					}
					if _, err := g.Iread(1, 0, make([]byte, 1)); !errors.Is(err, p2p.ErrInvalidRank) {
						return fmt.Errorf("a read from rank 1, not in the group: %v", err)
					}
					r, err := g.IwriteSignal(other, 8, []byte("group"), 0)
					if err != nil {
						return err
					}
					if _, err := r.Wait(ctx); err != nil {
						return err
					}
					if err := g.WaitSignal(ctx, other, 0, 1); err != nil {
						return err
					}
					if string(g.Bytes()[8:13]) != "group" {
						return fmt.Errorf("group window holds %q", g.Bytes()[8:13])
					}
					if ok, _ := w.TestSignal(other, 0, 1); ok {
						return fmt.Errorf("the group window's signal was counted on the world window")
					}
				}
				if err := barrier(ctx, ep); err != nil {
					return err
				}
				// A second world window after the group one: the numbering
				// still agrees on every rank.
				w2, err := ep.NewWindow(ctx, make([]byte, 8))
				if err != nil {
					return err
				}
				if err := w2.Close(ctx); err != nil {
					return err
				}
				if g != nil {
					if err := g.Close(ctx); err != nil {
						return err
					}
				}
				return w.Close(ctx)
			})
		})
	}
}

// TestWindowAtomics: fetch-and-add and compare-and-swap from every other
// rank on words of rank 0's window are atomic (the sum is exact, one swap
// wins); a word past the end or misaligned is refused naming the offset;
// memory the provider cannot run atomics on is refused with
// verbs.ErrUnsupported (capability, not provider name).
func TestWindowAtomics(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			const n, rounds = 3, 50
			p2ptest.Run(t, n, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				me := ep.Rank()
				w, err := ep.AllocWindow(ctx, 64)
				if err != nil {
					return err
				}
				user, err := ep.NewWindow(ctx, make([]byte, 64))
				if err != nil {
					return err
				}
				if me != 0 {
					if err := w.AtomicsTo(0); err != nil {
						return fmt.Errorf("atomics on provider memory: %v", err)
					}
					for range rounds {
						if _, err := w.FetchAdd(ctx, 0, 8, uint64(me)); err != nil {
							return err
						}
					}
					if _, err := w.CompareSwap(ctx, 0, 16, 0, uint64(me)); err != nil {
						return err
					}
					if _, err := w.FetchAdd(ctx, 0, 60, 1); !errors.Is(err, p2p.ErrInvalidArgument) {
						return fmt.Errorf("atomic past the end: %v", err)
					}
					if _, err := w.FetchAdd(ctx, 0, 4, 1); !errors.Is(err, p2p.ErrInvalidArgument) {
						return fmt.Errorf("misaligned atomic: %v", err)
					}
					_, err := user.FetchAdd(ctx, 0, 0, 1)
					if e := user.AtomicsTo(0); e != nil && !errors.Is(err, verbs.ErrUnsupported) {
						return fmt.Errorf("atomics refused (%v) but FetchAdd says %v", e, err)
					}
				}
				if err := barrier(ctx, ep); err != nil {
					return err
				}
				if me == 0 {
					word := func(off int) uint64 {
						var v uint64
						for i := range 8 {
							v |= uint64(w.Bytes()[off+i]) << (8 * i)
						}
						return v
					}
					if want := uint64(rounds * (1 + 2)); word(8) != want {
						return fmt.Errorf("sum of fetch-and-adds: %d, want %d", word(8), want)
					}
					if v := word(16); v != 1 && v != 2 {
						return fmt.Errorf("compare-and-swap left %d", v)
					}
				}
				if err := user.Close(ctx); err != nil {
					return err
				}
				return w.Close(ctx)
			})
		})
	}
}

// TestWindowProviderBounds: an access past the window's end that gets past
// p2p's own check (a forged length) is refused by the provider, as a NIC
// refuses it for the rkey, and the memory after the window is untouched.
func TestWindowProviderBounds(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			mem := make([]byte, 128)
			for i := 64; i < 128; i++ {
				mem[i] = 0xAA
			}
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				me := ep.Rank()
				buf := make([]byte, 64)
				if me == 1 {
					buf = mem[:64:64]
				}
				w, err := ep.NewWindow(ctx, buf)
				if err != nil {
					return err
				}
				if me == 1 {
					// Rank 0 writes once this rank has its window.
					if err := ep.Send(ctx, 0, 2, nil); err != nil {
						return err
					}
					// The link fails once the provider refuses rank 0's write.
					_, err := ep.Recv(ctx, 0, 1, nil)
					if err == nil {
						return fmt.Errorf("rank 0's forged write did not break the link")
					}
					return nil
				}
				if _, err := ep.Recv(ctx, 1, 2, nil); err != nil {
					return err
				}
				w.ForgeLen(1, 128)
				err = w.Write(ctx, 1, 60, bytes.Repeat([]byte{0x55}, 16))
				if err == nil {
					return fmt.Errorf("a write past the window was accepted")
				}
				return nil
			})
			for i := 64; i < 128; i++ {
				if mem[i] != 0xAA {
					t.Fatalf("byte %d after the window was written: %#x", i, mem[i])
				}
			}
		})
	}
}

// TestWindowSignalBurst: more signal-carrying writes than the receiver has
// receive buffers posted, waited for in one WaitSignal, all arrive: the
// receiver returns the buffers' credits while it only waits for signals.
func TestWindowSignalBurst(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			const burst = 1000
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov, Timeout: 20 * time.Second}, func(ctx context.Context, ep *p2p.Endpoint) error {
				w, err := ep.NewWindow(ctx, make([]byte, 8))
				if err != nil {
					return err
				}
				if ep.Rank() == 1 {
					if err := w.WaitSignal(ctx, 0, 1, burst); err != nil {
						return err
					}
				} else {
					reqs := make([]*p2p.Request, 0, burst)
					for range burst {
						r, err := w.IwriteSignal(1, 0, []byte{1}, 1)
						if err != nil {
							return err
						}
						reqs = append(reqs, r)
					}
					if err := p2p.WaitAll(ctx, reqs...); err != nil {
						return err
					}
				}
				return w.Close(ctx)
			})
		})
	}
}

// TestWindowSignalCreditAck: a CREDIT frame that arrives while nothing is
// queued must still be acknowledged when only notifying writes follow.
// The sender first writes fewer signals than it has credits, enough for
// the receiver to return them in a CREDIT frame, which finds the sender's
// queue empty; the receiver's answering signal (a write, no frame) tells
// the sender the CREDIT has arrived. Then the sender writes more signals
// than it has credits. Writes carry no header, so unless the
// acknowledgement goes before they take the last credit the receiver may
// not send its next CREDIT and both wait for ever. Heartbeats, which would
// carry the acknowledgement on an idle link, are kept out of the way.
// Each rank takes the sender's part in turn.
func TestWindowSignalCreditAck(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			const slots, first, burst = 16, 10, 200
			// No rings: over shm a small message to a sleeping peer could wait
			// for the next heartbeat. One cause is fixed (a goroutine that
			// blocked before the rings existed; TestRingWakesEarlySleeper), but
			// with rings this test still stalled in NewWindow once in about
			// 16000 runs after that fix, a separate problem it must not hit.
			opts := p2p.Options{EagerSlots: slots, Heartbeat: time.Minute, LivenessTimeout: 4 * time.Minute, RingLines: -1}
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov, P2P: opts, Timeout: 10 * time.Second}, func(ctx context.Context, ep *p2p.Endpoint) error {
				me, peer := ep.Rank(), 1-ep.Rank()
				w, err := ep.NewWindow(ctx, make([]byte, 8))
				if err != nil {
					return err
				}
				signal := func(sig, n int) error {
					reqs := make([]*p2p.Request, 0, n)
					for range n {
						r, err := w.IwriteSignal(peer, me, []byte{byte(sig)}, sig)
						if err != nil {
							return err
						}
						reqs = append(reqs, r)
					}
					wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					if err := p2p.WaitAll(wctx, reqs...); err != nil {
						return fmt.Errorf("rank %d sending %d signals %d to rank %d: %w", me, n, sig, peer, err)
					}
					return nil
				}
				wait := func(sig, n int) error {
					wctx, cancel := context.WithTimeout(ctx, 3*time.Second)
					defer cancel()
					if err := w.WaitSignal(wctx, peer, sig, n); err != nil {
						return fmt.Errorf("rank %d waiting for %d signals %d from rank %d: %w", me, n, sig, peer, err)
					}
					return nil
				}
				for sender := range 2 {
					base := 3 * sender
					steps := []func() error{
						func() error { return signal(base+1, first) },
						func() error { return wait(base+2, 1) },
						func() error { return signal(base+3, burst) },
					}
					if me != sender {
						steps = []func() error{
							func() error { return wait(base+1, first) },
							func() error { return signal(base+2, 1) },
							func() error { return wait(base+3, burst) },
						}
					}
					for _, step := range steps {
						if err := step(); err != nil {
							return err
						}
					}
				}
				return w.Close(ctx)
			})
		})
	}
}
