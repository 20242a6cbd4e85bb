// Command testprog is the rank program of the real-launcher tests
// (mpiexec, srun, mpirun, torchrun-style variables, rdmarun inside
// salloc). It joins the job with launchers.Detect and Connect, allgathers
// a short and a 1024-byte value, checks that every rank sees every other's,
// and prints one line per rank:
//
//	ok rank=1 size=4 local=1/4 launcher=pmi via="MPICH Hydra (mpiexec)" token=32
//
// On any error it prints "testprog: ERROR" and the error on stderr and
// exits 1. -allreduce then runs comm.Init over the same store and checks
// an allreduce of 1000 float64s. -abort-rank R makes rank R abort the job with code 7 after the
// allgather (through the store when it can, PMI abort under PMI).
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/comm/internal/launchers"
)

var (
	abortRank = flag.Int("abort-rank", -1, "this rank aborts the job with code 7 after the allgather")
	mismatch  = flag.Int("mismatch-rank", -1, "this rank joins with a different Config (a version/configuration mismatch)")
	allreduce = flag.Bool("allreduce", false, "then open a communicator over the same rendezvous (comm.Init) and check an allreduce")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "testprog: ERROR: %v\n", err)
		os.Exit(1)
	}
}

func big(r int) []byte {
	b := make([]byte, bootstrap.MaxValueLen)
	for i := range b {
		b[i] = byte(i*31 + r)
	}
	return b
}

func run() error {
	l, err := launchers.Detect(os.LookupEnv)
	if err != nil {
		return err
	}
	for _, w := range l.Warnings {
		fmt.Fprintln(os.Stderr, w)
	}
	for _, k := range l.Secrets {
		os.Unsetenv(k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(l.Timeout, 60*time.Second))
	defer cancel()
	config := "tcp"
	if l.Rank == *mismatch && l.Rank >= 0 {
		config = "other"
	}
	rv, err := l.Connect(ctx, launchers.ConnectOptions{Version: "testprog", Config: config})
	if err != nil {
		return err
	}
	defer rv.Close()
	s := rv.Store
	short, err := bootstrap.Allgather(ctx, s, "hello", fmt.Appendf(nil, "rank=%d pid=%d", s.Rank(), os.Getpid()))
	if err != nil {
		return err
	}
	long, err := bootstrap.Allgather(ctx, s, "big", big(s.Rank()))
	if err != nil {
		return err
	}
	for r := range s.Size() {
		if !bytes.HasPrefix(short[r], fmt.Appendf(nil, "rank=%d pid=", r)) {
			return fmt.Errorf("rank %d: got %q from rank %d", s.Rank(), short[r], r)
		}
		if !bytes.Equal(long[r], big(r)) {
			return fmt.Errorf("rank %d: the 1024-byte value from rank %d differs", s.Rank(), r)
		}
	}
	if s.Rank() == *abortRank {
		if a, ok := s.(bootstrap.Aborter); ok {
			if err := a.Abort(ctx, 7, "testprog -abort-rank"); err != nil {
				return err
			}
			time.Sleep(30 * time.Second) // the launcher kills the job
		}
		os.Exit(7)
	}
	if err := bootstrap.Barrier(ctx, s); err != nil {
		return err
	}
	if *allreduce {
		// What comm.FromEnv will do once it calls this package: the
		// launcher's store and secret handed to comm.Init.
		c, err := comm.Init(ctx, comm.Options{Store: s, Token: rv.Token, Transport: l.Transport})
		if err != nil {
			return err
		}
		n := 1000
		buf := make([]float64, n)
		for i := range buf {
			buf[i] = float64(s.Rank()*n + i)
		}
		if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
			c.Close()
			return err
		}
		p := s.Size()
		for i, v := range buf {
			// sum over r of (r*n + i) = n*p(p-1)/2 + p*i
			if want := float64(n*p*(p-1)/2 + p*i); v != want {
				c.Close()
				return fmt.Errorf("rank %d: allreduce element %d = %v, want %v", s.Rank(), i, v, want)
			}
		}
		if err := c.Close(); err != nil {
			return err
		}
		fmt.Printf("allreduce ok rank=%d\n", s.Rank())
	}
	fmt.Printf("ok rank=%d size=%d local=%d/%d launcher=%s via=%q token=%d\n", s.Rank(), s.Size(), l.LocalRank, l.LocalSize, l.Launcher, l.Via, len(rv.Token))
	return nil
}
