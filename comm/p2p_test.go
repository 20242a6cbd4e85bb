package comm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/p2p"
)

// typedRing sends a []T around the ring (rank r to r+1) with both blocking
// and non-blocking calls and checks contents and status.
func typedRing[T comm.Element](ctx context.Context, c *comm.Comm, n int) error {
	p, me := c.Size(), c.Rank()
	next, prev := (me+1)%p, (me+p-1)%p
	send := make([]T, n)
	for i := range send {
		send[i] = T(me*1000 + i%100)
	}
	recv := make([]T, n+3)
	rr, err := comm.Irecv(ctx, c, recv, prev, 5)
	if err != nil {
		return err
	}
	if err := comm.Send(ctx, c, send, next, 5); err != nil {
		return err
	}
	st, err := rr.Wait(ctx)
	if err != nil {
		return err
	}
	if st.Source != prev || st.Tag != 5 || st.Count != n {
		return fmt.Errorf("status %+v, want source %d tag 5 count %d", st, prev, n)
	}
	for i := range n {
		if recv[i] != T(prev*1000+i%100) {
			return fmt.Errorf("element %d: %v", i, recv[i])
		}
	}
	// And back with Isend / Recv, wildcard source and tag.
	sr, err := comm.Isend(ctx, c, send, prev, 6)
	if err != nil {
		return err
	}
	// AnySource with a fixed tag, then AnyTag from a fixed source (a later
	// call's tag-5 message from prev must not match here).
	src, tag := comm.AnySource, 6
	if me%2 == 1 {
		src, tag = next, comm.AnyTag
	}
	st, err = comm.Recv(ctx, c, recv, src, tag)
	if err != nil {
		return err
	}
	if st.Source != next || st.Tag != 6 || st.Count != n {
		return fmt.Errorf("wildcard status %+v, want source %d tag 6 count %d", st, next, n)
	}
	if n > 0 && recv[n-1] != T(next*1000+(n-1)%100) {
		return fmt.Errorf("wildcard: last element %v", recv[n-1])
	}
	_, err = sr.Wait(ctx)
	return err
}

func TestTypedP2P(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		for _, size := range []int{0, 1, 7, 5000} { // 5000·8 bytes goes through rendezvous
			t.Run(fmt.Sprintf("ranks=%d/n=%d", n, size), func(t *testing.T) {
				runOK(t, n, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
					if err := typedRing[float32](ctx, c, size); err != nil {
						return fmt.Errorf("float32: %w", err)
					}
					if err := typedRing[int64](ctx, c, size); err != nil {
						return fmt.Errorf("int64: %w", err)
					}
					if err := typedRing[byte](ctx, c, size); err != nil {
						return fmt.Errorf("byte: %w", err)
					}
					if err := typedRing[int16](ctx, c, size); err != nil {
						return fmt.Errorf("int16: %w", err)
					}
					return typedRing[float64](ctx, c, size)
				})
			})
		}
	}
}

func TestP2PProbeSendrecv(t *testing.T) {
	runOK(t, 2, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		other := 1 - c.Rank()
		if c.Rank() == 0 {
			if err := comm.Send(ctx, c, []int32{1, 2, 3}, 1, 9); err != nil {
				return err
			}
		} else {
			st, err := comm.Probe[int32](ctx, c, comm.AnySource, comm.AnyTag)
			if err != nil {
				return err
			}
			if st != (comm.Status{Source: 0, Tag: 9, Count: 3}) {
				return fmt.Errorf("probe %+v", st)
			}
			st, ok, err := comm.Iprobe[int16](ctx, c, 0, 9)
			if err != nil || !ok || st.Count != 6 {
				return fmt.Errorf("iprobe %+v %v %v", st, ok, err)
			}
			buf := make([]int32, st.Count/2)
			if _, err := comm.Recv(ctx, c, buf, 0, 9); err != nil {
				return err
			}
		}
		got := make([]float64, 2)
		st, err := comm.Sendrecv(ctx, c, []float64{float64(c.Rank()), 7}, other, 1, got, other, 1)
		if err != nil {
			return err
		}
		if st.Source != other || got[0] != float64(other) || got[1] != 7 {
			return fmt.Errorf("sendrecv %+v %v", st, got)
		}
		return nil
	})
}

func TestP2PErrors(t *testing.T) {
	runOK(t, 3, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		buf := make([]float32, 4)
		check := func(err, want error, op string, peer, tag int) error {
			if !errors.Is(err, want) {
				return fmt.Errorf("%s: want %v, got %v", op, want, err)
			}
			var oe *comm.OpError
			if !errors.As(err, &oe) || oe.Op != op || oe.Peer != peer || oe.Tag != tag || oe.Rank != c.Rank() {
				return fmt.Errorf("%s: OpError %#v", op, oe)
			}
			return nil
		}
		if err := check(comm.Send(ctx, c, buf, 3, 0), comm.ErrInvalidRank, "Send", 3, 0); err != nil {
			return err
		}
		if err := check(comm.Send(ctx, c, buf, -1, 0), comm.ErrInvalidRank, "Send", -1, 0); err != nil {
			return err
		}
		if err := check(comm.Send(ctx, c, buf, 0, -4), comm.ErrInvalidTag, "Send", 0, -4); err != nil {
			return err
		}
		if err := check(comm.Send(ctx, c, buf, 0, comm.AnyTag), comm.ErrInvalidTag, "Send", 0, comm.AnyTag); err != nil {
			return err
		}
		_, err := comm.Recv(ctx, c, buf, 7, 0)
		if err := check(err, comm.ErrInvalidRank, "Recv", 7, 0); err != nil {
			return err
		}
		_, err = comm.Irecv(ctx, c, buf, 0, -7)
		if err := check(err, comm.ErrInvalidTag, "Irecv", 0, -7); err != nil {
			return err
		}
		_, err = comm.Isend(ctx, c, buf, 5, 1)
		if err := check(err, comm.ErrInvalidRank, "Isend", 5, 1); err != nil {
			return err
		}
		if !assert.Contains(t, fmt.Sprint(err), "rank 5 is not in [0, 3)") {
			return errors.New("message")
		}

		// Truncation, and a byte count that is not whole elements.
		switch c.Rank() {
		case 0:
			if err := comm.Send(ctx, c, make([]float32, 8), 1, 1); err != nil {
				return err
			}
			return comm.Send(ctx, c, make([]byte, 6), 1, 2)
		case 1:
			_, err := comm.Recv(ctx, c, buf, 0, 1)
			if err := check(err, comm.ErrTruncated, "Recv", 0, 1); err != nil {
				return err
			}
			var te *p2p.TruncatedError
			if !errors.As(err, &te) || te.Size != 32 || te.Cap != 16 {
				return fmt.Errorf("truncation sizes: %v", err)
			}
			_, err = comm.Recv(ctx, c, buf, 0, 2)
			if !errors.Is(err, comm.ErrMismatch) || !assert.Contains(t, err.Error(), "6 bytes, not a whole number of 4-byte elements") {
				return fmt.Errorf("want element mismatch, got %v", err)
			}
			// A message is not a collective: its error must not say so.
			if strings.Contains(err.Error(), "collective") {
				return fmt.Errorf("a receive's element mismatch speaks of collectives: %v", err)
			}
		}
		return nil
	})
}

// TestWaitAllReportsCompletedFailures: WaitAll reports the error of a
// request that has already completed when it looks (a truncated receive,
// one of bytes that are not whole elements, a nil ctx), the first in slice
// order, and nil for a window whose requests all completed well, however
// few of them it had to wait for.
func TestWaitAllReportsCompletedFailures(t *testing.T) {
	runOK(t, 2, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == 0 {
			if err := comm.Send(ctx, c, make([]byte, 40), 1, 1); err != nil { // truncated there
				return err
			}
			if err := comm.Send(ctx, c, make([]byte, 6), 1, 2); err != nil { // not whole int32s
				return err
			}
			for i := range 8 {
				if err := comm.Send(ctx, c, []int32{int32(i)}, 1, 3); err != nil {
					return err
				}
			}
			return comm.Barrier(ctx, c)
		}
		if err := comm.Barrier(ctx, c); err != nil { // every message has arrived
			return err
		}
		good := make([]*comm.Request, 8)
		for i := range good {
			r, err := comm.Irecv(ctx, c, make([]int32, 1), 0, 3)
			if err != nil {
				return err
			}
			good[i] = r
		}
		trunc, err := comm.Irecv(ctx, c, make([]byte, 8), 0, 1)
		if err != nil {
			return err
		}
		odd, err := comm.Irecv(ctx, c, make([]int32, 4), 0, 2)
		if err != nil {
			return err
		}
		// Done before WaitAll looks: it must still report them.
		for _, r := range []*comm.Request{trunc, odd} {
			for !r.P2P().Done() {
				if _, _, err := r.Test(); err != nil {
					break
				}
			}
		}
		require.ErrorIs(t, comm.WaitAll(nil, good...), comm.ErrInvalidArgument, "a nil ctx, every request done")
		require.NoError(t, comm.WaitAll(ctx, good...))
		err = comm.WaitAll(ctx, append(good, trunc, odd)...)
		require.ErrorIs(t, err, comm.ErrTruncated, "the first failure in slice order")
		err = comm.WaitAll(ctx, odd, trunc)
		require.ErrorIs(t, err, comm.ErrMismatch)
		require.Contains(t, err.Error(), "6 bytes, not a whole number of 4-byte elements")
		return nil
	})
}

func TestP2PContextDeadline(t *testing.T) {
	runOK(t, 2, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		if c.Rank() == 0 {
			dctx, cancel := context.WithTimeout(ctx, 50e6)
			defer cancel()
			_, err := comm.Recv(dctx, c, make([]byte, 1), 1, 0)
			if !errors.Is(err, context.DeadlineExceeded) {
				return fmt.Errorf("want deadline, got %v", err)
			}
			require.Contains(t, err.Error(), "peer 1, tag 0: context deadline exceeded: had not arrived")
		}
		return comm.Barrier(ctx, c)
	})
}

// TestRequestTravelsWithP2P: a point-to-point request is kept with the
// p2p request it wraps, so that Release hands both back to the endpoint
// in one step and the next request built on that p2p request is the same
// object, with nothing left of its previous use.
func TestRequestTravelsWithP2P(t *testing.T) {
	runOK(t, 2, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		peer := 1 - c.Rank()
		for i := range 4 {
			s, err := comm.Isend(ctx, c, []int32{int32(i)}, peer, 3+i)
			if err != nil {
				return err
			}
			r, err := comm.Irecv(ctx, c, make([]int32, 1), peer, 3+i)
			if err != nil {
				return err
			}
			require.Same(t, s, s.P2P().Ext(), "the send request rides with its p2p request")
			require.Same(t, r, r.P2P().Ext(), "the receive request rides with its p2p request")
			st, err := r.Wait(ctx)
			if err != nil {
				return err
			}
			require.Equal(t, comm.Status{Source: peer, Tag: 3 + i, Count: 1}, st)
			if err := comm.WaitAll(ctx, s); err != nil {
				return err
			}
			p := s.P2P()
			comm.ReleaseAll(s)
			r.Release()
			if p.Ext() != s {
				return fmt.Errorf("rank %d: a released request left its p2p request", c.Rank())
			}
		}
		return nil
	})
}

// TestRequestRelease: Release (and ReleaseAll) of a request that has not
// completed does nothing (it still completes and reports its status);
// released requests are reused, so a loop of Isend/Irecv/WaitAll/Release,
// or ReleaseAll, allocates far less than one without; a released
// receive's status stays what Wait returned.
func TestRequestRelease(t *testing.T) {
	runOK(t, 2, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		peer := 1 - c.Rank()
		buf := make([]int32, 8)
		// Not completed yet: rank 1 receives before rank 0 sends.
		if c.Rank() == 1 {
			r, err := comm.Irecv(ctx, c, buf, 0, 9)
			if err != nil {
				return err
			}
			r.Release() // no effect: still pending
			comm.ReleaseAll(nil, r)
			if err := comm.Send(ctx, c, []int32{1}, 0, 8); err != nil {
				return err
			}
			st, err := r.Wait(ctx)
			if err != nil || st.Count != 3 || buf[2] != 33 {
				return fmt.Errorf("after an early Release: status %+v err %v buf %v", st, err, buf[:3])
			}
			r.Release()
		} else {
			if _, err := comm.Recv(ctx, c, make([]int32, 1), 1, 8); err != nil {
				return err
			}
			if err := comm.Send(ctx, c, []int32{11, 22, 33}, 1, 9); err != nil {
				return err
			}
		}
		loop := func(release, all bool) error {
			for range 200 {
				s, err := comm.Isend(ctx, c, buf[:4], peer, 3)
				if err != nil {
					return err
				}
				r, err := comm.Irecv(ctx, c, buf[4:], peer, 3)
				if err != nil {
					return err
				}
				if err := comm.WaitAll(ctx, s, r); err != nil {
					return err
				}
				switch {
				case all:
					comm.ReleaseAll(s, nil, r)
				case release:
					s.Release()
					r.Release()
				}
			}
			return nil
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.Mallocs
		if err := loop(false, false); err != nil {
			return err
		}
		runtime.ReadMemStats(&ms)
		without := ms.Mallocs - before
		before = ms.Mallocs
		if err := loop(true, false); err != nil {
			return err
		}
		runtime.ReadMemStats(&ms)
		with := ms.Mallocs - before
		before = ms.Mallocs
		if err := loop(false, true); err != nil {
			return err
		}
		runtime.ReadMemStats(&ms)
		if withAll := ms.Mallocs - before; withAll*3 > without*2 {
			return fmt.Errorf("rank %d: %d allocations with ReleaseAll against %d without", c.Rank(), withAll, without)
		}
		// Both ranks run in this process, so the counts include the other
		// rank's, and the provider's own allocations (unexpected messages'
		// copies) are in both; without Release each loop also allocates
		// its 400 requests per rank (the race detector's pool drops a
		// quarter of what is put back, hence the margin).
		if with*3 > without*2 {
			return fmt.Errorf("rank %d: %d allocations with Release against %d without", c.Rank(), with, without)
		}
		return nil
	})
}
