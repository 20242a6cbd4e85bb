// Command ring passes a token around the ranks: rank 0 starts it at 0, every
// rank adds its own rank and hands it to the next, and after each lap rank 0
// checks that it came back as 0+1+…+(p−1) more than it left.
//
//	go run ./cmd/rdmarun -np 4 ./examples/ring -laps 3
//
// Rank 0 prints "ring: 3 laps over 4 ranks, token 18 (want 18) OK".
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/rdmago/rdmago/comm"
)

const tag = 7

func main() {
	laps := flag.Int("laps", 3, "times the token goes around")
	timeout := flag.Duration("timeout", time.Minute, "give up after this long")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	c, err := comm.FromEnv(ctx, comm.Options{Singleton: true})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	token, err := ring(ctx, c, *laps)
	if err != nil {
		log.Fatal(err)
	}
	if c.Rank() == 0 {
		p := int64(c.Size())
		want := int64(*laps) * p * (p - 1) / 2
		if token != want {
			fmt.Printf("ring: %d laps over %d ranks, token %d (want %d) FAIL\n", *laps, p, token, want)
			c.Abort(1)
		}
		fmt.Printf("ring: %d laps over %d ranks, token %d (want %d) OK\n", *laps, p, token, want)
	}
}

// ring runs the laps and returns the token as rank 0 last received it.
func ring(ctx context.Context, c *comm.Comm, laps int) (int64, error) {
	next, prev := (c.Rank()+1)%c.Size(), (c.Rank()+c.Size()-1)%c.Size()
	tok := []int64{0}
	for range laps {
		if c.Rank() == 0 {
			// Isend, not Send: with one rank, rank 0 is its own neighbour
			// and must be able to post the receive before the send is done.
			req, err := comm.Isend(ctx, c, tok, next, tag)
			if err != nil {
				return 0, err
			}
			in := []int64{0}
			if _, err := comm.Recv(ctx, c, in, prev, tag); err != nil {
				return 0, err
			}
			if _, err := req.Wait(ctx); err != nil {
				return 0, err
			}
			tok[0] = in[0]
			continue
		}
		if _, err := comm.Recv(ctx, c, tok, prev, tag); err != nil {
			return 0, err
		}
		tok[0] += int64(c.Rank())
		if err := comm.Send(ctx, c, tok, next, tag); err != nil {
			return 0, err
		}
	}
	return tok[0], nil
}
