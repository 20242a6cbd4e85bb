// Command halo-put runs explicit heat diffusion on a rod split between the
// ranks and exchanges the halos by one-sided PutSignal: each step a rank
// writes its edge values into its neighbours' windows and waits for their
// signals, with no message, barrier or fence. The result is compared with
// a serial run on rank 0.
//
//	go run ./cmd/rdmarun -np 4 ./examples/halo-put -n 1000 -steps 500
//
// Rank 0 prints "halo-put: 1000 points, 4 ranks, 500 steps, max |parallel-serial| 0 OK".
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

// The window holds, per step parity, the halo from the left and from the
// right neighbour: win[2*side+parity]. Two parities let a neighbour write
// step s+1's halo while this rank may still read step s's; it cannot get
// further ahead, because it waits for this rank's step s+1 halo first.
const (
	fromLeft  = 0
	fromRight = 2
)

func main() {
	n := flag.Int("n", 1000, "points on the rod")
	steps := flag.Int("steps", 500, "time steps")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if *n < c.Size() {
		log.Fatalf("halo-put: %d points for %d ranks", *n, c.Size())
	}
	mine, err := diffuse(ctx, c, *n, *steps)
	if err != nil {
		log.Fatal(err)
	}
	counts := make([]int, c.Size())
	for r := range counts {
		lo, hi := span(*n, c.Size(), r)
		counts[r] = hi - lo
	}
	var all []float64
	if c.Rank() == 0 {
		all = make([]float64, *n)
	}
	if err := comm.Gatherv(ctx, c, mine, all, counts, 0); err != nil {
		log.Fatal(err)
	}
	if c.Rank() == 0 {
		serial := initial(*n, 0, *n)
		serial = run(serial, 0, 0, *steps)
		var diff float64
		for i := range serial {
			diff = math.Max(diff, math.Abs(serial[i]-all[i]))
		}
		verdict := "OK"
		if diff != 0 {
			verdict = "FAIL"
		}
		fmt.Printf("halo-put: %d points, %d ranks, %d steps, max |parallel-serial| %g %s\n", *n, c.Size(), *steps, diff, verdict)
		if diff != 0 {
			c.Abort(1)
		}
	}
}

// span is rank r's share [lo, hi) of n points.
func span(n, p, r int) (int, int) { return r * n / p, (r + 1) * n / p }

// initial is the rod's temperature at points [lo, hi): a hot middle.
func initial(n, lo, hi int) []float64 {
	u := make([]float64, hi-lo)
	for i := range u {
		if g := lo + i; g > n/3 && g < 2*n/3 {
			u[i] = 100
		}
	}
	return u
}

// step computes one explicit step of u with halos l and r (the rod's ends
// are held at 0).
func step(u, next []float64, l, r float64) {
	for i := range u {
		left, right := l, r
		if i > 0 {
			left = u[i-1]
		}
		if i < len(u)-1 {
			right = u[i+1]
		}
		next[i] = u[i] + 0.25*(left-2*u[i]+right)
	}
}

// run does steps steps on u with fixed halos (the serial reference).
func run(u []float64, l, r float64, steps int) []float64 {
	next := make([]float64, len(u))
	for range steps {
		step(u, next, l, r)
		u, next = next, u
	}
	return u
}

// diffuse runs steps steps on this rank's share and returns it.
func diffuse(ctx context.Context, c *comm.Comm, n, steps int) ([]float64, error) {
	me, p := c.Rank(), c.Size()
	lo, hi := span(n, p, me)
	u, next := initial(n, lo, hi), make([]float64, hi-lo)
	halo, err := comm.AllocWin[float64](ctx, c, 4)
	if err != nil {
		return nil, err
	}
	win := halo.Local()
	edges := [2][2]float64{} // per parity: what this rank sent (left edge, right edge)
	for s := range steps {
		par := s % 2
		// The edges sent two steps ago have been placed: this rank waited
		// for the neighbours' replies to them, and Flush says so locally.
		if err := halo.Flush(ctx); err != nil {
			return nil, err
		}
		edges[par] = [2]float64{u[0], u[len(u)-1]}
		if me > 0 {
			if err := halo.PutSignal(me-1, fromRight+par, edges[par][:1], par); err != nil {
				return nil, err
			}
		}
		if me < p-1 {
			if err := halo.PutSignal(me+1, fromLeft+par, edges[par][1:], par); err != nil {
				return nil, err
			}
		}
		l, r := 0.0, 0.0
		if me > 0 {
			if err := halo.WaitSignal(ctx, me-1, par, 1); err != nil {
				return nil, err
			}
			l = win[fromLeft+par]
		}
		if me < p-1 {
			if err := halo.WaitSignal(ctx, me+1, par, 1); err != nil {
				return nil, err
			}
			r = win[fromRight+par]
		}
		step(u, next, l, r)
		u, next = next, u
	}
	return u, halo.Close(ctx)
}
