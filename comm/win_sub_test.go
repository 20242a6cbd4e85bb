package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/comm"
)

// TestWinSubComm: windows on a Split communicator whose rank order is the
// reverse of the world's, and on a CreateGroup communicator, address the
// communicator's ranks (a Put to rank r lands in the window of that
// communicator's rank r, its world rank recorded), fence within the
// communicator while the other half fences its own, and name the
// communicator's rank in bounds errors; atomics address its ranks too. A Dup'ed communicator's window and
// the world's, alive at once over the same ranks, keep their fences apart.
func TestWinSubComm(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 4, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				me := c.Rank()
				half, err := c.Split(ctx, me%2, -me) // reversed order
				if err != nil {
					return err
				}
				defer half.Close()
				grp, err := c.CreateGroup(ctx, []int{3, 2, 1, 0})
				if err != nil {
					return err
				}
				defer grp.Close()
				for _, sub := range []*comm.Comm{half, grp} {
					p, r := sub.Size(), sub.Rank()
					local := make([]int64, p+1)
					w, err := comm.NewWin(ctx, sub, local)
					if err != nil {
						return err
					}
					for t := range p {
						if err := w.Put(t, r, []int64{int64(100*t + me)}); err != nil {
							return err
						}
					}
					if err := w.Fence(ctx); err != nil {
						return err
					}
					for o := range p {
						if want := int64(100*r + sub.WorldRank(o)); local[o] != want {
							return fmt.Errorf("communicator of %d: slot %d holds %d, want %d (world rank of %d: %d)", p, o, local[o], want, o, sub.WorldRank(o))
						}
					}
					got := make([]int64, 1)
					last := p - 1
					if err := w.Get(last, 0, got); err != nil {
						return err
					}
					if err := w.Flush(ctx); err != nil {
						return err
					}
					if got[0] != int64(100*last+sub.WorldRank(0)) {
						return fmt.Errorf("Get from rank %d: %d", last, got[0])
					}
					err = w.Put(last, p, []int64{1, 2})
					if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("at offset %d overrun rank %d's window of %d elements", p, last, p+1)) {
						return fmt.Errorf("Put past the end on a communicator of %d: %v", p, err)
					}
					if err := w.Put(p, 0, got); !errors.Is(err, comm.ErrInvalidRank) {
						return fmt.Errorf("Put to rank %d of a communicator of %d: %v", p, p, err)
					}
					if err := w.Close(ctx); err != nil {
						return err
					}
					if local[p] != 0 {
						return fmt.Errorf("the element past the Puts was written: %d", local[p])
					}
					// Atomics address the communicator's ranks too.
					aw, err := comm.AllocWin[int64](ctx, sub, 1)
					if err != nil {
						return err
					}
					if r != 0 {
						if _, err := aw.FetchAdd(ctx, 0, 0, int64(1+me)); err != nil {
							return err
						}
					}
					if err := aw.Fence(ctx); err != nil {
						return err
					}
					if r == 0 {
						var want int64
						for o := 1; o < p; o++ {
							want += int64(1 + sub.WorldRank(o))
						}
						if got := aw.Local()[0]; got != want {
							return fmt.Errorf("communicator of %d: rank 0's word after the fetch-and-adds: %d, want %d", p, got, want)
						}
					}
					if err := aw.Close(ctx); err != nil {
						return err
					}
				}
				// Two communicators over the same ranks, windows alive on both.
				dup, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer dup.Close()
				a, b := make([]int32, c.Size()), make([]int32, c.Size())
				wa, err := comm.NewWin(ctx, c, a)
				if err != nil {
					return err
				}
				wb, err := comm.NewWin(ctx, dup, b)
				if err != nil {
					return err
				}
				for round := int32(1); round <= 3; round++ {
					for t := range c.Size() {
						if err := wa.Put(t, me, []int32{round}); err != nil {
							return err
						}
						if err := wb.Put(t, me, []int32{-round}); err != nil {
							return err
						}
					}
					if err := wa.Fence(ctx); err != nil {
						return err
					}
					if err := wb.Fence(ctx); err != nil {
						return err
					}
					for o := range c.Size() {
						if a[o] != round || b[o] != -round {
							return fmt.Errorf("round %d: from rank %d, %d and %d", round, o, a[o], b[o])
						}
					}
					// Nobody writes the next round before everyone checked.
					if err := wa.Fence(ctx); err != nil {
						return err
					}
				}
				if err := wb.Close(ctx); err != nil {
					return err
				}
				return wa.Close(ctx)
			})
		})
	}
}

// TestWinSignal: PutSignal's data is in the target's window when
// WaitSignal returns, with no Flush or Fence; signals count per source and
// index; another window's signals do not count; a wait that outlasts ctx
// names the rank; bad indexes and counts are refused.
func TestWinSignal(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 3, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				p, me := c.Size(), c.Rank()
				next, prev := (me+1)%p, (me+p-1)%p
				half, err := c.Split(ctx, 0, -me) // all ranks, reversed
				if err != nil {
					return err
				}
				defer half.Close()
				const rounds = 4
				local := make([]float64, rounds*p)
				w, err := comm.NewWin(ctx, half, local)
				if err != nil {
					return err
				}
				other, err := comm.NewWin(ctx, c, make([]float64, 4))
				if err != nil {
					return err
				}
				hn, hp := half.Rank()+1, half.Rank()-1 // neighbours in half's numbering
				hn, hp = (hn+p)%p, (hp+p)%p
				for i := range rounds {
					if err := w.PutSignal(hn, i*p+half.Rank(), []float64{float64(1000*me + i)}, 7); err != nil {
						return err
					}
				}
				// A signal on another window, and on another index.
				if err := other.PutSignal(next, 0, []float64{1}, 7); err != nil {
					return err
				}
				if err := w.WaitSignal(ctx, hp, 7, rounds); err != nil {
					return err
				}
				from := half.WorldRank(hp)
				for i := range rounds {
					if want := float64(1000*from + i); local[i*p+hp] != want {
						return fmt.Errorf("after WaitSignal, round %d holds %v, want %v", i, local[i*p+hp], want)
					}
				}
				if err := other.WaitSignal(ctx, prev, 7, 1); err != nil {
					return err
				}
				if ok, err := w.TestSignal(hp, 7, 1); ok || err != nil {
					return fmt.Errorf("a signal beyond those sent: %v, %v", ok, err)
				}
				short, cancel := context.WithTimeout(ctx, 0)
				err = w.WaitSignal(short, hp, 8, 1)
				cancel()
				var oe *comm.OpError
				if !errors.Is(err, context.DeadlineExceeded) || !errors.As(err, &oe) || oe.Peer != hp {
					return fmt.Errorf("WaitSignal past its deadline: %v", err)
				}
				if err := w.PutSignal(hn, 0, local[:1], comm.MaxSignal+1); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("signal past MaxSignal: %v", err)
				}
				if err := w.WaitSignal(ctx, hp, 1, 0); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("WaitSignal of count 0: %v", err)
				}
				if err := w.Fence(ctx); err != nil {
					return err
				}
				if err := other.Close(ctx); err != nil {
					return err
				}
				return w.Close(ctx)
			})
		})
	}
}

// TestWinAtomics: FetchAdd from every rank onto one word of every window
// sums exactly; CompareSwap elects one winner; windows whose memory the
// provider cannot run atomics on (capability, not name) say so with
// ErrUnsupported and the same calls fail alike; element types and offsets
// that cannot hold a 64-bit word are refused.
func TestWinAtomics(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 3, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				p, me := c.Size(), c.Rank()
				w, err := comm.AllocWin[int64](ctx, c, 4)
				if err != nil {
					return err
				}
				if len(w.Local()) != 4 {
					return fmt.Errorf("AllocWin: %d elements", len(w.Local()))
				}
				const rounds = 20
				added := make([]int64, p) // what this rank added to each rank's word
				for t := range p {
					if err := w.Atomics(t); err != nil {
						if t != me || !errors.Is(err, comm.ErrUnsupported) {
							return fmt.Errorf("atomics on rank %d's provider memory: %v", t, err)
						}
						if _, err := w.FetchAdd(ctx, t, 0, 1); !errors.Is(err, comm.ErrUnsupported) {
							return fmt.Errorf("Atomics refused rank %d, FetchAdd says %v", t, err)
						}
						continue
					}
					for i := range rounds {
						if _, err := w.FetchAdd(ctx, t, 0, int64(me+1)); err != nil {
							return err
						}
						added[t] += int64(me + 1)
						_ = i
					}
					if _, err := w.CompareSwap(ctx, t, 1, 0, int64(me+1)); err != nil {
						return err
					}
				}
				if _, err := w.FetchAdd(ctx, next(me, p), 4, 1); !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "at offset 4") {
					return fmt.Errorf("FetchAdd past the end: %v", err)
				}
				all := make([]int64, p*p)
				copy(all[me*p:], added)
				if err := comm.Allreduce(ctx, c, all, comm.Sum); err != nil {
					return err
				}
				if err := w.Fence(ctx); err != nil {
					return err
				}
				var want int64
				for o := range p {
					want += all[o*p+me]
				}
				if got := w.Local()[0]; got != want {
					return fmt.Errorf("rank %d's word after the fetch-and-adds: %d, want %d", me, got, want)
				}
				if v := w.Local()[1]; want > 0 && (v < 1 || v > int64(p)) {
					return fmt.Errorf("compare-and-swap left %d", v)
				}
				// The winner of the swap cannot swap again; others see it.
				if want > 0 && me != 0 {
					prev, err := w.CompareSwap(ctx, 0, 1, 0, 99)
					if err == nil && prev == 0 {
						return fmt.Errorf("a second swap from 0 succeeded")
					}
					if err != nil && !errors.Is(err, comm.ErrUnsupported) {
						return err
					}
				}
				// A caller's slice: atomics only where the provider allows
				// them on registered memory; refusal and calls agree.
				user, err := comm.NewWin(ctx, c, make([]uint64, 2))
				if err != nil {
					return err
				}
				t := next(me, p)
				_, ferr := user.FetchAdd(ctx, t, 0, 1)
				if aerr := user.Atomics(t); (aerr == nil) != (ferr == nil) || aerr != nil && !errors.Is(ferr, comm.ErrUnsupported) {
					return fmt.Errorf("Atomics(%d) = %v but FetchAdd: %v", t, aerr, ferr)
				}
				fw, err := comm.NewWin(ctx, c, make([]float64, 2))
				if err != nil {
					return err
				}
				if _, err := fw.FetchAdd(ctx, t, 0, 1.5); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("FetchAdd on float64: %v", err)
				}
				iw, err := comm.NewWin(ctx, c, make([]int32, 2))
				if err != nil {
					return err
				}
				if _, err := iw.CompareSwap(ctx, t, 0, 0, 1); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("CompareSwap on int32: %v", err)
				}
				for _, cl := range []func(context.Context) error{iw.Close, fw.Close, user.Close, w.Close} {
					if err := cl(ctx); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

func next(me, p int) int { return (me + 1) % p }
