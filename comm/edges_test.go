package comm_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

// transports are the providers the in-process tests of the newer calls
// run over: the in-process one, shared memory and TCP on loopback.
var transports = []string{"loop", "shm", "tcp"}

// TestP2PStartContext: Isend, Irecv and Iprobe refuse a nil or ended ctx
// (posting nothing), and a receive whose start ctx ends before it matched
// completes with ErrCanceled and the ctx's error, leaving the message that
// arrives later to the next receive.
func TestP2PStartContext(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 2, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				peer := 1 - c.Rank()
				buf := make([]int32, 4)
				if _, err := comm.Isend(nil, c, buf, peer, 1); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("Isend with a nil ctx: %v", err)
				}
				if _, err := comm.Irecv(nil, c, buf, peer, 1); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("Irecv with a nil ctx: %v", err)
				}
				if _, _, err := comm.Iprobe[int32](nil, c, peer, 1); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("Iprobe with a nil ctx: %v", err)
				}
				if br, err := comm.Ibarrier(ctx, c); err != nil {
					return err
				} else if _, err := br.Wait(nil); !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("Wait with a nil ctx: %v", err)
				} else if _, err := br.Wait(ctx); err != nil {
					return err
				}
				ended, cancel := context.WithCancel(ctx)
				cancel()
				if _, err := comm.Isend(ended, c, []int32{99}, peer, 1); !errors.Is(err, context.Canceled) {
					return fmt.Errorf("Isend with an ended ctx: %v", err)
				}
				if _, err := comm.Irecv(ended, c, buf, peer, 1); !errors.Is(err, context.Canceled) {
					return fmt.Errorf("Irecv with an ended ctx: %v", err)
				}
				if _, _, err := comm.Iprobe[int32](ended, c, peer, 1); !errors.Is(err, context.Canceled) {
					return fmt.Errorf("Iprobe with an ended ctx: %v", err)
				}
				if err := comm.Barrier(ctx, c); err != nil {
					return err
				}
				// Nothing was posted by the ended Isend: the peer's probe
				// finds no message.
				if _, ok, err := comm.Iprobe[int32](ctx, c, peer, 1); err != nil || ok {
					return fmt.Errorf("a message from an Isend with an ended ctx arrived: ok %v err %v", ok, err)
				}
				if err := comm.Barrier(ctx, c); err != nil {
					return err
				}

				if c.Rank() == 0 {
					rctx, rcancel := context.WithCancel(ctx)
					r, err := comm.Irecv(rctx, c, buf, 1, 2)
					if err != nil {
						rcancel()
						return err
					}
					rcancel()
					_, err = r.Wait(ctx)
					if !errors.Is(err, comm.ErrCanceled) || !errors.Is(err, context.Canceled) {
						return fmt.Errorf("a receive whose ctx ended: %v, want ErrCanceled and context.Canceled", err)
					}
					var oe *comm.OpError
					if !errors.As(err, &oe) || oe.Peer != 1 || oe.Tag != 2 || oe.Op != "Irecv" {
						return fmt.Errorf("the error does not name the receive: %v", err)
					}
				}
				if c.Rank() == 0 {
					// Its start ctx ends while Wait (on another ctx) waits.
					rctx, rcancel := context.WithCancel(ctx)
					r, err := comm.Irecv(rctx, c, buf, 1, 4)
					if err != nil {
						rcancel()
						return err
					}
					go rcancel()
					if _, err := r.Wait(ctx); !errors.Is(err, comm.ErrCanceled) || !errors.Is(err, context.Canceled) {
						return fmt.Errorf("a receive whose ctx ended during Wait: %v", err)
					}
					r.Release()
				}
				if err := comm.Barrier(ctx, c); err != nil {
					return err
				}
				if c.Rank() == 1 {
					return comm.Send(ctx, c, []int32{5, 6}, 0, 2)
				}
				st, err := comm.Recv(ctx, c, buf, 1, 2)
				if err != nil || st.Count != 2 || buf[1] != 6 {
					return fmt.Errorf("the message after the canceled receive: %+v %v %v", st, err, buf)
				}
				// A ctx that ends after the match changes nothing.
				rctx, rcancel := context.WithCancel(ctx)
				defer rcancel()
				s, err := comm.Isend(rctx, c, []int32{1, 2, 3}, 1, 3)
				if err != nil {
					return err
				}
				if _, err := s.Wait(ctx); err != nil {
					return err
				}
				rcancel()
				_, err = s.Wait(ctx)
				s.Release()
				return err
			})
		})
	}
}

// TestCreateGroup: communicators from explicit lists, made by the listed
// ranks only (rank 0 of five makes none and goes on), numbered in list
// order, with working collectives and messages, over each transport and
// with a store that cannot count.
func TestCreateGroup(t *testing.T) {
	const p = 5
	for _, tr := range append(transports, "loop-plain-store") {
		t.Run(tr, func(t *testing.T) {
			o := comm.Options{Transport: tr}
			var per func(r int, o *comm.Options)
			if tr == "loop-plain-store" {
				o.Transport = "loop"
				per = func(r int, o *comm.Options) { o.Store = plainStore{o.Store.(*bootstrap.Memory)} }
			}
			o.NoEnv = true
			requireOK(t, runWith(t, p, o, per, func(ctx context.Context, c *comm.Comm) error {
				me := c.Rank()
				lists := [][]int{{4, 1}, {2, 3, 1}}
				for _, list := range lists {
					i := slices.Index(list, me)
					if i < 0 {
						continue
					}
					g, err := c.CreateGroup(ctx, list)
					if err != nil {
						return err
					}
					if g.Rank() != i || g.Size() != len(list) || g.WorldRank(i) != me {
						g.Close()
						return fmt.Errorf("group %v: rank %d of %d (world %d), want %d of %d", list, g.Rank(), g.Size(), g.WorldRank(i), i, len(list))
					}
					sum := []int64{int64(me)}
					if err := comm.Allreduce(ctx, g, sum, comm.Sum); err != nil {
						g.Close()
						return err
					}
					want := 0
					for _, r := range list {
						want += r
					}
					if sum[0] != int64(want) {
						g.Close()
						return fmt.Errorf("group %v: sum %d, want %d", list, sum[0], want)
					}
					// Rank 0 of the group sends its world rank to the last.
					if g.Rank() == 0 {
						err = comm.Send(ctx, g, []int64{int64(me)}, g.Size()-1, 7)
					} else if g.Rank() == g.Size()-1 {
						got := []int64{-1}
						_, err = comm.Recv(ctx, g, got, 0, 7)
						if err == nil && got[0] != int64(list[0]) {
							err = fmt.Errorf("group %v: got %d from group rank 0, want %d", list, got[0], list[0])
						}
					}
					if err != nil {
						g.Close()
						return err
					}
					if err := g.Close(); err != nil {
						return err
					}
				}
				return comm.Barrier(ctx, c) // c still works, and rank 0 was never asked
			}))
		})
	}
}

// TestCreateGroupErrors: bad lists fail at once with the entry named;
// lists that differ fail with ErrMismatch naming both lists on every rank.
func TestCreateGroupErrors(t *testing.T) {
	runOK(t, 3, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		me := c.Rank()
		for _, bad := range []struct {
			list []int
			is   error
			say  string
		}{
			{nil, comm.ErrInvalidArgument, "empty"},
			{[]int{me, 3}, comm.ErrInvalidRank, "ranks[1] = 3 is not in [0, 3)"},
			{[]int{me, -1}, comm.ErrInvalidRank, "ranks[1] = -1"},
			{[]int{me, 0, 1, 2}, comm.ErrInvalidArgument, "listed twice"},
			{[]int{(me + 1) % 3}, comm.ErrInvalidArgument, "not in the list"},
		} {
			_, err := c.CreateGroup(ctx, bad.list)
			if !errors.Is(err, bad.is) || err == nil || !strings.Contains(err.Error(), bad.say) {
				return fmt.Errorf("list %v: %v, want %v saying %q", bad.list, err, bad.is, bad.say)
			}
		}
		// Rank 2 passes the same ranks in another order.
		list := []int{0, 1, 2}
		if me == 2 {
			list = []int{0, 2, 1}
		}
		tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		g, err := c.CreateGroup(tctx, list)
		if err == nil {
			g.Close()
			return errors.New("lists [0 1 2] and [0 2 1] made a communicator")
		}
		if !errors.Is(err, comm.ErrMismatch) || !strings.Contains(err.Error(), "rank 2 listed [0 2 1], rank 0 listed [0 1 2]") {
			return fmt.Errorf("mismatched lists: %v", err)
		}
		// The parent still makes groups afterwards.
		g, err = c.CreateGroup(ctx, []int{2, 0, 1})
		if err != nil {
			return err
		}
		defer g.Close()
		if g.Rank() != (me+1)%3 {
			return fmt.Errorf("rank %d of [2 0 1] is %d", me, g.Rank())
		}
		return comm.Barrier(ctx, g)
	})
}

// TestBcastVar: the other ranks learn root's length and data, reusing
// their buffer when it is large enough, for lengths 0, small and large
// (rendezvous sized) over each transport.
func TestBcastVar(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 3, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				for i, n := range []int{0, 5, 100000} {
					root := i % c.Size()
					var buf []float64
					if c.Rank() == root {
						buf = make([]float64, n)
						for j := range buf {
							buf[j] = float64(j*7 + root)
						}
					} else if c.Rank() == 1 {
						buf = make([]float64, 3, 8) // too small for n=100000, enough for 5
					}
					out, err := comm.BcastVar(ctx, c, buf, root)
					if err != nil {
						return err
					}
					if len(out) != n {
						return fmt.Errorf("n=%d root=%d: got %d elements", n, root, len(out))
					}
					for j, x := range out {
						if x != float64(j*7+root) {
							return fmt.Errorf("n=%d root=%d: element %d is %v", n, root, j, x)
						}
					}
					if c.Rank() == 1 && n <= 8 && n > 0 && &out[0] != &buf[:1][0] {
						return fmt.Errorf("n=%d: a buffer with capacity 8 was not reused", n)
					}
				}
				_, err := comm.BcastVar(ctx, c, []byte("x"), 7)
				if !errors.Is(err, comm.ErrInvalidRank) && !errors.Is(err, comm.ErrInvalidArgument) {
					return fmt.Errorf("root 7 of 3: %v", err)
				}
				return comm.Barrier(ctx, c)
			})
		})
	}
}

// TestCreateGroupOtherLowest: lists whose lowest ranks differ cannot be
// compared by one rank; each caller waits until its ctx ends and says
// what it waited for and why it may be.
func TestCreateGroupOtherLowest(t *testing.T) {
	runOK(t, 3, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		var list []int
		switch c.Rank() {
		case 0:
			return nil // not asked
		case 1:
			list = []int{1, 2}
		case 2:
			list = []int{0, 1, 2}
		}
		tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		g, err := c.CreateGroup(tctx, list)
		if err == nil {
			g.Close()
			return fmt.Errorf("lists [1 2] and [0 1 2] made a communicator on rank %d", c.Rank())
		}
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "did every listed rank pass the same list?") {
			return fmt.Errorf("rank %d: %v", c.Rank(), err)
		}
		return nil
	})
}
