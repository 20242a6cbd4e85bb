package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/p2p"
)

var panicRank = flag.Int("panic-rank", -1, "this rank panics inside an allreduce (in its reduction function) after the first allreduce; the others then wait for it in a barrier")

// options are the communicator's options. With -panic-rank, Close may wait
// a minute for messages in flight, so that a panicking rank whose deferred
// Close waited out that bound before its trace could be printed is plain
// to see (the default bound is 5 s).
func options() comm.Options {
	var o comm.Options
	if *panicRank >= 0 {
		o.P2P = p2p.Options{CloseTimeout: time.Minute}
	}
	o.P2P.LivenessTimeout = *liveness
	return o
}

// panicInCollective runs an allreduce whose user-defined reduction panics
// on rank -panic-rank, the way a bug in user code panics inside a
// collective; run's deferred Close then runs before the runtime prints the
// trace. The other ranks wait for the panicking one in a barrier it never
// joins, until the launcher stops them.
func panicInCollective(ctx context.Context, c *comm.Comm) error {
	me := c.Rank()
	op := comm.NewOp("sum-or-panic", true, func(inout, in []int64) {
		if me == *panicRank {
			fmt.Fprintf(os.Stderr, "testprog: rank %d panics in its reduction\n", me)
			panic(fmt.Sprintf("testprog: rank %d panics as told", me))
		}
		for i := range inout {
			inout[i] += in[i]
		}
	})
	if err := comm.Allreduce(ctx, c, []int64{int64(me)}, op); err != nil {
		return err
	}
	if err := comm.Barrier(ctx, c); err != nil {
		return err
	}
	return fmt.Errorf("rank %d: the barrier without rank %d returned", me, *panicRank)
}
