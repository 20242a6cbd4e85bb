package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestWindowRead: every rank reads a block of every window, its own
// included, from provider memory and from a Go buffer, into a Go buffer
// and into its own window, at once; a read past the end of a window fails
// naming the peer, the offset and the window's size, and the link stays
// usable.
func TestWindowRead(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			const n, block = 3, 70000
			p2ptest.Run(t, n, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				me := ep.Rank()
				var w *p2p.Window
				var err error
				if me%2 == 0 {
					w, err = ep.AllocWindow(ctx, (n+1)*block)
				} else {
					w, err = ep.NewWindow(ctx, make([]byte, (n+1)*block))
				}
				if err != nil {
					return err
				}
				copy(w.Bytes()[:block], pattern(block, byte(10+me)))
				if err := barrier(ctx, ep); err != nil {
					return err
				}
				bufs := make([][]byte, n)
				var reqs []*p2p.Request
				for r := range n {
					bufs[r] = make([]byte, block-r)
					rq, err := w.Iread(r, r, bufs[r])
					if err != nil {
						return err
					}
					reqs = append(reqs, rq)
				}
				// Into this rank's own window, from the next rank's.
				next := (me + 1) % n
				rq, err := w.Iread(next, 0, w.Bytes()[block:2*block])
				if err != nil {
					return err
				}
				reqs = append(reqs, rq)
				if err := p2p.WaitAll(ctx, reqs...); err != nil {
					return err
				}
				for r := range n {
					if want := pattern(block, byte(10+r))[r:]; !bytes.Equal(bufs[r], want) {
						return fmt.Errorf("read of rank %d's window differs", r)
					}
				}
				if !bytes.Equal(w.Bytes()[block:2*block], pattern(block, byte(10+next))) {
					return fmt.Errorf("read into the window of rank %d's differs", next)
				}
				_, err = w.Iread(next, (n+1)*block-3, make([]byte, 4))
				if !errors.Is(err, p2p.ErrInvalidArgument) || !strings.Contains(err.Error(), fmt.Sprintf("reading 4 bytes at offset %d overruns rank %d's %d-byte window", (n+1)*block-3, next, (n+1)*block)) {
					return fmt.Errorf("a read past the end: %v", err)
				}
				if _, err := w.Iread(-1, 0, nil); !errors.Is(err, p2p.ErrInvalidRank) {
					return fmt.Errorf("a read from rank -1: %v", err)
				}
				if err := barrier(ctx, ep); err != nil {
					return err
				}
				return w.Close(ctx)
			})
		})
	}
}

// barrier: every rank sends an empty message to every other and receives
// theirs.
func barrier(ctx context.Context, ep *p2p.Endpoint) error {
	var reqs []*p2p.Request
	for r := range ep.Size() {
		if r == ep.Rank() {
			continue
		}
		rr, err := ep.Irecv(r, 1<<20, nil)
		if err != nil {
			return err
		}
		sr, err := ep.Isend(r, 1<<20, nil)
		if err != nil {
			return err
		}
		reqs = append(reqs, rr, sr)
	}
	return p2p.WaitAll(ctx, reqs...)
}
