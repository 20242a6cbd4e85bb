package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// everyNonBlocking starts the non-blocking forms added beside the first
// seven, all at once, collects them with WaitAny (in completion order) and
// checks each result against the serial reference.
func everyNonBlocking(ctx context.Context, c *comm.Comm, n int) error {
	p, me := c.Size(), c.Rank()
	root := (n + 2) % p
	mine := func(salt int) []int64 { return input(me, n, salt) }
	counts := vcounts(p, n)
	total := prefixSums(counts)
	sc := func(i, j int) int { return (i + j + n) % 4 }
	scounts, rcounts := make([]int, p), make([]int, p)
	for j := range p {
		scounts[j], rcounts[j] = sc(me, j), sc(j, me)
	}
	sp, rp := prefixSums(scounts), prefixSums(rcounts)

	arInto := make([]int64, n)
	rdInto := make([]int64, n)
	agIn := make([]int64, p*n)
	copy(agIn[me*n:], mine(32))
	agv := make([]int64, total[p])
	rsIn := input(me, p*n, 34)
	var ga, gav []int64
	if me == root {
		ga, gav = make([]int64, p*n), make([]int64, total[p])
	}
	var scSend, scvSend []int64
	if me == root {
		scSend, scvSend = input(root, p*n, 37), input(root, total[p], 38)
	}
	scRecv, scvRecv := make([]int64, n), make([]int64, counts[me])
	a2aIn := input(me, p*n, 39)
	a2av := make([]int64, rp[p])
	scan, exscan := mine(41), mine(43)
	scanInto, exscanInto := make([]int64, n), make([]int64, n)

	type check struct {
		name  string
		start func() (*comm.Request, error)
		check func() error
	}
	checks := []check{
		{"iallreduce into", func() (*comm.Request, error) { return comm.IallreduceInto(ctx, c, mine(30), arInto, comm.Sum) },
			func() error { return eq("iallreduce into", arInto, fold(p, n, 30, p, add)) }},
		{"ireduce into", func() (*comm.Request, error) { return comm.IreduceInto(ctx, c, mine(31), rdInto, comm.Sum, root) },
			func() error {
				if me != root {
					return nil
				}
				return eq("ireduce into", rdInto, fold(p, n, 31, p, add))
			}},
		{"iallgather in place", func() (*comm.Request, error) { return comm.IallgatherInPlace(ctx, c, agIn) },
			func() error {
				var all []int64
				for r := range p {
					all = append(all, input(r, n, 32)...)
				}
				return eq("iallgather in place", agIn, all)
			}},
		{"iallgatherv", func() (*comm.Request, error) {
			return comm.Iallgatherv(ctx, c, input(me, counts[me], 33), agv, counts)
		}, func() error {
			var all []int64
			for r := range p {
				all = append(all, input(r, counts[r], 33)...)
			}
			return eq("iallgatherv", agv, all)
		}},
		{"ireduce-scatter in place", func() (*comm.Request, error) { return comm.IreduceScatterInPlace(ctx, c, rsIn, comm.Sum) },
			func() error { return eq("ireduce-scatter in place", rsIn[:n], fold(p, p*n, 34, p, add)[me*n:(me+1)*n]) }},
		{"igather", func() (*comm.Request, error) { return comm.Igather(ctx, c, mine(35), ga, root) },
			func() error {
				if me != root {
					return nil
				}
				var all []int64
				for r := range p {
					all = append(all, input(r, n, 35)...)
				}
				return eq("igather", ga, all)
			}},
		{"igatherv", func() (*comm.Request, error) {
			return comm.Igatherv(ctx, c, input(me, counts[me], 36), gav, counts, root)
		}, func() error {
			if me != root {
				return nil
			}
			var all []int64
			for r := range p {
				all = append(all, input(r, counts[r], 36)...)
			}
			return eq("igatherv", gav, all)
		}},
		{"iscatter", func() (*comm.Request, error) { return comm.Iscatter(ctx, c, scSend, scRecv, root) },
			func() error { return eq("iscatter", scRecv, input(root, p*n, 37)[me*n:(me+1)*n]) }},
		{"iscatterv", func() (*comm.Request, error) { return comm.Iscatterv(ctx, c, scvSend, counts, scvRecv, root) },
			func() error { return eq("iscatterv", scvRecv, input(root, total[p], 38)[total[me]:total[me+1]]) }},
		{"ialltoall in place", func() (*comm.Request, error) { return comm.IalltoallInPlace(ctx, c, a2aIn) },
			func() error {
				var a2a []int64
				for r := range p {
					a2a = append(a2a, input(r, p*n, 39)[me*n:(me+1)*n]...)
				}
				return eq("ialltoall in place", a2aIn, a2a)
			}},
		{"ialltoallv", func() (*comm.Request, error) {
			return comm.Ialltoallv(ctx, c, input(me, sp[p], 40), scounts, a2av, rcounts)
		}, func() error {
			var a2a []int64
			for i := range p {
				ic := make([]int, p)
				for j := range p {
					ic[j] = sc(i, j)
				}
				ip := prefixSums(ic)
				a2a = append(a2a, input(i, ip[p], 40)[ip[me]:ip[me+1]]...)
			}
			return eq("ialltoallv", a2av, a2a)
		}},
		{"iscan", func() (*comm.Request, error) { return comm.Iscan(ctx, c, scan, comm.Sum) },
			func() error { return eq("iscan", scan, fold(p, n, 41, me+1, add)) }},
		{"iscan into", func() (*comm.Request, error) { return comm.IscanInto(ctx, c, mine(42), scanInto, comm.Sum) },
			func() error { return eq("iscan into", scanInto, fold(p, n, 42, me+1, add)) }},
		{"iexscan", func() (*comm.Request, error) { return comm.Iexscan(ctx, c, exscan, comm.Sum) },
			func() error {
				if me == 0 {
					return eq("iexscan rank 0 unchanged", exscan, mine(43))
				}
				return eq("iexscan", exscan, fold(p, n, 43, me, add))
			}},
		{"iexscan into", func() (*comm.Request, error) { return comm.IexscanInto(ctx, c, mine(44), exscanInto, comm.Sum) },
			func() error {
				if me == 0 {
					return eq("iexscan into rank 0", exscanInto, mine(44))
				}
				return eq("iexscan into", exscanInto, fold(p, n, 44, me, add))
			}},
	}
	reqs := make([]*comm.Request, len(checks))
	for i, ch := range checks {
		r, err := ch.start()
		if err != nil {
			return fmt.Errorf("%s: %w", ch.name, err)
		}
		reqs[i] = r
	}
	for range checks {
		i, _, err := comm.WaitAny(ctx, reqs...)
		if err != nil {
			return fmt.Errorf("%s: %w", checks[i].name, err)
		}
		if err := checks[i].check(); err != nil {
			return err
		}
		reqs[i] = nil
	}
	if i, _, err := comm.WaitAny(ctx, reqs...); i != -1 || err != nil {
		return fmt.Errorf("WaitAny over nil requests: %d %v", i, err)
	}
	return nil
}

func TestNonBlockingCollectives(t *testing.T) {
	for _, tr := range transports {
		for _, p := range []int{1, 2, 3} {
			t.Run(fmt.Sprintf("%s/ranks=%d", tr, p), func(t *testing.T) {
				runOK(t, p, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
					for _, n := range []int{0, 1, 7, 3000} {
						if err := everyNonBlocking(ctx, c, n); err != nil {
							return fmt.Errorf("n=%d: %w", n, err)
						}
					}
					return nil
				})
			})
		}
	}
}

// TestNonBlockingMismatch: a rank whose count differs gets ErrMismatch
// from the request naming both ranks, and so do the others, as with the
// blocking forms; the communicator is usable afterwards.
func TestNonBlockingMismatch(t *testing.T) {
	runOK(t, 3, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		n := 4
		if c.Rank() == 1 {
			n = 5
		}
		for _, start := range []struct {
			op string
			fn func() (*comm.Request, error)
		}{
			{"Iscan", func() (*comm.Request, error) { return comm.Iscan(ctx, c, make([]int32, n), comm.Sum) }},
			{"Iexscan", func() (*comm.Request, error) { return comm.Iexscan(ctx, c, make([]int32, n), comm.Sum) }},
			{"IallreduceInto", func() (*comm.Request, error) {
				return comm.IallreduceInto(ctx, c, make([]int32, n), make([]int32, n), comm.Sum)
			}},
		} {
			r, err := start.fn()
			if err != nil {
				return err
			}
			_, err = r.Wait(ctx)
			if !errors.Is(err, comm.ErrMismatch) {
				return fmt.Errorf("%s: want ErrMismatch, got %v", start.op, err)
			}
			var me *collectives.MismatchError
			var oe *comm.OpError
			if !errors.As(err, &me) || !errors.As(err, &oe) || oe.Op != start.op {
				return fmt.Errorf("%s: not a MismatchError in an OpError of the op: %v", start.op, err)
			}
			if !strings.Contains(err.Error(), "rank 1 has 5 elements") {
				return fmt.Errorf("%s: message does not say who: %v", start.op, err)
			}
		}
		return comm.Barrier(ctx, c)
	})
}

// TestWaitAnyMixed: WaitAny and TestAny over point-to-point and
// collective requests together, from two communicators: the request that
// can complete is found while the others stay pending.
func TestWaitAnyMixed(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			runOK(t, 2, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				d, err := c.Dup(ctx)
				if err != nil {
					return err
				}
				defer d.Close()
				peer := 1 - c.Rank()
				if i, _, done, err := comm.TestAny(nil, nil); i != -1 || !done || err != nil {
					return fmt.Errorf("TestAny over nils: %d %v %v", i, done, err)
				}
				// A receive nobody sends to yet, a barrier on d that rank 1
				// enters late, and an allreduce on c.
				got := make([]int64, 1)
				rr, err := comm.Irecv(ctx, c, got, peer, 11)
				if err != nil {
					return err
				}
				var bar *comm.Request
				if c.Rank() == 0 {
					if bar, err = comm.Ibarrier(ctx, d); err != nil {
						return err
					}
				}
				sum := []int64{int64(c.Rank() + 1)}
				ar, err := comm.Iallreduce(ctx, c, sum, comm.Sum)
				if err != nil {
					return err
				}
				reqs := []*comm.Request{rr, bar, ar}
				i, _, err := comm.WaitAny(ctx, reqs...)
				if err != nil || i != 2 || sum[0] != 3 {
					return fmt.Errorf("WaitAny: index %d err %v sum %v, want the allreduce (2) with 3", i, err, sum)
				}
				reqs[2] = nil
				if i, _, done, _ := comm.TestAny(reqs...); done {
					return fmt.Errorf("TestAny: request %d done before its peer took part", i)
				}
				// Now rank 1 joins the barrier (once rank 0 has tested), then
				// sends.
				if c.Rank() == 0 {
					if err := comm.Send(ctx, c, []byte("go"), peer, 13); err != nil {
						return err
					}
				}
				if c.Rank() == 1 {
					if _, err := comm.Recv(ctx, c, make([]byte, 2), peer, 13); err != nil {
						return err
					}
					if err := comm.Barrier(ctx, d); err != nil {
						return err
					}
					st, err := rr.Wait(ctx)
					if err != nil || st.Count != 1 || got[0] != 42 {
						return fmt.Errorf("rank 1's receive: %+v %v %v", st, err, got)
					}
					return comm.Send(ctx, c, []int64{42}, peer, 11)
				}
				i, _, err = comm.WaitAny(ctx, reqs...)
				if err != nil || i != 1 {
					return fmt.Errorf("WaitAny after the barrier: index %d err %v, want 1", i, err)
				}
				reqs[1] = nil
				if err := comm.Send(ctx, c, []int64{42}, peer, 11); err != nil {
					return err
				}
				i, st, err := comm.WaitAny(ctx, reqs...)
				if err != nil || i != 0 || st.Source != 1 || st.Count != 1 || got[0] != 42 {
					return fmt.Errorf("WaitAny for the receive: index %d %+v err %v got %v", i, st, err, got)
				}
				// A WaitAny whose ctx ends names it.
				rr2, err := comm.Irecv(ctx, c, got, peer, 12)
				if err != nil {
					return err
				}
				dctx, cancel := context.WithTimeout(ctx, 30e6)
				defer cancel()
				if _, _, err := comm.WaitAny(dctx, rr2); !errors.Is(err, context.DeadlineExceeded) {
					return fmt.Errorf("WaitAny past its deadline: %v", err)
				}
				rr2.Cancel()
				_, err = rr2.Wait(ctx)
				if !errors.Is(err, comm.ErrCanceled) {
					return fmt.Errorf("canceled receive: %v", err)
				}
				return nil
			})
		})
	}
}

// TestNonBlockingWaitRunsInline: a Wait with the ctx the collective started
// with (or one that never ends) runs a collective whose goroutine has not
// begun on the waiting goroutine; a Wait whose ctx may end sooner leaves
// it to the goroutine, so that it returns when its ctx ends while the
// collective goes on (here: until the peer joins).
func TestNonBlockingWaitRunsInline(t *testing.T) {
	runOK(t, 2, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		buf := make([]float64, 4)
		inline := 0
		for range 200 {
			r, err := comm.Iallreduce(ctx, c, buf, comm.Sum)
			if err != nil {
				return err
			}
			if _, err := r.Wait(ctx); err != nil {
				return err
			}
			if comm.RanInline(r) {
				inline++
			}
		}
		if inline == 0 {
			return errors.New("no Wait with the start ctx ran its collective")
		}
		for range 20 {
			r, err := comm.Iallreduce(ctx, c, buf, comm.Sum)
			if err != nil {
				return err
			}
			wctx, cancel := context.WithCancel(ctx)
			_, err = r.Wait(wctx)
			cancel()
			if err != nil {
				return err
			}
			if comm.RanInline(r) {
				return errors.New("a Wait with a ctx of its own ran the collective")
			}
		}
		// Rank 1 joins only after rank 0's short Wait has given up.
		if c.Rank() == 0 {
			r, err := comm.Iallreduce(ctx, c, buf, comm.Sum)
			if err != nil {
				return err
			}
			short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			_, err = r.Wait(short)
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) || comm.RanInline(r) {
				return fmt.Errorf("a Wait whose ctx ended first: got %v (inline %v), want its deadline", err, comm.RanInline(r))
			}
			if err := comm.Send(ctx, c, []int32{1}, 1, 7); err != nil {
				return err
			}
			_, err = r.Wait(ctx)
			return err
		}
		if _, err := comm.Recv(ctx, c, make([]int32, 1), 0, 7); err != nil {
			return err
		}
		return comm.Allreduce(ctx, c, buf, comm.Sum)
	})
}
