// Command cg solves A·x = b by the conjugate gradient method with the rows of
// the symmetric positive definite matrix A split among the ranks, and checks
// x against gonum's serial solution (a Cholesky factorisation) on rank 0.
//
//	go run ./cmd/rdmarun -np 4 ./examples/cg -n 400
//
// A is dense and n×n, A[i][j] = 1/(1+|i−j|)² off the diagonal and 2 on it
// (each row's off-diagonal sum is below 2(π²/6−1) ≈ 1.29, so A is strictly
// diagonally dominant, hence SPD); b[i] = 1 + i mod 5. Each rank
// builds only its band of rows (a gonum mat.Dense) and its slice of b.
// Per iteration the distributed parts are:
//
//   - the matrix-vector product q = A·p: Allgatherv assembles the whole
//     search direction p from every rank's piece, then each rank multiplies
//     its rows (mat.Dense.MulVec) to get its piece of q;
//   - the dot products p·q and r·r: local partial sums combined with
//     Allreduce(Sum).
//
// The vector updates are local. The summation order of the dot products
// depends on the rank count, so the iterates differ from the serial solution
// in the last bits; the check is a relative tolerance, ‖x−x_ref‖∞/‖x_ref‖∞
// ≤ 1e-8 (-tol). Rank 0 prints, e.g.
//
//	cg: n=400, 4 ranks, 15 iterations, residual 5.4e-13, max rel diff vs gonum Cholesky 2.5e-12 (tol 1e-08) OK
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"time"

	"gonum.org/v1/gonum/floats"
	"gonum.org/v1/gonum/mat"

	"github.com/rdmago/rdmago/comm"
)

func main() {
	n := flag.Int("n", 400, "matrix order")
	rtol := flag.Float64("rtol", 1e-12, "stop when ‖r‖/‖b‖ falls below this")
	tol := flag.Float64("tol", 1e-8, "accepted relative difference from gonum's serial solution")
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
		log.Fatalf("cg: -n %d: need at least one row per rank (%d ranks)", *n, c.Size())
	}

	counts, offs := split(*n, c.Size())
	lo, rows := offs[c.Rank()], counts[c.Rank()]
	a := mat.NewDense(rows, *n, nil)
	for i := range rows {
		for j := range *n {
			a.Set(i, j, entry(lo+i, j))
		}
	}
	b := make([]float64, rows)
	for i := range b {
		b[i] = rhs(lo + i)
	}

	x, iters, relres, err := solve(ctx, c, a, b, counts, *n, *rtol)
	if err != nil {
		log.Fatal(err)
	}

	// Gather x on rank 0 and compare with gonum's serial answer.
	var full []float64
	if c.Rank() == 0 {
		full = make([]float64, *n)
	}
	if err := comm.Gatherv(ctx, c, x, full, counts, 0); err != nil {
		log.Fatal(err)
	}
	if c.Rank() != 0 {
		return
	}
	ref, err := serial(*n)
	if err != nil {
		log.Fatal(err)
	}
	diff := make([]float64, *n)
	floats.SubTo(diff, full, ref)
	rel := floats.Norm(diff, math.Inf(1)) / floats.Norm(ref, math.Inf(1))
	verdict := "OK"
	if !(rel <= *tol) {
		verdict = "FAIL"
	}
	fmt.Printf("cg: n=%d, %d ranks, %d iterations, residual %.2g, max rel diff vs gonum Cholesky %.2g (tol %g) %s\n",
		*n, c.Size(), iters, relres, rel, *tol, verdict)
	if verdict != "OK" {
		c.Abort(1)
	}
}

func entry(i, j int) float64 {
	if i == j {
		return 2
	}
	d := 1 + math.Abs(float64(i-j))
	return 1 / (d * d)
}

func rhs(i int) float64 { return float64(1 + i%5) }

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

// dot is the global dot product of two row-split vectors.
func dot(ctx context.Context, c *comm.Comm, u, v []float64) (float64, error) {
	s := []float64{floats.Dot(u, v)}
	err := comm.Allreduce(ctx, c, s, comm.Sum)
	return s[0], err
}

// solve runs textbook CG from x = 0 on the row-split system and returns this
// rank's piece of x, the iterations taken and the final ‖r‖/‖b‖.
func solve(ctx context.Context, c *comm.Comm, a *mat.Dense, b []float64, counts []int, n int, rtol float64) ([]float64, int, float64, error) {
	rows := len(b)
	x := make([]float64, rows)
	r := append([]float64(nil), b...) // r = b − A·0
	p := append([]float64(nil), r...)
	q := make([]float64, rows)
	pfull := make([]float64, n)
	qv := mat.NewVecDense(rows, nil) // rows >= 1: main checks n >= Size

	bb, err := dot(ctx, c, b, b)
	if err != nil {
		return nil, 0, 0, err
	}
	rr := bb
	it := 0
	for ; it < 10*n && math.Sqrt(rr/bb) > rtol; it++ {
		if err := comm.Allgatherv(ctx, c, p, pfull, counts); err != nil {
			return nil, 0, 0, err
		}
		qv.MulVec(a, mat.NewVecDense(n, pfull))
		copy(q, qv.RawVector().Data)
		pq, err := dot(ctx, c, p, q)
		if err != nil {
			return nil, 0, 0, err
		}
		alpha := rr / pq
		floats.AddScaled(x, alpha, p)
		floats.AddScaled(r, -alpha, q)
		rrNew, err := dot(ctx, c, r, r)
		if err != nil {
			return nil, 0, 0, err
		}
		beta := rrNew / rr
		rr = rrNew
		for i := range p {
			p[i] = r[i] + beta*p[i]
		}
	}
	return x, it, math.Sqrt(rr / bb), nil
}

// serial solves the whole system with gonum's Cholesky factorisation.
func serial(n int) ([]float64, error) {
	s := mat.NewSymDense(n, nil)
	for i := range n {
		for j := i; j < n; j++ {
			s.SetSym(i, j, entry(i, j))
		}
	}
	var ch mat.Cholesky
	if !ch.Factorize(s) {
		return nil, fmt.Errorf("cg: matrix is not positive definite")
	}
	b := mat.NewVecDense(n, nil)
	for i := range n {
		b.SetVec(i, rhs(i))
	}
	var x mat.VecDense
	if err := ch.SolveVecTo(&x, b); err != nil {
		return nil, fmt.Errorf("cg: gonum solve: %w", err)
	}
	return x.RawVector().Data, nil
}
