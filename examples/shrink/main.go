// Command shrink is an iterative computation that survives the loss of a
// rank: when an iteration fails with ErrPeerLost, the survivors build a
// communicator of themselves with Comm.Shrink, agree on how far they got,
// share out the dead rank's work and carry on to the exact answer.
//
//	go run ./cmd/rdmarun -np 4 --keep-going ./examples/shrink -kill-rank 2 -kill-iter 20
//
// Iteration k sums g(i, k) over i < n, each rank summing its block of the
// indices under the current communicator, and folds the sum into a running
// value, acc = (31·acc + s_k) mod 2^31-1, so that a lost, repeated or
// reordered iteration changes the answer. Every rank checks acc against
// the serial computation. rdmarun's --keep-going keeps the job running
// when the rank dies (by default rdmarun would stop the job).
//
// An iteration can have completed on some survivors and failed on others
// (the death came in the middle of its allreduce): after the shrink the
// survivors take the minimum of their completed iterations, and a rank one
// ahead steps back, which it can because it keeps the value before its last
// iteration.
//
// Each survivor prints its original rank, the new communicator as
// original ranks (the same on every survivor) and when it had it working;
// the rank told to die prints when it dies. Every rank prints its answer
// and rank 0 of the final communicator the result line ending in "OK"
// (each rank checks its own: a collective after the last iteration would
// need a recovery of its own).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/comm"
)

const modulus = 1<<31 - 1 // 31·acc + s stays far inside int64

func g(i, k int) int64 { return int64((i*(k+1))%1000 + 1) }

func fold(acc, s int64) int64 { return (acc*31 + s) % modulus }

func main() {
	n := flag.Int("n", 1<<16, "indices summed per iteration")
	iters := flag.Int("iters", 40, "iterations")
	killRank := flag.Int("kill-rank", -1, "this (original) rank kills itself with SIGKILL")
	killIter := flag.Int("kill-iter", 0, "... when it starts this iteration")
	killDelay := flag.Duration("kill-delay", 0, "... this long after starting it (picked at random up to the value when -seed is set)")
	dieOnFailure := flag.Int("die-on-failure", -1, "this (original) rank kills itself when it sees the failure, while the others shrink")
	seed := flag.Uint64("seed", 0, "randomises -kill-delay")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	if *n < 1 || *iters < 1 {
		log.Fatalf("shrink: -n %d and -iters %d must be positive", *n, *iters)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		log.Fatal(err)
	}
	defer func() { c.Close() }()
	me, start := c.Rank(), c.Size()
	delay := *killDelay
	if *seed != 0 && delay > 0 {
		delay = time.Duration(rand.New(rand.NewPCG(*seed, 1)).Int64N(int64(delay)))
	}

	var acc, prev int64 // prev: acc before the last completed iteration
	done := 0
	for done < *iters {
		if me == *killRank {
			if done == *killIter {
				die(delay)
			}
			if done >= *killIter && done == *iters-1 {
				// Not yet dead: never finish, so that the others see the
				// death rather than finish without this rank.
				select {}
			}
		}
		s := []int64{0}
		lo, hi := *n*c.Rank()/c.Size(), *n*(c.Rank()+1)/c.Size()
		for i := lo; i < hi; i++ {
			s[0] += g(i, done)
		}
		err := comm.Allreduce(ctx, c, s, comm.Sum)
		failed := time.Now()
		if err == nil {
			prev, acc = acc, fold(acc, s[0])
			done++
			continue
		}
		if !errors.Is(err, comm.ErrPeerLost) && !errors.Is(err, comm.ErrClosed) {
			log.Fatalf("shrink: rank %d: iteration %d: %v", me, done, err)
		}
		if me == *dieOnFailure {
			fmt.Printf("shrink: rank %d dies on the failure at %d\n", me, time.Now().UnixNano())
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		nc, err2 := c.Shrink(ctx)
		if err2 != nil {
			log.Fatalf("shrink: rank %d: after %v: %v", me, err, err2)
		}
		c.Close()
		c = nc
		// How far did everybody get? At most one iteration apart.
		least := []int64{int64(done)}
		if err := comm.Allreduce(ctx, c, least, comm.Min); err != nil {
			log.Fatalf("shrink: rank %d: agreeing on the iteration: %v", me, err)
		}
		switch int64(done) - least[0] {
		case 0:
		case 1:
			acc, done = prev, done-1
		default:
			log.Fatalf("shrink: rank %d: at iteration %d, the others at %d", me, done, least[0])
		}
		working := time.Now()
		members := []int64{int64(me)}
		all := make([]int64, c.Size())
		if err := comm.Allgather(ctx, c, members, all); err != nil {
			log.Fatalf("shrink: rank %d: allgather on the new communicator: %v", me, err)
		}
		fmt.Printf("shrink: rank %d recovered: %v; new communicator %s; resuming at iteration %d; failed at %d, working at %d\n",
			me, err, fingerprint(all), done, failed.UnixNano(), working.UnixNano())
	}

	// The serial answer.
	var want int64
	for k := range *iters {
		var s int64
		for i := range *n {
			s += g(i, k)
		}
		want = fold(want, s)
	}
	status := "OK"
	if acc != want {
		status = "FAIL"
	}
	// No collective after the last iteration: a death there would need a
	// recovery of its own.
	fmt.Printf("shrink: rank %d: acc %d (want %d) as rank %d of %d %s\n", me, acc, want, c.Rank(), c.Size(), status)
	if c.Rank() == 0 {
		fmt.Printf("shrink: n=%d, %d iterations, %d ranks at the start, %d at the end, acc %d %s\n",
			*n, *iters, start, c.Size(), acc, status)
	}
	if status != "OK" {
		os.Exit(1)
	}
}

// die kills this process after d, wherever it then is (computing, or in
// the allreduce), and says when.
func die(d time.Duration) {
	kill := func() {
		fmt.Printf("shrink: rank dies at %d\n", time.Now().UnixNano())
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	if d <= 0 {
		kill()
	}
	time.AfterFunc(d, kill)
}

func fingerprint(ranks []int64) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = fmt.Sprint(r)
	}
	return "[" + strings.Join(s, " ") + "]"
}
