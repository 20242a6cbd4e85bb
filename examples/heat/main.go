// Command heat solves the steady 2-D heat equation (Laplace's equation) on a
// square plate by Jacobi iteration, with the rows of the grid split among the
// ranks, and checks the answer against the serial solver run on rank 0.
//
//	go run ./cmd/rdmarun -np 4 ./examples/heat -n 128 -tol 1e-4
//
// The plate is n×n interior points; the top edge is held at 1, the other
// edges at 0. Each Jacobi sweep replaces every interior point by the mean of
// its four neighbours. A rank owns a band of consecutive rows and keeps one
// halo row above and below it, which it refreshes from its neighbours
// (Isend/Irecv) before every sweep. The residual is the largest change of any
// point in a sweep, combined with an Allreduce(Max): max is exact in any
// order, so the parallel run stops at the same sweep as the serial one and,
// since each point's update is the same arithmetic, every point of the grid
// comes out bit for bit equal. Rank 0 gathers the grid (Gatherv) and compares.
//
// Rank 0 prints, e.g.
//
//	heat: 128x128 grid, 4 ranks, 1650 sweeps, residual 9.998e-05, centre 0.249706, max |parallel-serial| 0 OK
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"time"

	"github.com/rdmago/rdmago/comm"
)

const (
	tagUp   = 1 // a rank's first row, sent to the rank above
	tagDown = 2 // a rank's last row, sent to the rank below
)

func main() {
	n := flag.Int("n", 128, "interior grid points per side")
	tol := flag.Float64("tol", 1e-4, "stop when no point changes by more than this in a sweep")
	maxIter := flag.Int("max", 100000, "stop after this many sweeps")
	check := flag.Bool("check", true, "run the serial solver on rank 0 and compare")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if *n < c.Size() {
		log.Fatalf("heat: -n %d: need at least one row per rank (%d ranks)", *n, c.Size())
	}

	counts, offs := split(*n, c.Size())
	rows := counts[c.Rank()]
	lo := offs[c.Rank()]
	w := *n + 2 // each row carries the left and right boundary points

	// cur and nxt hold rows+2 rows: halo above, own rows, halo below.
	cur := make([]float64, (rows+2)*w)
	nxt := make([]float64, (rows+2)*w)
	if lo == 0 { // the halo above rank 0 is the hot top edge
		for j := range w {
			cur[j], nxt[j] = 1, 1
		}
	}
	up, down := c.Rank()-1, c.Rank()+1
	sweeps, res := 0, math.Inf(1)
	for sweeps < *maxIter && res > *tol {
		if err := exchange(ctx, c, cur, rows, w, up, down); err != nil {
			log.Fatal(err)
		}
		local := sweep(cur, nxt, rows, w)
		cur, nxt = nxt, cur
		r := []float64{local}
		if err := comm.Allreduce(ctx, c, r, comm.Max); err != nil {
			log.Fatal(err)
		}
		res = r[0]
		sweeps++
	}

	// Gather the interior rows on rank 0.
	var grid []float64
	if c.Rank() == 0 {
		grid = make([]float64, *n**n)
	}
	own := make([]float64, 0, rows**n)
	for i := 1; i <= rows; i++ {
		own = append(own, cur[i*w+1:i*w+1+*n]...)
	}
	elems := make([]int, len(counts))
	for r, k := range counts {
		elems[r] = k * *n
	}
	if err := comm.Gatherv(ctx, c, own, grid, elems, 0); err != nil {
		log.Fatal(err)
	}
	if c.Rank() != 0 {
		return
	}
	centre := grid[(*n/2)**n+*n/2]
	line := fmt.Sprintf("heat: %dx%d grid, %d ranks, %d sweeps, residual %.4g, centre %.6f", *n, *n, c.Size(), sweeps, res, centre)
	if !*check {
		fmt.Println(line)
		return
	}
	ref, refSweeps := serial(*n, *tol, *maxIter)
	diff := 0.0
	for i := range grid {
		diff = math.Max(diff, math.Abs(grid[i]-ref[i]))
	}
	if diff != 0 || refSweeps != sweeps {
		fmt.Printf("%s, serial %d sweeps, max |parallel-serial| %.3g FAIL\n", line, refSweeps, diff)
		c.Abort(1)
	}
	fmt.Printf("%s, max |parallel-serial| %.3g OK\n", line, diff)
}

// split deals n rows to p ranks as evenly as possible.
func split(n, p int) (counts, offs []int) {
	counts, offs = make([]int, p), make([]int, p)
	for r := range p {
		counts[r] = n / p
		if r < n%p {
			counts[r]++
		}
		if r > 0 {
			offs[r] = offs[r-1] + counts[r-1]
		}
	}
	return counts, offs
}

// exchange refreshes the halo rows of g (rows own rows of width w) from the
// ranks above and below; a missing neighbour (off the plate) leaves the fixed
// boundary row in place. Non-blocking sends and receives, so that no
// ordering between neighbours can deadlock.
func exchange(ctx context.Context, c *comm.Comm, g []float64, rows, w, up, down int) error {
	var reqs []*comm.Request
	post := func(r *comm.Request, err error) error {
		reqs = append(reqs, r)
		return err
	}
	if up >= 0 {
		if err := post(comm.Irecv(ctx, c, g[0:w], up, tagDown)); err != nil {
			return err
		}
		if err := post(comm.Isend(ctx, c, g[w:2*w], up, tagUp)); err != nil {
			return err
		}
	}
	if down < c.Size() {
		if err := post(comm.Irecv(ctx, c, g[(rows+1)*w:(rows+2)*w], down, tagUp)); err != nil {
			return err
		}
		if err := post(comm.Isend(ctx, c, g[rows*w:(rows+1)*w], down, tagDown)); err != nil {
			return err
		}
	}
	return comm.WaitAll(ctx, reqs...)
}

// sweep does one Jacobi sweep from cur into nxt over rows own rows (the
// halos and the left/right boundary columns stay) and returns the largest
// change.
func sweep(cur, nxt []float64, rows, w int) float64 {
	res := 0.0
	for i := 1; i <= rows; i++ {
		for j := 1; j < w-1; j++ {
			v := 0.25 * (cur[(i-1)*w+j] + cur[(i+1)*w+j] + cur[i*w+j-1] + cur[i*w+j+1])
			res = math.Max(res, math.Abs(v-cur[i*w+j]))
			nxt[i*w+j] = v
		}
	}
	return res
}

// serial is the one-process solver: the same sweeps over the whole plate.
func serial(n int, tol float64, maxIter int) ([]float64, int) {
	w := n + 2
	cur := make([]float64, (n+2)*w)
	nxt := make([]float64, (n+2)*w)
	for j := range w {
		cur[j], nxt[j] = 1, 1
	}
	sweeps, res := 0, math.Inf(1)
	for sweeps < maxIter && res > tol {
		res = sweep(cur, nxt, n, w)
		cur, nxt = nxt, cur
		sweeps++
	}
	out := make([]float64, 0, n*n)
	for i := 1; i <= n; i++ {
		out = append(out, cur[i*w+1:i*w+1+n]...)
	}
	return out, sweeps
}
