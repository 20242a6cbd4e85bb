// Command sgd trains a logistic-regression classifier by data-parallel
// mini-batch SGD: every rank computes the gradient on its share of each
// batch, an Allreduce(Sum) adds the shares, and every rank applies the same
// update, so the model stays identical everywhere. Rank 0 then trains the
// same model serially and compares.
//
//	go run ./cmd/rdmarun -np 4 ./examples/sgd -steps 300
//
// The data are synthetic and the same on every rank (a seeded generator):
// N samples with d features drawn uniformly from [−1, 1], labelled 1 when
// w*·x + b* plus a little noise is positive, for a fixed w*, b*. Step s uses
// samples [s·B, (s+1)·B) mod N as its batch; rank r takes the samples of the
// batch whose index is r mod p. The gradient is averaged over the whole batch
// (divided by B after the sum), exactly what the serial run computes, but
// summed in another order: the weights agree within a stated tolerance
// (-tol, default 1e-9 absolute), not bit for bit. Rank 0 prints, e.g.
//
//	sgd: 8 features, 4096 samples, batch 256, 300 steps, 4 ranks, loss 0.2160, accuracy 0.957, max |w-w_serial| 1.1e-16 (tol 1e-09) OK
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"math/rand/v2"
	"time"

	"github.com/rdmago/rdmago/comm"
)

type data struct {
	x [][]float64 // samples, d features each
	y []float64   // labels, 0 or 1
}

func main() {
	d := flag.Int("d", 8, "features")
	n := flag.Int("n", 4096, "samples")
	batch := flag.Int("batch", 256, "global batch size")
	steps := flag.Int("steps", 300, "SGD steps")
	lr := flag.Float64("lr", 0.5, "learning rate")
	tol := flag.Float64("tol", 1e-9, "accepted max |w - w_serial|")
	timeout := flag.Duration("timeout", 5*time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	if *d < 1 || *n < 1 || *batch < 1 || *batch > *n || *steps < 0 {
		log.Fatalf("sgd: need d >= 1, n >= 1, 1 <= batch <= n, steps >= 0 (got d=%d n=%d batch=%d steps=%d)", *d, *n, *batch, *steps)
	}

	ds := synth(*d, *n)
	w := make([]float64, *d+1) // weights, then the bias
	g := make([]float64, *d+1)
	for s := range *steps {
		clear(g)
		for k := c.Rank(); k < *batch; k += c.Size() {
			i := (s**batch + k) % *n
			addGrad(g, w, ds.x[i], ds.y[i])
		}
		if err := comm.Allreduce(ctx, c, g, comm.Sum); err != nil {
			log.Fatal(err)
		}
		for j := range w {
			w[j] -= *lr * g[j] / float64(*batch)
		}
	}

	// Loss and accuracy over the whole data set, each rank its share.
	acc := []float64{0, 0} // summed loss, correct predictions
	for i := c.Rank(); i < *n; i += c.Size() {
		l, ok := evaluate(w, ds.x[i], ds.y[i])
		acc[0] += l
		if ok {
			acc[1]++
		}
	}
	if err := comm.Reduce(ctx, c, acc, comm.Sum, 0); err != nil {
		log.Fatal(err)
	}
	if c.Rank() != 0 {
		return
	}

	ref := make([]float64, *d+1)
	for s := range *steps {
		clear(g)
		for k := range *batch {
			i := (s**batch + k) % *n
			addGrad(g, ref, ds.x[i], ds.y[i])
		}
		for j := range ref {
			ref[j] -= *lr * g[j] / float64(*batch)
		}
	}
	diff := 0.0
	for j := range w {
		diff = math.Max(diff, math.Abs(w[j]-ref[j]))
	}
	verdict := "OK"
	if !(diff <= *tol) {
		verdict = "FAIL"
	}
	fmt.Printf("sgd: %d features, %d samples, batch %d, %d steps, %d ranks, loss %.4f, accuracy %.3f, max |w-w_serial| %.2g (tol %g) %s\n",
		*d, *n, *batch, *steps, c.Size(), acc[0]/float64(*n), acc[1]/float64(*n), diff, *tol, verdict)
	if verdict != "OK" {
		c.Abort(1)
	}
}

// synth makes the labelled data set, the same on every rank.
func synth(d, n int) data {
	rng := rand.New(rand.NewPCG(1, 2))
	truth := make([]float64, d+1)
	for j := range truth {
		truth[j] = rng.Float64()*4 - 2
	}
	ds := data{x: make([][]float64, n), y: make([]float64, n)}
	for i := range n {
		x := make([]float64, d)
		z := truth[d] + 0.3*rng.NormFloat64()
		for j := range x {
			x[j] = rng.Float64()*2 - 1
			z += truth[j] * x[j]
		}
		ds.x[i] = x
		if z > 0 {
			ds.y[i] = 1
		}
	}
	return ds
}

func sigmoid(z float64) float64 { return 1 / (1 + math.Exp(-z)) }

func logit(w, x []float64) float64 {
	z := w[len(x)]
	for j, v := range x {
		z += w[j] * v
	}
	return z
}

// addGrad adds the cross-entropy gradient of one sample to g.
func addGrad(g, w, x []float64, y float64) {
	e := sigmoid(logit(w, x)) - y
	for j, v := range x {
		g[j] += e * v
	}
	g[len(x)] += e
}

// evaluate returns one sample's cross-entropy loss and whether the model
// classifies it right.
func evaluate(w, x []float64, y float64) (float64, bool) {
	p := sigmoid(logit(w, x))
	const eps = 1e-15
	loss := -(y*math.Log(p+eps) + (1-y)*math.Log(1-p+eps))
	return loss, (p > 0.5) == (y == 1)
}
