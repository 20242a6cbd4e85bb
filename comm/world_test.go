package comm_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// Ranks that report different hosts: LocalRank / LocalSize / Peer follow
// the host map, and the hierarchical algorithms (which need the Topology)
// give the right answers (allreduce; reduce to a host's leader and to
// another rank).
func TestTopology(t *testing.T) {
	const p = 5
	hosts := []string{"a", "a", "b", "a", "b"}
	per := func(r int, o *comm.Options) { o.Hostname = hosts[r] }
	o := comm.Options{NoEnv: true, Collectives: collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{
		collectives.CollAllreduce: collectives.Hierarchical, collectives.CollReduce: collectives.Hierarchical}}}
	errs := runWith(t, p, o, per, func(ctx context.Context, c *comm.Comm) error {
		me := c.Rank()
		wantLocal := map[int][2]int{0: {0, 3}, 1: {1, 3}, 2: {0, 2}, 3: {2, 3}, 4: {1, 2}}[me]
		if c.LocalRank() != wantLocal[0] || c.LocalSize() != wantLocal[1] {
			return fmt.Errorf("local %d/%d, want %v", c.LocalRank(), c.LocalSize(), wantLocal)
		}
		for r := range p {
			pr, err := c.Peer(r)
			if err != nil {
				return err
			}
			if pr.Host != hosts[r] || (pr.HostIndex == 0) != (hosts[r] == "a") || pr.WorldRank != r {
				return fmt.Errorf("peer %d: %+v", r, pr)
			}
			if (r == me) != (pr.Transport == "self") {
				return fmt.Errorf("peer %d transport %q", r, pr.Transport)
			}
		}
		if _, err := c.Peer(p); !errors.Is(err, comm.ErrInvalidRank) {
			return fmt.Errorf("Peer(%d): %v", p, err)
		}
		for _, n := range []int{1, 1000, 50000} {
			buf := input(me, n, 9)
			if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
				return err
			}
			if c.LastAlgorithm() != "hierarchical" {
				return fmt.Errorf("ran %s", c.LastAlgorithm())
			}
			if err := eq("hierarchical allreduce", buf, fold(p, n, 9, p, add)); err != nil {
				return err
			}
			// The reduce's root a host's leader, and not.
			for _, root := range []int{2, 3} {
				buf := input(me, n, 9)
				if err := comm.Reduce(ctx, c, buf, comm.Sum, root); err != nil {
					return err
				}
				if c.LastAlgorithm() != "hierarchical" {
					return fmt.Errorf("reduce ran %s", c.LastAlgorithm())
				}
				want := input(me, n, 9)
				if me == root {
					want = fold(p, n, 9, p, add)
				}
				if err := eq(fmt.Sprintf("hierarchical reduce to %d", root), buf, want); err != nil {
					return err
				}
			}
		}
		// A split keeps the host map: the ranks on host b.
		sub, err := c.Split(ctx, map[bool]int{true: 1, false: 0}[hosts[me] == "b"], 0)
		if err != nil {
			return err
		}
		defer sub.Close()
		if sub.LocalSize() != sub.Size() || sub.LocalRank() != sub.Rank() {
			return fmt.Errorf("one-host split: local %d/%d, rank %d/%d", sub.LocalRank(), sub.LocalSize(), sub.Rank(), sub.Size())
		}
		st := c.Stats()
		if len(st.Peers) != p {
			return fmt.Errorf("stats for %d peers", len(st.Peers))
		}
		var msgs uint64
		for _, ps := range st.Peers {
			msgs += ps.EagerSent.Msgs + ps.RndvSent.Msgs
		}
		if p > 1 && msgs == 0 {
			return errors.New("stats count no messages")
		}
		return nil
	})
	requireOK(t, errs)
}

// Blocking collectives issued while non-blocking ones are pending run
// after them, in call order; a collective whose ctx ends while it waits
// for its turn fails without blocking the ones after it.
func TestCollectiveOrder(t *testing.T) {
	const p = 3
	runOK(t, p, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		a := input(c.Rank(), 20000, 1)
		ra, err := comm.Iallreduce(ctx, c, a, comm.Sum)
		if err != nil {
			return err
		}
		b := input(c.Rank(), 10, 2)
		if err := comm.Allreduce(ctx, c, b, comm.Sum); err != nil {
			return err
		}
		if _, err := ra.Wait(ctx); err != nil {
			return err
		}
		if err := eq("first", a, fold(p, 20000, 1, p, add)); err != nil {
			return err
		}
		if err := eq("second", b, fold(p, 10, 2, p, add)); err != nil {
			return err
		}
		// Wait with an ended ctx returns at once; the request stays usable.
		rb, err := comm.Ibarrier(ctx, c)
		if err != nil {
			return err
		}
		done, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := rb.Wait(done); err == nil {
			// It may have completed already; that is fine too.
			_, ok, _ := rb.Test()
			if !ok {
				return errors.New("Wait returned nil on an unfinished request")
			}
		} else if !errors.Is(err, context.Canceled) {
			return fmt.Errorf("Wait(canceled): %v", err)
		}
		_, err = rb.Wait(ctx)
		return err
	})
}

// A job whose ranks join a rendezvous server themselves (Init with an
// address; no launcher): Abort on one rank fails the others' pending
// receive with ErrAborted naming the rank and code.
func TestAbortWithServer(t *testing.T) {
	const p, aborter = 3, 1
	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: p})
	require.NoError(t, err)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exited := make(chan int, 1)
	errs := make([]error, p)
	var wg, others sync.WaitGroup
	others.Add(p - 1)
	for r := range p {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r != aborter {
				defer others.Done()
			}
			errs[r] = func() error {
				c, err := comm.Init(ctx, comm.WithExit(comm.Options{Addr: srv.Addr(), Token: token, Rank: r, Size: p,
					Transport: "tcp", NoEnv: true}, func(code int) { exited <- code }))
				if err != nil {
					return err
				}
				defer c.Close()
				// The aborter may leave the barrier (and abort) before
				// the others have: then their barrier fails with the abort.
				err = comm.Barrier(ctx, c)
				if r == aborter {
					if err != nil {
						return err
					}
					c.Abort(4)
					// A real Abort never returns; here Exit did. Do not
					// say goodbye (Close) before the others have seen
					// the abort.
					others.Wait()
					return nil
				}
				if err == nil {
					_, err = comm.Recv(ctx, c, make([]byte, 1), aborter, 0)
				}
				if !errors.Is(err, comm.ErrAborted) {
					return fmt.Errorf("want ErrAborted, got %v", err)
				}
				var ae *bootstrap.AbortError
				if !errors.As(err, &ae) || ae.Info.Rank != aborter || ae.Info.Code != 4 {
					return fmt.Errorf("abort info: %v", err)
				}
				// Later operations fail the same way.
				if err := comm.Barrier(ctx, c); !errors.Is(err, comm.ErrAborted) {
					return fmt.Errorf("barrier after abort: %v", err)
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	assert.Equal(t, 4, <-exited)
	select {
	case info := <-srv.Aborts():
		assert.Equal(t, aborter, info.Rank)
		assert.Equal(t, 4, info.Code)
	case <-time.After(5 * time.Second):
		t.Fatal("the server did not learn of the abort")
	}
}

// After Close, no goroutine of the stack is left behind.
func TestNoLeaks(t *testing.T) {
	runOK(t, 4, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		d, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		s, err := c.Split(ctx, c.Rank()%2, 0)
		if err != nil {
			return err
		}
		r, err := comm.Iallreduce(ctx, d, make([]float32, 100), comm.Sum)
		if err != nil {
			return err
		}
		if _, err := r.Wait(ctx); err != nil {
			return err
		}
		_ = s // closed by the world's Close
		return comm.Allreduce(ctx, c, make([]float32, 100000), comm.Sum)
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		buf := make([]byte, 1<<20)
		stacks := string(buf[:runtime.Stack(buf, true)])
		var left []string
		for _, g := range strings.Split(stacks, "\n\n") {
			if strings.Contains(g, "rdmago/comm.") || strings.Contains(g, "rdmago/p2p.") || strings.Contains(g, "rdmago/collectives.") {
				if !strings.Contains(g, "TestNoLeaks") {
					left = append(left, g)
				}
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
