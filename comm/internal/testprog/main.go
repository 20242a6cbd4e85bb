// Command testprog is the rank program of comm's multi-process tests: it
// joins the job with comm.FromEnv (the real RDMARUN_* contract), runs an
// allreduce, a broadcast, a split and a ring of messages, checks every
// result, and prints one line per rank:
//
//	ok rank=1 size=4 local=1/4 transports=shm,self,shm,shm sum=10
//
// -abort-rank R makes rank R call Abort(-abort-code) after the first
// allreduce; the others then block in a receive the aborting rank never
// answers, which the launcher must end. -panic-rank R makes rank R panic
// inside the next allreduce (see panicInCollective). -leave-rank R makes
// rank R close its communicator and exit 0 there; the others run barriers,
// which must fail naming it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/comm"
)

var (
	abortRank = flag.Int("abort-rank", -1, "this rank calls Abort(-abort-code) after the first allreduce")
	abortCode = flag.Int("abort-code", 3, "exit code for -abort-rank")
	n         = flag.Int("n", 100003, "elements in the allreduce")
	leaveRank = flag.Int("leave-rank", -1, "this rank closes its communicator and exits 0 after the first allreduce")
	countRank = flag.Int("count-rank", -1, "this rank passes one element more to the first allreduce")
	stopRank  = flag.Int("stop-rank", -1, "this rank stops itself (SIGSTOP) after the first allreduce; the others run allreduces until they fail")
	liveness  = flag.Duration("liveness", 0, "p2p liveness timeout (0: the default), so that a test may stop a rank longer or detect a loss sooner")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "testprog: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := options()
	if *liveness > 0 {
		o.P2P.Heartbeat, o.P2P.LivenessTimeout = *liveness/10, *liveness
	}
	c, err := comm.FromEnv(ctx, o)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, ok := os.LookupEnv("RDMARUN_TOKEN"); ok {
		return fmt.Errorf("RDMARUN_TOKEN is still set after FromEnv")
	}
	p, me := c.Size(), c.Rank()

	// Allreduce of integer-valued floats: exact in any order.
	buf := make([]float64, *n)
	if me == *countRank {
		buf = make([]float64, *n+1)
	}
	for i := range buf {
		buf[i] = float64(me*7 + i%13)
	}
	if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
		return err
	}
	for i, x := range buf {
		want := float64(7*p*(p-1)/2 + p*(i%13))
		if x != want {
			return fmt.Errorf("allreduce: element %d is %v, want %v", i, x, want)
		}
	}
	if me == *abortRank {
		c.Abort(*abortCode)
	}
	if *loopUntil != "" {
		return loop(ctx, c)
	}
	if *panicRank >= 0 {
		return panicInCollective(ctx, c)
	}
	if me == *stopRank {
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Minute) // rdmarun ends the job
	}
	if *stopRank >= 0 {
		for i := 0; ; i++ {
			if err := comm.Allreduce(ctx, c, []float64{1}, comm.Sum); err != nil {
				return fmt.Errorf("rank %d: allreduce %d after rank %d stopped: %w", me, i, *stopRank, err)
			}
		}
	}
	if me == *leaveRank {
		fmt.Printf("left rank=%d\n", me)
		return c.Close()
	}
	if *leaveRank >= 0 {
		// The others go on; their next collective that needs the leaver
		// must fail (naming it), not wait for it.
		for i := 0; ; i++ {
			if err := comm.Barrier(ctx, c); err != nil {
				return fmt.Errorf("rank %d: barrier %d after rank %d left: %w", me, i, *leaveRank, err)
			}
		}
	}
	if *abortRank >= 0 {
		_, err := comm.Recv(ctx, c, make([]byte, 1), *abortRank, 0)
		return fmt.Errorf("rank %d: receive from the aborting rank returned: %v", me, err)
	}

	// Broadcast from the last rank, a split into halves, a ring.
	word := []byte("rdmago")
	if me != p-1 {
		word = make([]byte, len(word))
	}
	if err := comm.Bcast(ctx, c, word, p-1); err != nil {
		return err
	}
	if string(word) != "rdmago" {
		return fmt.Errorf("bcast: %q", word)
	}
	half, err := c.Split(ctx, me%2, me)
	if err != nil {
		return err
	}
	defer half.Close()
	cnt := []int32{1}
	if err := comm.Allreduce(ctx, half, cnt, comm.Sum); err != nil {
		return err
	}
	if want := (p + 1 - me%2) / 2; int(cnt[0]) != want {
		return fmt.Errorf("split: %d ranks of color %d, want %d", cnt[0], me%2, want)
	}
	got := []int64{-1}
	st, err := comm.Sendrecv(ctx, c, []int64{int64(me)}, (me+1)%p, 1, got, (me+p-1)%p, 1)
	if err != nil {
		return err
	}
	if got[0] != int64((me+p-1)%p) || st.Source != (me+p-1)%p {
		return fmt.Errorf("ring: got %v from %d", got, st.Source)
	}
	if err := comm.Barrier(ctx, c); err != nil {
		return err
	}
	var tr []string
	for r := range p {
		tr = append(tr, c.Transport(r))
	}
	fmt.Printf("ok rank=%d size=%d local=%d/%d transports=%s sum=%v\n", me, p, c.LocalRank(), c.LocalSize(), strings.Join(tr, ","), buf[0])
	fmt.Printf("copies rank=%d single=%d\n", me, c.SingleCopyMin())
	return nil
}
