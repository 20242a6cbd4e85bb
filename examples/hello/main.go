// Command hello is the first rdmago program: every rank says who it is, where
// it runs, and which transport carries its traffic to every other rank.
//
//	go run ./cmd/rdmarun -np 4 ./examples/hello
//
// Each rank prints one line, e.g.
//
//	hello: rank 1 of 4 on host box (local 1 of 4); peers 0=shm 1=self 2=shm 3=shm
//
// and, after a barrier, rank 0 prints "hello: 4 ranks OK".
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/rdmago/rdmago/comm"
)

func main() {
	ctx := context.Background()
	// Singleton lets "go run ./examples/hello" work without rdmarun too.
	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	peers := make([]string, c.Size())
	for r := range c.Size() {
		peers[r] = fmt.Sprintf("%d=%s", r, c.Transport(r))
	}
	fmt.Printf("hello: rank %d of %d on host %s (local %d of %d); peers %s\n",
		c.Rank(), c.Size(), host, c.LocalRank(), c.LocalSize(), strings.Join(peers, " "))

	// Count the ranks that got here: an allreduce of ones must give Size.
	one := []int64{1}
	if err := comm.Allreduce(ctx, c, one, comm.Sum); err != nil {
		log.Fatal(err)
	}
	if c.Rank() == 0 {
		if one[0] != int64(c.Size()) {
			fmt.Printf("hello: %d ranks answered, want %d FAIL\n", one[0], c.Size())
			c.Abort(1)
		}
		fmt.Printf("hello: %d ranks OK\n", c.Size())
	}
}
