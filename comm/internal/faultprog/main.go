// Command faultprog is the rank program of comm's fault matrix
// (comm/faults_test.go): it joins the job with comm.FromEnv, loops over
// one collective family, checking every result, and injects one fault on
// one rank where it is told to. Every line it prints is for the test:
//
//	joined rank=1 pid=4242 addr=127.0.0.1:40000 t=1700000000012345678
//	looping rank=1 t=...
//	inject rank=1 fault=kill at=coll t=1700000000123456789
//	fail rank=0 t=1700000000456789012 iter=41 sentinel=lost named=1 err=comm: ...
//	ok rank=2 iters=200
//	sigterm rank=3 t=...
//
// t is the wall clock in Unix nanoseconds (the ranks and the test share a
// machine), so that the test can tell how long each survivor took to
// notice. A survivor whose collective fails prints "fail" and exits 1, as a
// program would; its error is classified by sentinel (lost: ErrPeerLost,
// closed: ErrClosed, deadline: the context ended, other) and by the rank
// it names.
//
// The ranks catch SIGTERM and carry on (they print "sigterm"): rdmarun's
// SIGTERM to the survivors of a killed rank must not end them before they
// have noticed the loss by themselves, which is the promise under test.
// rdmarun's SIGKILL after --grace still ends them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/p2p"
)

var (
	coll     = flag.String("coll", "allreduce", "the collective family: barrier, bcast, allreduce, reduce, gather, scatter, alltoall")
	n        = flag.Int("n", 1, "elements (float64) per rank and block")
	iters    = flag.Int("iters", 1<<30, "calls to make when nothing fails (the loop ends earlier with -until)")
	until    = flag.String("until", "", "loop until rank 0 sees this file (all ranks stop at the same call), at most -iters calls")
	victim   = flag.Int("victim", -1, "the rank that injects the fault")
	fault    = flag.String("fault", "", "kill (SIGKILL), stop (SIGSTOP) or leave (Close and exit 0)")
	at       = flag.String("at", "coll", "startup (right after FromEnv), coll (during the loop's -after'th call) or close (during Close)")
	after    = flag.Int("after", 20, "with -at coll, inject during call number after")
	liveness = flag.Duration("liveness", 1500*time.Millisecond, "p2p liveness timeout; the heartbeat is a tenth")
	deadline = flag.Duration("deadline", 30*time.Second, "the context of every call: a survivor that waits longer reports sentinel=deadline")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "faultprog: %v\n", err)
		os.Exit(1)
	}
}

func now() int64 { return time.Now().UnixNano() }

func run() error {
	terms := make(chan os.Signal, 4)
	signal.Notify(terms, syscall.SIGTERM)
	rank := -1
	go func() {
		for range terms {
			fmt.Printf("sigterm rank=%d t=%d\n", rank, now())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), *deadline)
	defer cancel()
	var o comm.Options
	o.P2P = p2p.Options{Heartbeat: *liveness / 10, LivenessTimeout: *liveness, CloseTimeout: time.Second}
	addr := os.Getenv("RDMARUN_ADDR") // the rendezvous, which the test checks is gone after the job
	c, err := comm.FromEnv(ctx, o)
	if err != nil {
		return err
	}
	rank = c.Rank()
	fmt.Printf("joined rank=%d pid=%d addr=%s t=%d\n", rank, os.Getpid(), addr, now())
	me := rank == *victim
	if me {
		// The injecting goroutine needs a P of its own to strike on time,
		// while the calling one spins in a wait (rdmarun gives ranks that
		// outnumber the CPUs GOMAXPROCS=1).
		runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0)))
	}
	if me && *at == "startup" {
		inject(c)
	}
	call, err := family(*coll, c)
	if err != nil {
		return err
	}
	i := 0
	for ; i < *iters; i++ {
		if i == *after {
			fmt.Printf("looping rank=%d t=%d\n", rank, now())
		}
		if me && *at == "coll" && i == *after && *fault == "leave" {
			inject(c) // instead of the call: the others make it without this rank
		}
		if me && *at == "coll" && i == *after {
			// Let the call start, then inject from outside it: the rank is
			// inside the collective (or between two of them, for the
			// fastest families) when the fault strikes.
			go func() {
				time.Sleep(200 * time.Microsecond)
				inject(c)
			}()
		}
		if me && *at == "close" && i == *after {
			go func() {
				time.Sleep(200 * time.Microsecond)
				inject(c)
			}()
			c.Close()
			time.Sleep(time.Minute) // the injection ends this process
			return nil
		}
		stop, err := call(ctx, i)
		if err != nil {
			report(rank, i, err)
			os.Exit(1)
		}
		if stop {
			i++
			break
		}
	}
	if err := c.Close(); err != nil {
		return fmt.Errorf("rank %d: Close: %w", rank, err)
	}
	fmt.Printf("ok rank=%d iters=%d\n", rank, i)
	return nil
}

// inject prints the time and does the fault to this process.
func inject(c *comm.Comm) {
	fmt.Printf("inject rank=%d fault=%s at=%s t=%d\n", *victim, *fault, *at, now())
	switch *fault {
	case "kill":
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "stop":
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Minute) // rdmarun ends the job
	case "leave":
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "faultprog: rank %d: Close: %v\n", c.Rank(), err)
		}
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "faultprog: -fault %q: want kill, stop or leave\n", *fault)
		os.Exit(2)
	}
	select {} // SIGKILL and SIGSTOP act at once; nothing runs on
}

// report prints a survivor's failure: when, the sentinel, the rank named.
func report(rank, iter int, err error) {
	sentinel := "other"
	switch {
	case errors.Is(err, comm.ErrPeerLost):
		sentinel = "lost"
	case errors.Is(err, comm.ErrClosed):
		sentinel = "closed"
	case errors.Is(err, context.DeadlineExceeded):
		sentinel = "deadline"
	}
	fmt.Printf("fail rank=%d t=%d iter=%d sentinel=%s named=%d err=%v\n", rank, now(), iter, sentinel, named(err), err)
}

// named is the rank err blames: the lost rank, or the rank that closed.
// The world communicator's ranks are the job's.
func named(err error) int {
	if r, ok := comm.PeerLost(err); ok {
		return r
	}
	var pc *collectives.PeerClosedError
	if errors.As(err, &pc) {
		return pc.Rank
	}
	var qc *p2p.PeerClosedError
	if errors.As(err, &qc) {
		return qc.Rank
	}
	return -1
}

// family returns one call of the collective, checked: call i uses root
// i mod size, so that a fault strikes roots and non-roots. stop reports
// that rank 0 found the -until file (carried by the call to every rank).
func family(name string, c *comm.Comm) (func(ctx context.Context, i int) (stop bool, err error), error) {
	p, me, m := c.Size(), c.Rank(), *n
	// val is what rank r contributes to block b in call i: exact in
	// float64 and different for every (i, r, b).
	val := func(i, r, b int) float64 { return float64(i%97*1000 + r*10 + b%10) }
	stopFlag := func() float64 {
		if me == 0 && *until != "" {
			if _, err := os.Stat(*until); err == nil {
				return 1
			}
		}
		return 0
	}
	check := func(i int, what string, got, want float64) error {
		if got != want {
			return fmt.Errorf("%s call %d on rank %d: got %v, want %v", what, i, me, got, want)
		}
		return nil
	}
	switch name {
	case "barrier":
		// A barrier carries nothing: the -until decision travels in an
		// allreduce every 50 calls.
		return func(ctx context.Context, i int) (bool, error) {
			if err := comm.Barrier(ctx, c); err != nil {
				return false, err
			}
			if *until == "" || i%50 != 49 {
				return false, nil
			}
			v := []float64{stopFlag()}
			err := comm.Allreduce(ctx, c, v, comm.Max)
			return v[0] == 1, err
		}, nil
	case "bcast":
		buf := make([]float64, m+1)
		return func(ctx context.Context, i int) (bool, error) {
			root := i % p
			for b := range buf {
				buf[b] = 0
				if me == root {
					buf[b] = val(i, root, b)
				}
			}
			if me == 0 {
				buf[m] += stopFlag() // root 0 only: the flag rides its call
			}
			if err := comm.Bcast(ctx, c, buf, root); err != nil {
				return false, err
			}
			for b := range m {
				if err := check(i, "bcast", buf[b], val(i, root, b)); err != nil {
					return false, err
				}
			}
			return root == 0 && buf[m]-val(i, 0, m) == 1, nil
		}, nil
	case "allreduce", "reduce":
		buf := make([]float64, m+1)
		return func(ctx context.Context, i int) (bool, error) {
			root := i % p
			for b := range m {
				buf[b] = val(i, me, b)
			}
			buf[m] = stopFlag()
			var err error
			if name == "allreduce" {
				err = comm.Allreduce(ctx, c, buf, comm.Sum)
			} else {
				err = comm.Reduce(ctx, c, buf, comm.Sum, root)
			}
			if err != nil {
				return false, err
			}
			if name == "reduce" && me != root {
				return false, nil
			}
			for b := range m {
				want := 0.0
				for r := range p {
					want += val(i, r, b)
				}
				if err := check(i, name, buf[b], want); err != nil {
					return false, err
				}
			}
			return name == "allreduce" && buf[m] == 1, nil
		}, nil
	case "gather", "scatter":
		// Gather then scatter back the same blocks: one call is both.
		send, all := make([]float64, m), make([]float64, p*m)
		return func(ctx context.Context, i int) (bool, error) {
			root := i % p
			for b := range m {
				send[b] = val(i, me, b)
			}
			if err := comm.Gather(ctx, c, send, all, root); err != nil {
				return false, err
			}
			if me == root {
				for r := range p {
					for b := range m {
						if err := check(i, "gather", all[r*m+b], val(i, r, b)); err != nil {
							return false, err
						}
					}
				}
			}
			clear(send)
			if err := comm.Scatter(ctx, c, all, send, root); err != nil {
				return false, err
			}
			for b := range m {
				if err := check(i, "scatter", send[b], val(i, me, b)); err != nil {
					return false, err
				}
			}
			return false, nil
		}, nil
	case "alltoall":
		send, recv := make([]float64, p*m), make([]float64, p*m)
		return func(ctx context.Context, i int) (bool, error) {
			for j := range p {
				for b := range m {
					send[j*m+b] = val(i, me, j*m+b)
				}
			}
			if err := comm.Alltoall(ctx, c, send, recv); err != nil {
				return false, err
			}
			for r := range p {
				for b := range m {
					if err := check(i, "alltoall", recv[r*m+b], val(i, r, me*m+b)); err != nil {
						return false, err
					}
				}
			}
			return false, nil
		}, nil
	}
	return nil, fmt.Errorf("-coll %q: want barrier, bcast, allreduce, reduce, gather, scatter or alltoall", name)
}
