package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestRendezvousServed: over a provider whose queue pairs report a READ
// response written (verbs.Caps.ReadServed: loop, tcp) a rendezvous send
// completes on that report and its receiver sends no FIN; over shm the FIN
// completes it as before. Either way the sender may overwrite its buffer
// as soon as the send completes: messages read whole (3 MiB) and in one
// READ, alone and in a window of Isends, arrive intact; a truncated one
// and a canceled one still end the sender's request.
func TestRendezvousServed(t *testing.T) {
	sizes := []int{2000, 100_000, 3 << 20}
	const window, winSize = 8, 50_000
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			served := prov != "shm"
			fins := p2p.FINOKSent()
			o := p2ptest.Options{Provider: prov, Timeout: 60 * time.Second,
				P2P: p2p.Options{EagerLimit: 1024, PipelineLimit: -1}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 0 {
					for i, n := range sizes {
						buf := pattern(n, byte(i))
						if err := ep.Send(ctx, 1, i, buf); err != nil {
							return err
						}
						clear(buf) // free once the send is complete
					}
					bufs := make([][]byte, window)
					reqs := make([]*p2p.Request, window)
					for i := range reqs {
						bufs[i] = pattern(winSize, byte(10+i))
						var err error
						if reqs[i], err = ep.Isend(1, 10+i, bufs[i]); err != nil {
							return err
						}
					}
					if err := p2p.WaitAll(ctx, reqs...); err != nil {
						return err
					}
					for _, b := range bufs {
						clear(b)
					}
					// Truncated at the receiver: the send still completes.
					if err := ep.Send(ctx, 1, 30, pattern(5000, 3)); err != nil {
						return fmt.Errorf("truncated rendezvous, sender: %w", err)
					}
					// Canceled before any receive matches it.
					r, err := ep.Isend(1, 31, pattern(5000, 4))
					if err != nil {
						return err
					}
					r.Cancel()
					if _, err := r.Wait(ctx); !errors.Is(err, p2p.ErrCanceled) {
						return fmt.Errorf("canceled rendezvous: %v, want ErrCanceled", err)
					}
					if _, err := ep.Recv(ctx, 1, 0, nil); err != nil { // the receiver has checked everything
						return err
					}
					ps := ep.Stats().Peers[1]
					read := uint64(len(sizes) + window)
					assert.Equal(t, read+1, ps.RndvSent.Msgs, "rendezvous sends (the truncated one too)")
					if served {
						assert.Equal(t, read, ps.RndvServed.Msgs, "completed on the provider's report")
					} else {
						assert.Zero(t, ps.RndvServed.Msgs, "completed on FIN")
					}
					return nil
				}
				for i, n := range sizes {
					buf := make([]byte, n)
					if _, err := ep.Recv(ctx, 0, i, buf); err != nil {
						return err
					}
					if !bytes.Equal(buf, pattern(n, byte(i))) {
						return fmt.Errorf("message %d (%d bytes): payload differs", i, n)
					}
				}
				for i := range window {
					buf := make([]byte, winSize)
					if _, err := ep.Recv(ctx, 0, 10+i, buf); err != nil {
						return err
					}
					if !bytes.Equal(buf, pattern(winSize, byte(10+i))) {
						return fmt.Errorf("window message %d: payload differs", i)
					}
				}
				if _, err := ep.Recv(ctx, 0, 30, make([]byte, 2000)); !errors.Is(err, p2p.ErrTruncated) {
					return fmt.Errorf("truncated rendezvous, receiver: %v, want ErrTruncated", err)
				}
				return ep.Send(ctx, 0, 0, nil)
			})
			want := int64(0)
			if !served {
				want = int64(len(sizes) + window)
			}
			assert.Equal(t, want, p2p.FINOKSent()-fins, "FINs for rendezvous read")
		})
	}
}

// TestRendezvousServedThenClose: a sender whose rendezvous sends completed
// on the provider's report (before the receiver has read the data) and
// that closes its endpoint at once still delivers them whole.
func TestRendezvousServedThenClose(t *testing.T) {
	const n, k = 3 << 20, 3
	for _, prov := range []string{"loop", "tcp"} {
		t.Run(prov, func(t *testing.T) {
			o := p2ptest.Options{Provider: prov, Timeout: 60 * time.Second}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 0 {
					for i := range k {
						buf := pattern(n, byte(i))
						if err := ep.Send(ctx, 1, i, buf); err != nil {
							return err
						}
						clear(buf)
					}
					if served := ep.Stats().Peers[1].RndvServed.Msgs; served != k {
						return fmt.Errorf("%d of %d sends completed on the provider's report", served, k)
					}
					return ep.Close()
				}
				buf := make([]byte, n)
				for i := range k {
					if _, err := ep.Recv(ctx, 0, i, buf); err != nil {
						return err
					}
					if !bytes.Equal(buf, pattern(n, byte(i))) {
						return fmt.Errorf("message %d: payload differs", i)
					}
				}
				return nil
			})
		})
	}
}
