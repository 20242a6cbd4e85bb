package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// shmBcastReduce forces the shared-memory bcast and reduce.
func shmBcastReduce() collectives.Options {
	o := force(collectives.CollBcast, collectives.SharedMemory)
	o.Algorithms[collectives.CollReduce] = collectives.SharedMemory
	return o
}

// A shared-memory bcast root publishes its data and returns: it does not
// wait for the readers to enter the call (the agreement is checked by its
// next call). Here no reader calls Bcast before the root has returned.
func TestSharedMemoryBcastRootDoesNotWait(t *testing.T) {
	for _, p := range []int{2, 4} {
		t.Run(fmt.Sprint("ranks=", p), func(t *testing.T) {
			rootDone := make(chan struct{})
			errs := world(t, p, coltest.Options{Shared: true}, shmBcastReduce(), func(ctx context.Context, e *collectives.Engine, r int) error {
				buf := make([]int64, 3)
				if r == 0 {
					copy(buf, []int64{7, 8, 9})
					ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
					defer cancel()
					err := collectives.Bcast(ctx, e, buf, 0)
					close(rootDone)
					if err != nil {
						return fmt.Errorf("root: %w", err)
					}
				} else {
					select {
					case <-rootDone:
					case <-ctx.Done():
						return ctx.Err()
					}
					if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
						return err
					}
					if buf[0] != 7 || buf[2] != 9 {
						return fmt.Errorf("got %v", buf)
					}
				}
				// The next call checks the bcast's agreement: it agrees.
				return collectives.Barrier(ctx, e)
			})
			requireAllOK(t, errs)
		})
	}
}

// Every disagreement of a shared-memory call fails every rank exactly once:
// in the call itself (the ranks that read a different header, and those an
// abort reaches in time) or else in the next call, which still does its
// part. Rank 2 of 4 is the odd one; rank 0 the root.
func TestSharedMemoryDisagreementReportedOnce(t *testing.T) {
	const odd = 2
	cases := []struct {
		name string
		fn   func(ctx context.Context, e *collectives.Engine, o bool) error
		what string // MismatchError.What; "" for a refusal
	}{
		{"bcast count", func(ctx context.Context, e *collectives.Engine, o bool) error {
			return collectives.Bcast(ctx, e, make([]int64, pick(o, 2, 1)), 0)
		}, "count"},
		{"bcast root", func(ctx context.Context, e *collectives.Engine, o bool) error {
			return collectives.Bcast(ctx, e, make([]int64, 1), pick(o, 1, 0))
		}, "root"},
		{"bcast root is the odd rank", func(ctx context.Context, e *collectives.Engine, o bool) error {
			return collectives.Bcast(ctx, e, make([]int64, 1), pick(o, odd, 0))
		}, "root"},
		{"bcast type", func(ctx context.Context, e *collectives.Engine, o bool) error {
			if o {
				return collectives.Bcast(ctx, e, make([]float64, 1), 0)
			}
			return collectives.Bcast(ctx, e, make([]int64, 1), 0)
		}, "type"},
		{"reduce count", func(ctx context.Context, e *collectives.Engine, o bool) error {
			return collectives.Reduce(ctx, e, make([]int64, pick(o, 2, 1)), reduce.Sum, 0)
		}, "count"},
		{"reduce op", func(ctx context.Context, e *collectives.Engine, o bool) error {
			op := reduce.Sum
			if o {
				op = reduce.Max
			}
			return collectives.Reduce(ctx, e, make([]int64, 1), op, 0)
		}, "op"},
		{"bcast root out of range", func(ctx context.Context, e *collectives.Engine, o bool) error {
			return collectives.Bcast(ctx, e, make([]int64, 1), pick(o, 99, 0))
		}, ""},
	}
	// The next call checks at its end when it reads every peer's header
	// itself (a barrier), else when it begins (a bcast).
	nexts := []struct {
		name string
		fn   func(ctx context.Context, e *collectives.Engine) error
	}{
		{"barrier", func(ctx context.Context, e *collectives.Engine) error { return collectives.Barrier(ctx, e) }},
		{"bcast", func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Bcast(ctx, e, make([]int32, 2), 1)
		}},
	}
	for _, tc := range cases {
		for _, nx := range nexts {
			t.Run(tc.name+"/next="+nx.name, func(t *testing.T) {
				disagreeOnce(t, tc.fn, nx.fn, tc.what)
			})
		}
	}
}

// disagreeOnce runs bad on 4 ranks (rank 2 odd) then nextCall, and checks
// that each rank reports the disagreement (a what MismatchError, or rank
// 2's refusal when what is "") exactly once.
func disagreeOnce(t *testing.T, bad func(ctx context.Context, e *collectives.Engine, odd bool) error, nextCall func(ctx context.Context, e *collectives.Engine) error, what string) {
	t.Helper()
	const odd = 2
	errs := world(t, 4, coltest.Options{Shared: true}, shmBcastReduce(), func(ctx context.Context, e *collectives.Engine, r int) error {
		if err := collectives.Barrier(ctx, e); err != nil {
			return err
		}
		first := bad(ctx, e, r == odd)
		next := nextCall(ctx, e)
		err := first
		switch {
		case first == nil && next == nil:
			return fmt.Errorf("rank %d: both calls succeeded", r)
		case first != nil && next != nil:
			return fmt.Errorf("rank %d: reported twice: %v; then %v", r, first, next)
		case first == nil:
			err = next
			var ce *collectives.Error
			if !errors.As(err, &ce) || ce.Seq != 2 {
				return fmt.Errorf("rank %d: the next call's error does not name the call it is about (#2): %v", r, err)
			}
		}
		var ce *collectives.Error
		if errors.As(err, &ce) && ce.Peer == r {
			return fmt.Errorf("rank %d names itself as its peer: %v", r, err)
		}
		if what == "" {
			if !errors.Is(err, collectives.ErrInvalidArgument) || !strings.Contains(err.Error(), "root 99 out of range") {
				return fmt.Errorf("want ErrInvalidArgument with the reason, got %v", err)
			}
			var pe *collectives.PeerError
			if r != odd && (!errors.As(err, &pe) || pe.Rank != odd) {
				return fmt.Errorf("want a PeerError naming rank %d, got %v", odd, err)
			}
			return nil
		}
		var m *collectives.MismatchError
		if !errors.As(err, &m) || m.What != what || (m.Rank != odd && m.Peer != odd) {
			return fmt.Errorf("want a %s MismatchError naming rank %d, got %v", what, odd, err)
		}
		return nil
	})
	requireAllOK(t, errs)
}

func pick(odd bool, a, b int) int {
	if odd {
		return a
	}
	return b
}

// A bcast reader whose root is another reader waits for data that rank
// never publishes; it fails by itself once it sees that rank's
// announcement, although the true root and the other reader have returned
// and call nothing more until it has, and without stall probes (which
// would also find it, later).
func TestSharedMemoryReaderSeesWrongRoot(t *testing.T) {
	oddDone := make(chan struct{})
	o := shmBcastReduce()
	o.StallProbe = -1
	errs := world(t, 3, coltest.Options{Shared: true}, o, func(ctx context.Context, e *collectives.Engine, r int) error {
		if err := collectives.Barrier(ctx, e); err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		root := 0
		if r == 2 {
			root = 1
		}
		err := collectives.Bcast(ctx, e, make([]int64, 1), root)
		if r == 2 {
			close(oddDone)
			var m *collectives.MismatchError
			if !errors.As(err, &m) || m.What != "root" {
				return fmt.Errorf("want a root mismatch, got %v", err)
			}
			return collectives.Barrier(ctx, e) // its bcast failed: nothing pending
		}
		select {
		case <-oddDone:
		case <-ctx.Done():
			return fmt.Errorf("rank 2 did not fail by itself: %w", ctx.Err())
		}
		next := collectives.Barrier(ctx, e)
		if err != nil { // an abort reached it in time
			return next
		}
		if !errors.Is(next, collectives.ErrMismatch) {
			return fmt.Errorf("want the bcast's mismatch from the next call, got %v", next)
		}
		return nil
	})
	requireAllOK(t, errs)
}

// A rank whose last call left its agreement pending learns of the
// disagreement from Close: each rank reports it once, from the bcast or
// from Close.
func TestSharedMemoryDisagreementAtClose(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := coltest.NewWorld(3, coltest.Options{Shared: true})
	errs := w.Run(func(r int, g collectives.Group) error {
		e, err := collectives.New(g, shmBcastReduce())
		if err != nil {
			return err
		}
		if err := collectives.Barrier(ctx, e); err != nil {
			e.Close()
			return err
		}
		first := collectives.Bcast(ctx, e, make([]int64, pick(r == 2, 2, 1)), 0)
		closed := e.Close()
		switch {
		case first == nil && closed == nil:
			return fmt.Errorf("rank %d: the bcast and Close succeeded", r)
		case first != nil && closed != nil:
			return fmt.Errorf("rank %d: reported twice: %v; then %v", r, first, closed)
		}
		if err := errors.Join(first, closed); !errors.Is(err, collectives.ErrMismatch) {
			return fmt.Errorf("rank %d: want a count mismatch, got %v", r, err)
		}
		return nil
	})
	requireAllOK(t, errs)
}
