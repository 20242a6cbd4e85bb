package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// waitUntil polls cond until it holds; it fails naming what when ctx ends
// first. For the ranks' goroutines, which return errors rather than call
// t.FailNow.
func waitUntil(ctx context.Context, what string, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(time.Millisecond):
		}
	}
	return nil
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestPingPong(t *testing.T) {
	for _, size := range []int{0, 1, 8, 1000, 32 << 10, 32<<10 + 1, 1 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			p2ptest.Run(t, 2, p2ptest.Options{}, func(ctx context.Context, ep *p2p.Endpoint) error {
				peer := 1 - ep.Rank()
				buf := make([]byte, size)
				for i := range 5 {
					if ep.Rank() == 0 {
						if err := ep.Send(ctx, peer, i, pattern(size, byte(i))); err != nil {
							return err
						}
						st, err := ep.Recv(ctx, peer, i, buf)
						if err != nil {
							return err
						}
						if st.Count != size || st.Source != peer || st.Tag != i {
							return fmt.Errorf("status %+v", st)
						}
					} else {
						st, err := ep.Recv(ctx, peer, i, buf)
						if err != nil {
							return err
						}
						if st.Count != size || !bytes.Equal(buf, pattern(size, byte(i))) {
							return fmt.Errorf("round %d: bad payload (status %+v)", i, st)
						}
						if err := ep.Send(ctx, peer, i, buf); err != nil {
							return err
						}
					}
				}
				return nil
			})
		})
	}
}

func TestBadInput(t *testing.T) {
	p2ptest.Run(t, 2, p2ptest.Options{}, func(ctx context.Context, ep *p2p.Endpoint) error {
		err := ep.Send(ctx, 2, 0, nil)
		require.ErrorIs(t, err, p2p.ErrInvalidRank)
		require.ErrorContains(t, err, "rank 2 is not in [0, 2)")
		_, err = ep.Isend(-1, 0, nil)
		require.ErrorIs(t, err, p2p.ErrInvalidRank)
		_, err = ep.Isend(1-ep.Rank(), -3, nil)
		require.ErrorIs(t, err, p2p.ErrInvalidTag)
		_, err = ep.Isend(1-ep.Rank(), p2p.AnyTag, nil)
		require.ErrorIs(t, err, p2p.ErrInvalidTag)
		_, err = ep.Irecv(5, 0, nil)
		require.ErrorIs(t, err, p2p.ErrInvalidRank)
		_, err = ep.Irecv(p2p.AnySource, -5, nil)
		require.ErrorIs(t, err, p2p.ErrInvalidTag)
		_, err = ep.Channel(p2p.FirstReservedContext)
		require.ErrorIs(t, err, p2p.ErrInvalidArgument)
		var pe *p2p.Error
		require.ErrorAs(t, err, &pe)
		return nil
	})
}

// WaitPassive does not poll: the request completes through the endpoint's
// background goroutine, or through another goroutine's blocking call. A
// ctx that ends cancels an unmatched receive, as Wait does.
func TestWaitPassive(t *testing.T) {
	for _, prov := range []string{"loop", "shm"} {
		t.Run(prov, func(t *testing.T) {
			p2ptest.Run(t, 2, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				peer := 1 - ep.Rank()
				if ep.Rank() == 1 {
					buf := make([]byte, 8)
					r, err := ep.Irecv(peer, 5, buf)
					if err != nil {
						return err
					}
					st, err := r.WaitPassive(ctx)
					if err != nil {
						return err
					}
					if st.Count != 8 || !bytes.Equal(buf, pattern(8, 5)) {
						return fmt.Errorf("passive receive: status %+v, payload %v", st, buf)
					}
					// Nothing will match tag 6: the deadline cancels it.
					r, err = ep.Irecv(peer, 6, buf)
					if err != nil {
						return err
					}
					short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
					defer cancel()
					if _, err := r.WaitPassive(short); !errors.Is(err, context.DeadlineExceeded) {
						return fmt.Errorf("WaitPassive past its deadline: %v, want DeadlineExceeded", err)
					}
					if !r.Done() {
						return fmt.Errorf("request still pending after WaitPassive's deadline")
					}
					return ep.Send(ctx, peer, 7, nil)
				}
				if err := ep.Send(ctx, peer, 5, pattern(8, 5)); err != nil {
					return err
				}
				_, err := ep.Recv(ctx, peer, 7, nil)
				return err
			})
		})
	}
}

// TestOutcome: a request's Outcome says pending until it completes, then
// the byte count and error its Wait returns: a whole message's size, and a
// truncated one's error with the bytes delivered.
func TestOutcome(t *testing.T) {
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		if ep.Rank() == 0 {
			if _, err := ep.Recv(ctx, peer, 9, nil); err != nil { // the receives are posted
				return err
			}
			if err := ep.Send(ctx, peer, 1, pattern(5, 1)); err != nil {
				return err
			}
			return ep.Send(ctx, peer, 2, pattern(20, 2))
		}
		whole, err := ep.Irecv(peer, 1, make([]byte, 8))
		if err != nil {
			return err
		}
		short, err := ep.Irecv(peer, 2, make([]byte, 8))
		if err != nil {
			return err
		}
		if done, n, err := whole.Outcome(); done || n != 0 || err != nil {
			return fmt.Errorf("a pending receive's outcome: done %v, %d bytes, %v", done, n, err)
		}
		if err := ep.Send(ctx, peer, 9, nil); err != nil {
			return err
		}
		for _, r := range []*p2p.Request{whole, short} {
			st, werr := r.Wait(ctx)
			done, n, err := r.Outcome()
			if !done || n != st.Count || !errors.Is(err, werr) || (err == nil) != (werr == nil) {
				return fmt.Errorf("outcome done %v, %d bytes, %v; Wait said %+v, %v", done, n, err, st, werr)
			}
		}
		if _, n, err := whole.Outcome(); n != 5 || err != nil {
			return fmt.Errorf("whole receive: %d bytes, %v", n, err)
		}
		if _, n, err := short.Outcome(); n != 8 || !errors.Is(err, p2p.ErrTruncated) {
			return fmt.Errorf("truncated receive: %d bytes, %v; want 8 and ErrTruncated", n, err)
		}
		return nil
	})
}
