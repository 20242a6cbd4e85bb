// Command xcheck is the rank program of the cross-host tests: it moves data
// between every pair of ranks and checks every element it receives.
//
//	rdmarun -np 4 --host a:2,b:2 --launch-agent '...' xcheck
//
// Each rank runs the collectives (allreduce, reduce, bcast, allgather,
// reduce-scatter, alltoall, barrier) at a small and a large size (the
// large one takes p2p's rendezvous path), then sends to and receives from
// every other rank, both ways, then prints one line naming its host and the
// transport chosen for each peer:
//
//	xcheck rank=1 size=4 host=h1 hostidx=0 peers=0:shm@0,1:self@0,2:tcp@1,3:tcp@1 ok
//
// With -soak D it then runs random verified operations for D as well
// (internal/soak: collectives, windows of mixed sizes, sub-communicators;
// every rank draws the same sequence from rank 0's seed) and prints
//
//	xcheck soak rank=1 rounds=412 ok
//
// A wrong element or a failed call prints what went wrong and exits 1.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/internal/soak"
)

func main() {
	large := flag.Int("large", 300_000, "elements of the large round (float64)")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	soakFor := flag.Duration("soak", 0, "after the checks, run random verified operations for this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	if err := run(ctx, *large, *soakFor); err != nil {
		fmt.Fprintf(os.Stderr, "xcheck: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, large int, soakFor time.Duration) error {
	c, err := comm.FromEnv(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, n := range []int{7, large} {
		if err := collectives(ctx, c, n); err != nil {
			return fmt.Errorf("rank %d, %d elements: %w", c.Rank(), n, err)
		}
		if err := pointToPoint(ctx, c, n); err != nil {
			return fmt.Errorf("rank %d, %d elements: %w", c.Rank(), n, err)
		}
	}
	if err := comm.Barrier(ctx, c); err != nil {
		return err
	}
	me, err := c.Peer(c.Rank())
	if err != nil {
		return err
	}
	var peers []string
	for r := range c.Size() {
		p, err := c.Peer(r)
		if err != nil {
			return err
		}
		peers = append(peers, fmt.Sprintf("%d:%s@%d", r, p.Transport, p.HostIndex))
	}
	fmt.Printf("xcheck rank=%d size=%d host=%s hostidx=%d peers=%s ok\n", c.Rank(), c.Size(), me.Host, me.HostIndex, strings.Join(peers, ","))
	if soakFor <= 0 {
		return nil
	}
	rounds, err := soak.Run(ctx, c, soakFor, 0, nil)
	if err != nil {
		return fmt.Errorf("rank %d, soak: %w", c.Rank(), err)
	}
	fmt.Printf("xcheck soak rank=%d rounds=%d ok\n", c.Rank(), rounds)
	return nil
}

// val is the element rank r contributes at index i: integer-valued, so
// sums are exact in any order.
func val(r, i int) float64 { return float64((r+1)*1000 + i%997) }

func check(what string, got []float64, want func(i int) float64) error {
	for i, g := range got {
		if w := want(i); g != w {
			return fmt.Errorf("%s: element %d of %d is %v, want %v", what, i, len(got), g, w)
		}
	}
	return nil
}

func collectives(ctx context.Context, c *comm.Comm, n int) error {
	p, me := c.Size(), c.Rank()
	sum := func(i int) float64 {
		var s float64
		for r := range p {
			s += val(r, i)
		}
		return s
	}
	mine := func(i int) float64 { return val(me, i) }

	buf := make([]float64, n)
	fill(buf, mine)
	if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	if err := check("allreduce", buf, sum); err != nil {
		return err
	}

	root := p - 1
	fill(buf, mine)
	if err := comm.Reduce(ctx, c, buf, comm.Sum, root); err != nil {
		return err
	}
	if me == root {
		if err := check("reduce", buf, sum); err != nil {
			return err
		}
	}

	if me == root {
		fill(buf, mine)
	} else {
		clear(buf)
	}
	if err := comm.Bcast(ctx, c, buf, root); err != nil {
		return err
	}
	if err := check("bcast", buf, func(i int) float64 { return val(root, i) }); err != nil {
		return err
	}

	all := make([]float64, n*p)
	fill(buf, mine)
	if err := comm.Allgather(ctx, c, buf, all); err != nil {
		return err
	}
	if err := check("allgather", all, func(i int) float64 { return val(i/n, i%n) }); err != nil {
		return err
	}

	// Reduce-scatter: block b of the result goes to rank b.
	send := make([]float64, n*p)
	fill(send, func(i int) float64 { return val(me, i) })
	if err := comm.ReduceScatter(ctx, c, send, buf, comm.Sum); err != nil {
		return err
	}
	if err := check("reduce_scatter", buf, func(i int) float64 { return sum(me*n + i) }); err != nil {
		return err
	}

	// Alltoall: block b of rank r's send goes to rank b as its block r.
	fill(send, func(i int) float64 { return float64(me*1_000_000+(i/n)*10_000) + float64(i%n%997) })
	recv := make([]float64, n*p)
	if err := comm.Alltoall(ctx, c, send, recv); err != nil {
		return err
	}
	if err := check("alltoall", recv, func(i int) float64 { return float64((i/n)*1_000_000+me*10_000) + float64(i%n%997) }); err != nil {
		return err
	}
	return comm.Barrier(ctx, c)
}

// pointToPoint sends to every other rank and receives from every other
// rank at once, so each pair carries data both ways; each message's values
// name its sender and receiver.
func pointToPoint(ctx context.Context, c *comm.Comm, n int) error {
	return soak.Exchange(ctx, c, 11, 1, func(int, int, int) int { return n },
		func(from, to, _, i int) int64 { return int64(from*100+to)<<20 + int64(i%991) })
}

func fill(b []float64, f func(i int) float64) {
	for i := range b {
		b[i] = f(i)
	}
}
