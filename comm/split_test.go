package comm_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

func TestSplit(t *testing.T) {
	for _, p := range []int{1, 2, 5, 8} {
		t.Run(fmt.Sprintf("ranks=%d", p), func(t *testing.T) {
			runOK(t, p, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
				me := c.Rank()
				// Two colors, reverse key order; rank 3 opts out.
				color := me % 2
				if me == 3 {
					color = comm.Undefined
				}
				sub, err := c.Split(ctx, color, -me)
				if err != nil {
					return err
				}
				if me == 3 {
					if sub != nil {
						return fmt.Errorf("Undefined color got a communicator")
					}
					return comm.Barrier(ctx, c)
				}
				defer sub.Close()
				var members []int
				for r := p - 1; r >= 0; r-- {
					if r%2 == color && r != 3 {
						members = append(members, r)
					}
				}
				if sub.Size() != len(members) || sub.WorldRank(sub.Rank()) != me {
					return fmt.Errorf("sub rank %d size %d, members %v", sub.Rank(), sub.Size(), members)
				}
				for i, wr := range members {
					if sub.WorldRank(i) != wr {
						return fmt.Errorf("sub rank %d is world %d, want %d", i, sub.WorldRank(i), wr)
					}
				}
				if err := everyCollective(ctx, sub, 7); err != nil {
					return fmt.Errorf("on the split: %w", err)
				}
				// Point-to-point in the sub numbering: ring with AnySource.
				q, sr := sub.Size(), sub.Rank()
				req, err := comm.Isend(ctx, sub, []int32{int32(me)}, (sr+1)%q, 3)
				if err != nil {
					return err
				}
				got := make([]int32, 1)
				st, err := comm.Recv(ctx, sub, got, comm.AnySource, 3)
				if err != nil {
					return err
				}
				if want := (sr + q - 1) % q; st.Source != want || got[0] != int32(sub.WorldRank(want)) {
					return fmt.Errorf("sub recv %+v %v, want source %d", st, got, want)
				}
				if _, err := req.Wait(ctx); err != nil {
					return err
				}
				// Split of the split, then the world again.
				sub2, err := sub.Split(ctx, 0, sr%2)
				if err != nil {
					return err
				}
				if sub2.Size() != sub.Size() {
					return fmt.Errorf("nested split size %d", sub2.Size())
				}
				if err := everyCollective(ctx, sub2, 3); err != nil {
					return fmt.Errorf("nested split: %w", err)
				}
				return comm.Barrier(ctx, c)
			})
		})
	}
}

func TestSplitBadColor(t *testing.T) {
	errs := run(t, 3, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		color := 0
		if c.Rank() == 1 {
			color = -7
		}
		sub, err := c.Split(ctx, color, 0)
		if c.Rank() == 1 {
			if !errors.Is(err, comm.ErrInvalidArgument) || sub != nil {
				return fmt.Errorf("color -7: %v", err)
			}
		} else {
			if err != nil {
				return err
			}
			defer sub.Close()
			if sub.Size() != 2 {
				return fmt.Errorf("size %d", sub.Size())
			}
		}
		return comm.Barrier(ctx, c)
	})
	requireOK(t, errs)
}

// Collectives on Dup'ed communicators run concurrently from different
// goroutines (in a different order on every rank) without cross-matching,
// while the world runs its own.
func TestDupConcurrent(t *testing.T) {
	const dups, iters = 4, 10
	for _, p := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("ranks=%d", p), func(t *testing.T) {
			runOK(t, p, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
				ds := make([]*comm.Comm, dups)
				for i := range ds {
					d, err := c.Dup(ctx)
					if err != nil {
						return err
					}
					defer d.Close()
					if d.Rank() != c.Rank() || d.Size() != c.Size() {
						return fmt.Errorf("dup rank %d size %d", d.Rank(), d.Size())
					}
					ds[i] = d
				}
				errs := make([]error, dups+1)
				var wg sync.WaitGroup
				for g := range dups + 1 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						cc := c
						if g < dups {
							// Each rank walks its dups in a different order.
							cc = ds[(g+c.Rank())%dups]
						}
						salt := 100 + g
						if g < dups {
							salt = 100 + (g+c.Rank())%dups
						}
						for it := range iters {
							n := 1 + (it*37)%300
							buf := input(c.Rank(), n, salt+it)
							if err := comm.Allreduce(ctx, cc, buf, comm.Sum); err != nil {
								errs[g] = err
								return
							}
							if err := eq("allreduce", buf, fold(p, n, salt+it, p, add)); err != nil {
								errs[g] = fmt.Errorf("goroutine %d iteration %d: %w", g, it, err)
								return
							}
							// User messages on the same communicator do not
							// match the collectives' traffic.
							if err := comm.Send(ctx, cc, buf[:1], (c.Rank()+1)%p, it); err != nil {
								errs[g] = err
								return
							}
							if _, err := comm.Recv(ctx, cc, buf[:1], (c.Rank()+p-1)%p, it); err != nil {
								errs[g] = err
								return
							}
						}
					}()
				}
				wg.Wait()
				return errors.Join(errs...)
			})
		})
	}
}

// Many communicators split at once from different parents get distinct
// contexts (the Adder store), and a store without Add still works for the
// sequential case.
func TestSplitConcurrentParents(t *testing.T) {
	runOK(t, 4, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		a, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		defer a.Close()
		b, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		defer b.Close()
		var wg sync.WaitGroup
		subs := make([]*comm.Comm, 2)
		errs := make([]error, 2)
		for i, parent := range []*comm.Comm{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				subs[i], errs[i] = parent.Split(ctx, parent.Rank()/2, 0)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		defer subs[0].Close()
		defer subs[1].Close()
		// Both subs have the same members; run them concurrently.
		for i, s := range subs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := input(c.Rank(), 50, i)
				errs[i] = comm.Allreduce(ctx, s, buf, comm.Sum)
				if errs[i] == nil {
					lo := c.Rank() / 2 * 2
					want := input(lo, 50, i)
					for j, x := range input(lo+1, 50, i) {
						want[j] += x
					}
					errs[i] = eq("sub allreduce", buf, want)
				}
			}()
		}
		wg.Wait()
		return errors.Join(errs...)
	})
}

// plainStore hides the Memory store's optional capabilities (Add,
// Allgather, Abort), as a PMI service would.
type plainStore struct{ m *bootstrap.Memory }

func (s plainStore) Rank() int                                         { return s.m.Rank() }
func (s plainStore) Size() int                                         { return s.m.Size() }
func (s plainStore) Put(ctx context.Context, k string, v []byte) error { return s.m.Put(ctx, k, v) }
func (s plainStore) Get(ctx context.Context, k string) ([]byte, error) { return s.m.Get(ctx, k) }
func (s plainStore) Fence(ctx context.Context) error                   { return s.m.Fence(ctx) }

func TestSplitWithoutAdder(t *testing.T) {
	const p = 4
	stores, err := bootstrap.NewMemory(p)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20e9)
	defer cancel()
	errs := make([]error, p)
	var wg sync.WaitGroup
	for r := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				c, err := comm.Init(ctx, comm.Options{Store: plainStore{stores[r]}, Transport: "loop", NoEnv: true})
				if err != nil {
					return err
				}
				defer c.Close()
				d, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				s, err := d.Split(ctx, r%2, r)
				if err != nil {
					return err
				}
				s2, err := c.Split(ctx, r/2, r)
				if err != nil {
					return err
				}
				for _, x := range []*comm.Comm{c, d, s, s2} {
					if err := everyCollective(ctx, x, 5); err != nil {
						return err
					}
				}
				return nil
			}()
			if errs[r] != nil {
				cancel()
			}
		}()
	}
	wg.Wait()
	requireOK(t, errs)
}

// Keys and colours near the int64 limits order ranks as their values do:
// a comparison by subtraction overflows there and puts them out of order.
func TestSplitExtremeKeys(t *testing.T) {
	const lo, hi = math.MinInt64, math.MaxInt64
	cases := []struct {
		name   string
		colors []int
		keys   []int
		want   [][]int // per colour (ascending), world ranks in order
	}{
		{"keys min and max", []int{0, 0, 0, 0}, []int{hi, lo, 0, hi - 1}, [][]int{{1, 2, 3, 0}}},
		{"keys max and negative", []int{0, 0, 0}, []int{-2, hi, lo + 1}, [][]int{{2, 0, 1}}},
		{"equal extreme keys by rank", []int{0, 0, 0}, []int{lo, hi, lo}, [][]int{{0, 2, 1}}},
		{"extreme colours", []int{hi, 0, hi, hi - 1}, []int{3, 0, lo, hi}, [][]int{{1}, {3}, {2, 0}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := len(tc.colors)
			runOK(t, p, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
				me := c.Rank()
				sub, err := c.Split(ctx, tc.colors[me], tc.keys[me])
				if err != nil {
					return err
				}
				defer sub.Close()
				var want []int
				for _, g := range tc.want {
					if slices.Contains(g, me) {
						want = g
					}
				}
				got := make([]int, sub.Size())
				for i := range got {
					got[i] = sub.WorldRank(i)
				}
				if !slices.Equal(got, want) {
					return fmt.Errorf("rank %d (colour %d, key %d): split order %v, want %v", me, tc.colors[me], tc.keys[me], got, want)
				}
				return nil
			})
		})
	}
}
