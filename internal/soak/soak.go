package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/rdmago/rdmago/comm"
)

// Run runs Round on c, on every rank, until d has passed on rank 0 and at
// least `least` rounds have run; rank 0 draws the seed and decides when to
// stop, and every rank learns both by broadcast. after, if not nil, runs
// on every rank after each round (a barrier and a measurement, say). It
// returns the number of rounds; a failed round's error names the round and
// the seed, which replays it.
func Run(ctx context.Context, c *comm.Comm, d time.Duration, least int, after func(round int) error) (int, error) {
	seed := []int64{time.Now().UnixNano()}
	if err := comm.Bcast(ctx, c, seed, 0); err != nil {
		return 0, err
	}
	rng := rand.New(rand.NewPCG(uint64(seed[0]), 7))
	deadline := time.Now().Add(d)
	for round := 0; ; round++ {
		stop := []int32{0}
		if c.Rank() == 0 && time.Now().After(deadline) && round >= least {
			stop[0] = 1
		}
		if err := comm.Bcast(ctx, c, stop, 0); err != nil {
			return round, err
		}
		if stop[0] == 1 {
			return round, nil
		}
		if err := Round(ctx, c, rng, round); err != nil {
			return round, fmt.Errorf("round %d (seed %d): %w", round, seed[0], err)
		}
		if after != nil {
			if err := after(round); err != nil {
				return round, err
			}
		}
	}
}

// Round runs one random operation on c, drawn from rng (every rank must
// draw the same sequence: give each the same seed), and checks its result
// against a serial computation; round varies the data. The error names
// the operation, its size and what differed.
func Round(ctx context.Context, c *comm.Comm, rng *rand.Rand, round int) error {
	// Sometimes on a random sub-communicator, closed after the round.
	if rng.IntN(4) == 0 {
		k := 1 + rng.IntN(3)
		salt := rng.IntN(1000)
		sub, err := c.Split(ctx, (c.Rank()*7+salt)%k, rng.IntN(5)-c.Rank())
		if err != nil {
			return fmt.Errorf("split: %w", err)
		}
		defer sub.Close()
		c = sub
	}
	p, me := c.Size(), c.Rank()
	// Over tcp 240 000 bytes is an eager message read as it arrives and
	// steered into place (p2p); 320 000 goes by rendezvous.
	n := []int{0, 1, 3, 17, 1000, 30000, 40000}[rng.IntN(7)]
	root := rng.IntN(p)
	val := func(r, i int) int64 { return int64(r*1000003+i*31+round) % 99991 }
	mine := make([]int64, n)
	for i := range mine {
		mine[i] = val(me, i)
	}
	switch op := rng.IntN(8); op {
	case 0: // allreduce, sum or max
		useMax := rng.IntN(2) == 0
		o := comm.Sum
		if useMax {
			o = comm.Max
		}
		if err := comm.Allreduce(ctx, c, mine, o); err != nil {
			return err
		}
		for i, x := range mine {
			var want int64
			for r := range p {
				if useMax {
					want = max(want, val(r, i))
				} else {
					want += val(r, i)
				}
			}
			if x != want {
				return fmt.Errorf("allreduce (max %v) of %d on %d ranks: element %d is %d, want %d", useMax, n, p, i, x, want)
			}
		}
	case 1: // bcast
		buf := make([]int64, n)
		if me == root {
			copy(buf, mine)
		}
		if err := comm.Bcast(ctx, c, buf, root); err != nil {
			return err
		}
		for i, x := range buf {
			if x != val(root, i) {
				return fmt.Errorf("bcast of %d from %d: element %d is %d", n, root, i, x)
			}
		}
	case 2: // reduce
		if err := comm.Reduce(ctx, c, mine, comm.Sum, root); err != nil {
			return err
		}
		if me == root {
			for i, x := range mine {
				var want int64
				for r := range p {
					want += val(r, i)
				}
				if x != want {
					return fmt.Errorf("reduce of %d to %d: element %d is %d, want %d", n, root, i, x, want)
				}
			}
		}
	case 3: // allgather
		all := make([]int64, n*p)
		if err := comm.Allgather(ctx, c, mine, all); err != nil {
			return err
		}
		for r := range p {
			for i := range n {
				if all[r*n+i] != val(r, i) {
					return fmt.Errorf("allgather of %d: rank %d's element %d is %d", n, r, i, all[r*n+i])
				}
			}
		}
	case 5: // alltoall: block r of rank s's result is block s of rank r's send
		send, recv := make([]int64, n*p), make([]int64, n*p)
		for r := range p {
			for i := range n {
				send[r*n+i] = val(me, r*n+i)
			}
		}
		if err := comm.Alltoall(ctx, c, send, recv); err != nil {
			return err
		}
		for r := range p {
			for i := range n {
				if want := val(r, me*n+i); recv[r*n+i] != want {
					return fmt.Errorf("alltoall of %d: element %d from rank %d is %d, want %d", n, i, r, recv[r*n+i], want)
				}
			}
		}
	case 6: // reduce_scatter: block me of the sum
		send, recv := make([]int64, n*p), make([]int64, n)
		for i := range send {
			send[i] = val(me, i)
		}
		if err := comm.ReduceScatter(ctx, c, send, recv, comm.Sum); err != nil {
			return err
		}
		for i, x := range recv {
			var want int64
			for r := range p {
				want += val(r, me*n+i)
			}
			if x != want {
				return fmt.Errorf("reduce_scatter of %d: element %d is %d, want %d", n, i, x, want)
			}
		}
	case 7: // a window: to every other rank, messages of mixed sizes in flight at once
		return window(ctx, c, rng.IntN(1000), val)
	case 4: // a ring of point-to-point messages
		got := make([]int64, n)
		next, prev := (me+1)%p, (me+p-1)%p
		if _, err := comm.Sendrecv(ctx, c, mine, next, 5, got, prev, 5); err != nil {
			return err
		}
		for i, x := range got {
			if x != val(prev, i) {
				return fmt.Errorf("ring of %d: element %d from %d is %d", n, i, prev, x)
			}
		}
	}
	return nil
}

// window has every rank post, for every other rank, receives and sends
// of several messages of one tag and mixed sizes (eager, eager read as it
// arrives, rendezvous) before it waits for any, so that small messages
// queue behind large ones and large ones find a window backed up; messages
// of one tag between two ranks must arrive in the order they were sent.
func window(ctx context.Context, c *comm.Comm, salt int, val func(r, i int) int64) error {
	sizes := []int{1, 9000, 30000, 2, 40000, 500}
	err := Exchange(ctx, c, 9, 4,
		func(from, to, j int) int { return sizes[(from+to+j+salt)%len(sizes)] },
		func(from, _, j, i int) int64 { return val(from, i+j) })
	if err != nil {
		return fmt.Errorf("window: %w", err)
	}
	return nil
}

// Exchange has every rank of c post, for every other rank, msgs receives
// and then msgs sends of tag before it waits for any: message j from rank
// from to rank to holds size(from, to, j) elements, element i being
// val(from, to, j, i). It checks every element received, so a message
// out of order, misrouted or damaged is named by its index, sender, size
// and element.
func Exchange(ctx context.Context, c *comm.Comm, tag, msgs int, size func(from, to, j int) int, val func(from, to, j, i int) int64) error {
	p, me := c.Size(), c.Rank()
	var reqs []*comm.Request
	got := make(map[[2]int][]int64)
	for r := range p {
		if r == me {
			continue
		}
		for j := range msgs {
			buf := make([]int64, size(r, me, j))
			got[[2]int{r, j}] = buf
			rq, err := comm.Irecv(ctx, c, buf, r, tag)
			if err != nil {
				return err
			}
			reqs = append(reqs, rq)
		}
	}
	for r := range p {
		if r == me {
			continue
		}
		for j := range msgs {
			buf := make([]int64, size(me, r, j))
			for i := range buf {
				buf[i] = val(me, r, j, i)
			}
			rq, err := comm.Isend(ctx, c, buf, r, tag)
			if err != nil {
				return err
			}
			reqs = append(reqs, rq)
		}
	}
	if err := comm.WaitAll(ctx, reqs...); err != nil {
		return err
	}
	for k, buf := range got {
		for i, x := range buf {
			if want := val(k[0], me, k[1], i); x != want {
				return fmt.Errorf("message %d (%d elements) from rank %d: element %d is %d, want %d", k[1], len(buf), k[0], i, x, want)
			}
		}
	}
	return nil
}
