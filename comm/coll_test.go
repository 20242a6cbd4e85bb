package comm_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
)

// input is rank r's deterministic contribution: every rank can compute
// every other rank's, so the serial reference needs no communication.
func input(r, n, salt int) []int64 {
	v := make([]int64, n)
	for i := range v {
		v[i] = int64((r+1)*(i+salt)%97 - 40)
	}
	return v
}

func fold(p, n, salt int, upto int, op func(a, b int64) int64) []int64 {
	out := input(0, n, salt)
	for r := 1; r < upto; r++ {
		in := input(r, n, salt)
		for i := range out {
			out[i] = op(out[i], in[i])
		}
	}
	return out
}

func add(a, b int64) int64 { return a + b }

func eq[T comparable](what string, got, want []T) error {
	if !slices.Equal(got, want) {
		if len(got) > 12 {
			return fmt.Errorf("%s: got %d elements, want %d; first difference at %d", what, len(got), len(want), firstDiff(got, want))
		}
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

func firstDiff[T comparable](a, b []T) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// counts for the v-variants: rank r contributes (r*3+n)%5 elements.
func vcounts(p, n int) []int {
	c := make([]int, p)
	for r := range c {
		c[r] = (r*3 + n) % 5
	}
	return c
}

func prefixSums(c []int) []int {
	out := make([]int, len(c)+1)
	for i, x := range c {
		out[i+1] = out[i] + x
	}
	return out
}

// everyCollective runs every collective of comm on c with vectors of n
// elements and checks each result against the serial reference.
func everyCollective(ctx context.Context, c *comm.Comm, n int) error {
	p, me := c.Size(), c.Rank()
	root := (n + 1) % p
	mine := func(salt int) []int64 { return input(me, n, salt) }

	if err := comm.Barrier(ctx, c); err != nil {
		return err
	}
	// Bcast.
	buf := make([]int64, n)
	if me == root {
		buf = mine(1)
	}
	if err := comm.Bcast(ctx, c, buf, root); err != nil {
		return err
	}
	if err := eq("bcast", buf, input(root, n, 1)); err != nil {
		return err
	}
	// Allreduce, in place and out of place.
	sum := fold(p, n, 2, p, add)
	buf = mine(2)
	if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	if err := eq("allreduce", buf, sum); err != nil {
		return err
	}
	send, recv := mine(2), make([]int64, n)
	if err := comm.AllreduceInto(ctx, c, send, recv, comm.Sum); err != nil {
		return err
	}
	if err := eq("allreduce into", recv, sum); err != nil {
		return err
	}
	if err := eq("allreduce into: send unchanged", send, mine(2)); err != nil {
		return err
	}
	// Max over float32 and a user-defined op (non-commutative: keeps rank
	// order, "take the right operand" gives the last rank's value).
	fb := make([]float32, n)
	for i, x := range mine(3) {
		fb[i] = float32(x)
	}
	if err := comm.Allreduce(ctx, c, fb, comm.Max); err != nil {
		return err
	}
	for i, x := range fold(p, n, 3, p, func(a, b int64) int64 { return max(a, b) }) {
		if fb[i] != float32(x) {
			return fmt.Errorf("allreduce max: element %d is %v, want %v", i, fb[i], x)
		}
	}
	last := comm.NewOp("right", false, func(inout, in []int64) { copy(inout, in) })
	buf = mine(4)
	if err := comm.Allreduce(ctx, c, buf, last); err != nil {
		return err
	}
	if err := eq("allreduce user op", buf, input(p-1, n, 4)); err != nil {
		return err
	}
	// Reduce, in place and out of place.
	buf = mine(5)
	if err := comm.Reduce(ctx, c, buf, comm.Sum, root); err != nil {
		return err
	}
	want := mine(5)
	if me == root {
		want = fold(p, n, 5, p, add)
	}
	if err := eq("reduce", buf, want); err != nil {
		return err
	}
	send = mine(5)
	recv = nil
	if me == root {
		recv = make([]int64, n)
	}
	if err := comm.ReduceInto(ctx, c, send, recv, comm.Sum, root); err != nil {
		return err
	}
	if me == root {
		if err := eq("reduce into", recv, fold(p, n, 5, p, add)); err != nil {
			return err
		}
	}
	if err := eq("reduce into: send unchanged", send, mine(5)); err != nil {
		return err
	}
	// Allgather, in place; Allgatherv.
	var all []int64
	for r := range p {
		all = append(all, input(r, n, 6)...)
	}
	recv = make([]int64, p*n)
	if err := comm.Allgather(ctx, c, mine(6), recv); err != nil {
		return err
	}
	if err := eq("allgather", recv, all); err != nil {
		return err
	}
	recv = make([]int64, p*n)
	copy(recv[me*n:], mine(6))
	if err := comm.AllgatherInPlace(ctx, c, recv); err != nil {
		return err
	}
	if err := eq("allgather in place", recv, all); err != nil {
		return err
	}
	counts := vcounts(p, n)
	all = nil
	for r := range p {
		all = append(all, input(r, counts[r], 7)...)
	}
	recv = make([]int64, len(all))
	if err := comm.Allgatherv(ctx, c, input(me, counts[me], 7), recv, counts); err != nil {
		return err
	}
	if err := eq("allgatherv", recv, all); err != nil {
		return err
	}
	// ReduceScatter, in place.
	full := fold(p, p*n, 8, p, add)
	recv = make([]int64, n)
	if err := comm.ReduceScatter(ctx, c, input(me, p*n, 8), recv, comm.Sum); err != nil {
		return err
	}
	if err := eq("reduce-scatter", recv, full[me*n:(me+1)*n]); err != nil {
		return err
	}
	buf = input(me, p*n, 8)
	if err := comm.ReduceScatterInPlace(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	if err := eq("reduce-scatter in place", buf[:n], full[me*n:(me+1)*n]); err != nil {
		return err
	}
	// Gather, Gatherv.
	recv = nil
	if me == root {
		recv = make([]int64, p*n)
	}
	if err := comm.Gather(ctx, c, mine(9), recv, root); err != nil {
		return err
	}
	if me == root {
		all = nil
		for r := range p {
			all = append(all, input(r, n, 9)...)
		}
		if err := eq("gather", recv, all); err != nil {
			return err
		}
	}
	all = nil
	for r := range p {
		all = append(all, input(r, counts[r], 10)...)
	}
	recv = nil
	if me == root {
		recv = make([]int64, len(all))
	}
	if err := comm.Gatherv(ctx, c, input(me, counts[me], 10), recv, counts, root); err != nil {
		return err
	}
	if me == root {
		if err := eq("gatherv", recv, all); err != nil {
			return err
		}
	}
	// Scatter, Scatterv.
	send = nil
	if me == root {
		send = input(root, p*n, 11)
	}
	recv = make([]int64, n)
	if err := comm.Scatter(ctx, c, send, recv, root); err != nil {
		return err
	}
	if err := eq("scatter", recv, input(root, p*n, 11)[me*n:(me+1)*n]); err != nil {
		return err
	}
	total := prefixSums(counts)
	send = nil
	if me == root {
		send = input(root, total[p], 12)
	}
	recv = make([]int64, counts[me])
	if err := comm.Scatterv(ctx, c, send, counts, recv, root); err != nil {
		return err
	}
	if err := eq("scatterv", recv, input(root, total[p], 12)[total[me]:total[me+1]]); err != nil {
		return err
	}
	// Alltoall, in place; Alltoallv.
	var a2a []int64
	for r := range p {
		a2a = append(a2a, input(r, p*n, 13)[me*n:(me+1)*n]...)
	}
	recv = make([]int64, p*n)
	if err := comm.Alltoall(ctx, c, input(me, p*n, 13), recv); err != nil {
		return err
	}
	if err := eq("alltoall", recv, a2a); err != nil {
		return err
	}
	buf = input(me, p*n, 13)
	if err := comm.AlltoallInPlace(ctx, c, buf); err != nil {
		return err
	}
	if err := eq("alltoall in place", buf, a2a); err != nil {
		return err
	}
	// Alltoallv: rank i sends (i+j+n)%4 elements to rank j.
	sc := func(i, j int) int { return (i + j + n) % 4 }
	scounts, rcounts := make([]int, p), make([]int, p)
	for j := range p {
		scounts[j], rcounts[j] = sc(me, j), sc(j, me)
	}
	sp, rp := prefixSums(scounts), prefixSums(rcounts)
	recv = make([]int64, rp[p])
	if err := comm.Alltoallv(ctx, c, input(me, sp[p], 14), scounts, recv, rcounts); err != nil {
		return err
	}
	a2a = nil
	for i := range p {
		ic := make([]int, p)
		for j := range p {
			ic[j] = sc(i, j)
		}
		ip := prefixSums(ic)
		a2a = append(a2a, input(i, ip[p], 14)[ip[me]:ip[me+1]]...)
	}
	if err := eq("alltoallv", recv, a2a); err != nil {
		return err
	}
	// Scan, Exscan, in place and not.
	buf = mine(15)
	if err := comm.Scan(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	if err := eq("scan", buf, fold(p, n, 15, me+1, add)); err != nil {
		return err
	}
	recv = make([]int64, n)
	if err := comm.ScanInto(ctx, c, mine(15), recv, comm.Sum); err != nil {
		return err
	}
	if err := eq("scan into", recv, fold(p, n, 15, me+1, add)); err != nil {
		return err
	}
	buf = mine(16)
	if err := comm.Exscan(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	if me > 0 {
		if err := eq("exscan", buf, fold(p, n, 16, me, add)); err != nil {
			return err
		}
	}
	recv = make([]int64, n)
	if err := comm.ExscanInto(ctx, c, mine(16), recv, comm.Sum); err != nil {
		return err
	}
	if me > 0 {
		if err := eq("exscan into", recv, fold(p, n, 16, me, add)); err != nil {
			return err
		}
	}
	return nonBlocking(ctx, c, n)
}

// nonBlocking starts several non-blocking collectives at once, then
// checks them after waiting in reverse order.
func nonBlocking(ctx context.Context, c *comm.Comm, n int) error {
	p, me := c.Size(), c.Rank()
	root := p - 1
	ar := input(me, n, 20)
	bc := make([]int64, n)
	if me == root {
		bc = input(root, n, 21)
	}
	rd := input(me, n, 22)
	ag := make([]int64, p*n)
	rs := make([]int64, n)
	a2a := make([]int64, p*n)
	var reqs []*comm.Request
	for _, start := range []func() (*comm.Request, error){
		func() (*comm.Request, error) { return comm.Ibarrier(ctx, c) },
		func() (*comm.Request, error) { return comm.Iallreduce(ctx, c, ar, comm.Sum) },
		func() (*comm.Request, error) { return comm.Ibcast(ctx, c, bc, root) },
		func() (*comm.Request, error) { return comm.Ireduce(ctx, c, rd, comm.Sum, 0) },
		func() (*comm.Request, error) { return comm.Iallgather(ctx, c, input(me, n, 23), ag) },
		func() (*comm.Request, error) { return comm.IreduceScatter(ctx, c, input(me, p*n, 24), rs, comm.Sum) },
		func() (*comm.Request, error) { return comm.Ialltoall(ctx, c, input(me, p*n, 25), a2a) },
	} {
		r, err := start()
		if err != nil {
			return err
		}
		reqs = append(reqs, r)
	}
	slices.Reverse(reqs)
	if err := comm.WaitAll(ctx, reqs...); err != nil {
		return err
	}
	for _, r := range reqs {
		if _, done, err := r.Test(); !done || err != nil {
			return fmt.Errorf("Test after Wait: %v %v", done, err)
		}
	}
	if err := eq("iallreduce", ar, fold(p, n, 20, p, add)); err != nil {
		return err
	}
	if err := eq("ibcast", bc, input(root, n, 21)); err != nil {
		return err
	}
	if me == 0 {
		if err := eq("ireduce", rd, fold(p, n, 22, p, add)); err != nil {
			return err
		}
	}
	var all []int64
	for r := range p {
		all = append(all, input(r, n, 23)...)
	}
	if err := eq("iallgather", ag, all); err != nil {
		return err
	}
	if err := eq("ireduce-scatter", rs, fold(p, p*n, 24, p, add)[me*n:(me+1)*n]); err != nil {
		return err
	}
	var want []int64
	for r := range p {
		want = append(want, input(r, p*n, 25)[me*n:(me+1)*n]...)
	}
	return eq("ialltoall", a2a, want)
}

func TestCollectives(t *testing.T) {
	sizes := []int{0, 1, 7, 1000}
	for _, p := range rankCounts {
		t.Run(fmt.Sprintf("ranks=%d", p), func(t *testing.T) {
			runOK(t, p, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
				for _, n := range sizes {
					if err := everyCollective(ctx, c, n); err != nil {
						return fmt.Errorf("n=%d: %w", n, err)
					}
				}
				return nil
			})
		})
	}
}

// Forced algorithms reach the engine from Options and from the
// environment, and the world communicator offers what the one-sided and
// hierarchical algorithms need.
func TestAlgorithmOverrides(t *testing.T) {
	for _, alg := range []collectives.Algorithm{collectives.Ring, collectives.Rabenseifner, collectives.RingOneSided, collectives.Hierarchical, collectives.RecursiveDoubling} {
		t.Run(alg.String(), func(t *testing.T) {
			o := comm.Options{Collectives: collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{collectives.CollAllreduce: alg}}}
			p := 4
			runOK(t, p, o, func(ctx context.Context, c *comm.Comm) error {
				for _, n := range []int{1, 1000, 20000} {
					buf := input(c.Rank(), n, 1)
					if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
						return err
					}
					if got := c.LastAlgorithm(); got != alg.String() {
						return fmt.Errorf("ran %s, want %s", got, alg)
					}
					if err := eq("allreduce", buf, fold(p, n, 1, p, add)); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	t.Run("env", func(t *testing.T) {
		t.Setenv("RDMAGO_ALLREDUCE_ALGO", "ring")
		t.Setenv("RDMAGO_ALGORITHMS", "allreduce=rabenseifner,bcast=chain")
		stores := 3
		o := comm.Options{}
		errs := runEnv(t, stores, o, func(ctx context.Context, c *comm.Comm) error {
			buf := input(c.Rank(), 10, 1)
			if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
				return err
			}
			if got := c.LastAlgorithm(); got != "ring" {
				return fmt.Errorf("allreduce ran %s, want ring (RDMAGO_ALLREDUCE_ALGO wins)", got)
			}
			if err := comm.Bcast(ctx, c, buf, 0); err != nil {
				return err
			}
			if got := c.LastAlgorithm(); got != "chain" {
				return fmt.Errorf("bcast ran %s, want chain", got)
			}
			return nil
		})
		requireOK(t, errs)
	})
}

// TestAlltoallLargeBlocksLeaveSlots: on one host the alltoall of more than
// two ranks runs the shared-memory algorithm up to blocks of
// shm_alltoall_block_max (256 KiB) and the linear one past it, whose
// blocks go by p2p's rendezvous; both deliver every block.
func TestAlltoallLargeBlocksLeaveSlots(t *testing.T) {
	const p = 3
	for _, c := range []struct {
		block int // float64 elements
		want  string
	}{
		{256 << 10 / 8, "shared_memory"},
		{256<<10/8 + 1, "linear"},
	} {
		t.Run(fmt.Sprintf("block=%d", c.block*8), func(t *testing.T) {
			runOK(t, p, comm.Options{Transport: "shm"}, func(ctx context.Context, cm *comm.Comm) error {
				me := cm.Rank()
				send, recv := make([]float64, p*c.block), make([]float64, p*c.block)
				for i := range send {
					send[i] = float64(me*10_000_019 + i)
				}
				if err := comm.Alltoall(ctx, cm, send, recv); err != nil {
					return err
				}
				if got := cm.LastAlgorithm(); got != c.want {
					return fmt.Errorf("rank %d: the alltoall ran %s, want %s", me, got, c.want)
				}
				for i, v := range recv {
					src, j := i/c.block, i%c.block
					if want := float64(src*10_000_019 + me*c.block + j); v != want {
						return fmt.Errorf("rank %d: element %d is %v, want %v (block of rank %d)", me, i, v, want, src)
					}
				}
				return nil
			})
		})
	}
}
