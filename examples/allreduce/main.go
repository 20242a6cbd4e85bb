// Command allreduce sums a vector across the ranks with comm.Allreduce and
// checks every element of the result.
//
//	go run ./cmd/rdmarun -np 4 ./examples/allreduce -n 1000000
//
// Rank r contributes v[i] = (r+1)·(1 + i mod 7), so the sum is
// p(p+1)/2 · (1 + i mod 7): integer-valued float64s, exact in any summation
// order, so the check is exact. Rank 0 prints
//
//	allreduce: 1000000 float64 over 4 ranks, sum of result 39999990, 0 wrong elements OK
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/rdmago/rdmago/comm"
)

func main() {
	n := flag.Int("n", 1<<20, "vector length (elements)")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	if *n < 0 {
		log.Fatalf("allreduce: -n %d: must be >= 0", *n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	v := make([]float64, *n)
	for i := range v {
		v[i] = float64(c.Rank()+1) * float64(1+i%7)
	}
	if err := comm.Allreduce(ctx, c, v, comm.Sum); err != nil {
		log.Fatal(err)
	}

	// Every rank checks its own copy; the wrong-element counts are summed
	// so that rank 0 reports for the whole job.
	p := float64(c.Size())
	tri := p * (p + 1) / 2
	var total float64
	bad := []int64{0}
	for i, x := range v {
		if x != tri*float64(1+i%7) {
			bad[0]++
		}
		total += x
	}
	if err := comm.Allreduce(ctx, c, bad, comm.Sum); err != nil {
		log.Fatal(err)
	}
	if c.Rank() == 0 {
		verdict := "OK"
		if bad[0] != 0 {
			verdict = "FAIL"
		}
		fmt.Printf("allreduce: %d float64 over %d ranks, sum of result %.0f, %d wrong elements %s\n",
			*n, c.Size(), total, bad[0], verdict)
		if bad[0] != 0 {
			c.Abort(1)
		}
	}
}
