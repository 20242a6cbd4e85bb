package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// Every argument disagreement fails every rank by default (no Debug), on
// the shared-memory path too, where a bcast root or a reduce sender only
// writes and used to return success: seven ranks over shm, rank 2 the odd
// one; each rank fails the call or, if its part in it was done before the
// difference showed, its next call. Each error names the right ranks (never this rank as its own peer)
// and, for a refusal, carries the refusing rank's reason.
func TestDisagreementFailsEveryRank(t *testing.T) {
	const odd = 2
	cases := []struct {
		name string
		fn   func(ctx context.Context, c *comm.Comm, odd bool) error
		what string // MismatchError.What; "" for a refusal
	}{
		{"bcast root", func(ctx context.Context, c *comm.Comm, o bool) error {
			root := 0
			if o {
				root = 1
			}
			return comm.Bcast(ctx, c, make([]int64, 1), root)
		}, "root"},
		{"bcast count", func(ctx context.Context, c *comm.Comm, o bool) error {
			n := 1
			if o {
				n = 2
			}
			return comm.Bcast(ctx, c, make([]int64, n), 0)
		}, "count"},
		{"reduce count", func(ctx context.Context, c *comm.Comm, o bool) error {
			n := 1
			if o {
				n = 2
			}
			return comm.Reduce(ctx, c, make([]int64, n), comm.Sum, 0)
		}, "count"},
		{"reduce op", func(ctx context.Context, c *comm.Comm, o bool) error {
			op := comm.Sum
			if o {
				op = comm.Max
			}
			return comm.Reduce(ctx, c, make([]int64, 1), op, 0)
		}, "op"},
		{"bcast type", func(ctx context.Context, c *comm.Comm, o bool) error {
			if o {
				return comm.Bcast(ctx, c, make([]float64, 1), 0)
			}
			return comm.Bcast(ctx, c, make([]int64, 1), 0)
		}, "type"},
		{"bcast root out of range", func(ctx context.Context, c *comm.Comm, o bool) error {
			root := 0
			if o {
				root = 99
			}
			return comm.Bcast(ctx, c, make([]int64, 1), root)
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := run(t, 7, comm.Options{Transport: "shm"}, func(ctx context.Context, c *comm.Comm) error {
				// A first call that agrees, so that the algorithms in play
				// are the shared-memory ones.
				if err := comm.Barrier(ctx, c); err != nil {
					return err
				}
				me := c.Rank()
				// A rank whose part in the call did not show the
				// difference (the root of a bcast, a reduce sender, a
				// reader that agrees with the root) reports it from its
				// next call, unless an abort reached it in time: each
				// rank reports it exactly once.
				first := tc.fn(ctx, c, me == odd)
				next := comm.Barrier(ctx, c)
				err := first
				switch {
				case first == nil && next == nil:
					return fmt.Errorf("%s: succeeded on rank %d", tc.name, me)
				case first != nil && next != nil:
					return fmt.Errorf("%s: rank %d reported twice: %v; then %v", tc.name, me, first, next)
				case first == nil:
					err = next
				}
				var ce *collectives.Error
				if errors.As(err, &ce) && ce.Peer == me {
					return fmt.Errorf("rank %d names itself as its peer: %v", me, err)
				}
				if tc.what == "" {
					if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "root 99 out of range") {
						return fmt.Errorf("want ErrInvalidArgument with the reason, got %v", err)
					}
					var pe *collectives.PeerError
					if me != odd && (!errors.As(err, &pe) || pe.Rank != odd) {
						return fmt.Errorf("want a PeerError naming rank %d, got %v", odd, err)
					}
					return nil
				}
				var m *collectives.MismatchError
				if !errors.As(err, &m) || m.What != tc.what || (m.Rank != odd && m.Peer != odd) {
					return fmt.Errorf("want a %s MismatchError naming rank %d, got %v", tc.what, odd, err)
				}
				// Six ranks agree: the odd one is the suspect (what a
				// launcher names), when the finder saw every call.
				if m.Suspect != odd && m.Suspect != -1 {
					return fmt.Errorf("suspect %d, want %d: %v", m.Suspect, odd, err)
				}
				return nil
			})
			requireOK(t, errs)
		})
	}
}

// A refusal names the algorithm the caller forced, not "auto"; with Debug
// a disagreement names the other rank as the peer, never this rank.
func TestRefusalAndDebugErrorsName(t *testing.T) {
	o := comm.Options{Collectives: collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{collectives.CollAllreduce: collectives.Ring}}}
	errs := run(t, 4, o, func(ctx context.Context, c *comm.Comm) error {
		op := comm.Sum
		if c.Rank() == 2 {
			op = comm.BAnd // not defined for floats: rank 2 refuses the call
		}
		err := comm.Allreduce(ctx, c, make([]float32, 3), op)
		if err == nil || strings.Contains(err.Error(), "(auto)") || !strings.Contains(err.Error(), "(ring)") {
			return fmt.Errorf("want an error naming the forced ring, got %v", err)
		}
		if !errors.Is(err, comm.ErrUnsupported) {
			return fmt.Errorf("want ErrUnsupported (rank 2's reason), got %v", err)
		}
		return nil
	})
	requireOK(t, errs)
	o = comm.Options{Collectives: collectives.Options{Debug: true}}
	errs = run(t, 4, o, func(ctx context.Context, c *comm.Comm) error {
		n := 3
		if c.Rank() == 3 {
			n = 4
		}
		err := comm.Allreduce(ctx, c, make([]int32, n), comm.Sum)
		var ce *collectives.Error
		if !errors.Is(err, comm.ErrMismatch) || !errors.As(err, &ce) {
			return fmt.Errorf("want a mismatch, got %v", err)
		}
		if ce.Peer == c.Rank() || strings.Contains(err.Error(), fmt.Sprintf("on rank %d of 4: peer %d:", c.Rank(), c.Rank())) {
			return fmt.Errorf("rank %d names itself as its peer: %v", c.Rank(), err)
		}
		return nil
	})
	requireOK(t, errs)
}

// An allreduce over shared memory checks every peer's header with its
// chunks instead of the closing agreement; an empty one still agrees.
func TestAllreduceDisagreementSharedMemory(t *testing.T) {
	for _, counts := range [][2]int{{1, 2}, {0, 1}, {1, 0}} {
		t.Run(fmt.Sprint(counts), func(t *testing.T) {
			errs := run(t, 4, comm.Options{Transport: "shm"}, func(ctx context.Context, c *comm.Comm) error {
				n := counts[0]
				if c.Rank() == 1 {
					n = counts[1]
				}
				err := comm.Allreduce(ctx, c, make([]int64, n), comm.Sum)
				if !errors.Is(err, comm.ErrMismatch) {
					return fmt.Errorf("want ErrMismatch, got %v", err)
				}
				return nil
			})
			requireOK(t, errs)
		})
	}
}
