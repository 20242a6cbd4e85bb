package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/comm"
)

// TestWin: Puts from every rank into every window (sizes differ per rank)
// are visible everywhere after Fence; Gets read a peer's window after
// Flush; accesses outside a window fail naming the target, offset and
// size without touching it.
func TestWin(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 3, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				p, me := c.Size(), c.Rank()
				local := make([]float64, 2*p+me+1) // rank r: 2p+r+1 elements, the last never written
				w, err := comm.NewWin(ctx, c, local)
				if err != nil {
					return err
				}
				for r := range p {
					if w.Len(r) != 2*p+r+1 {
						return fmt.Errorf("Len(%d) = %d, want %d", r, w.Len(r), 2*p+r+1)
					}
				}
				mine := []float64{float64(me) + 0.5, float64(me * 10)}
				for r := range p {
					if err := w.Put(r, 2*me, mine); err != nil {
						return err
					}
				}
				if err := w.Fence(ctx); err != nil {
					return err
				}
				for r := range p {
					if local[2*r] != float64(r)+0.5 || local[2*r+1] != float64(r*10) {
						return fmt.Errorf("after Fence, slot of rank %d holds %v", r, local[2*r:2*r+2])
					}
				}
				// Get the whole window of the next rank.
				next := (me + 1) % p
				got := make([]float64, w.Len(next))
				if err := w.Get(next, 0, got); err != nil {
					return err
				}
				if err := w.Flush(ctx); err != nil {
					return err
				}
				for r := range p {
					if got[2*r] != float64(r)+0.5 {
						return fmt.Errorf("Get of rank %d's window: slot %d holds %v", next, r, got[2*r])
					}
				}
				// Out of bounds, both ways: an error naming it, nothing written.
				size := w.Len(next)
				err = w.Put(next, size-1, []float64{1, 2})
				if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("2 elements at offset %d overrun rank %d's window of %d elements", size-1, next, size)) {
					return fmt.Errorf("Put past the end: %v", err)
				}
				var oe *comm.OpError
				if !errors.As(err, &oe) || oe.Peer != next || oe.Op != "Put" {
					return fmt.Errorf("Put past the end does not name the target: %v", err)
				}
				if err := w.Get(next, -1, got[:1]); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("Get at offset -1: %v", err)
				}
				if err := w.Put(p, 0, mine); !errors.Is(err, comm.ErrInvalidRank) {
					return fmt.Errorf("Put to rank %d: %v", p, err)
				}
				if err := w.Fence(ctx); err != nil {
					return err
				}
				if local[len(local)-1] != 0 {
					return fmt.Errorf("the last element was written: %v", local[len(local)-1])
				}
				if err := w.Close(ctx); err != nil {
					return err
				}
				return comm.Barrier(ctx, c)
			})
		})
	}
}

// Over shm, Put into a window that AllocWin made, and Flush, allocate
// nothing: the Put is a copy into the peer's mapped memory, its request
// is recycled by Flush and Flush keeps its slice. (Formatting an unused
// error text, a new request per Put and a new slice per Flush did.)
func TestPutFlushAllocs(t *testing.T) {
	if raceOn {
		t.Skip("the race detector allocates on its own")
	}
	runOK(t, 2, comm.Options{Transport: "shm"}, func(ctx context.Context, c *comm.Comm) error {
		w, err := comm.AllocWin[float64](ctx, c, 8)
		if err != nil {
			return err
		}
		if c.Rank() == 0 {
			src := []float64{1, 2}
			put := func() {
				if err := w.Put(1, 2, src); err != nil {
					t.Error(err)
				}
				if err := w.Flush(ctx); err != nil {
					t.Error(err)
				}
			}
			put()
			if n := testing.AllocsPerRun(100, put); n != 0 {
				t.Errorf("Put and Flush allocate %v times per call", n)
			}
		}
		return w.Fence(ctx)
	})
}
