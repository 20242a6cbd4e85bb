package comm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"sync"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

// inProcess runs body on n ranks in this process (goroutines joined by an
// in-memory rendezvous over the loop transport), the way a test or a
// notebook might; a real program calls comm.FromEnv under rdmarun.
func inProcess(n int, body func(ctx context.Context, c *comm.Comm) string) []string {
	ctx := context.Background()
	stores, err := bootstrap.NewMemory(n)
	if err != nil {
		log.Fatal(err)
	}
	out := make([]string, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer stores[r].Close()
			c, err := comm.Init(ctx, comm.Options{Store: stores[r], Transport: "loop", NoEnv: true})
			if err != nil {
				log.Fatal(err)
			}
			defer c.Close()
			out[r] = body(ctx, c)
		}()
	}
	wg.Wait()
	return out
}

func Example() {
	out := inProcess(4, func(ctx context.Context, c *comm.Comm) string {
		grads := []float32{float32(c.Rank()), 1}
		if err := comm.Allreduce(ctx, c, grads, comm.Sum); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("rank %d of %d: %v", c.Rank(), c.Size(), grads)
	})
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// rank 0 of 4: [6 4]
	// rank 1 of 4: [6 4]
	// rank 2 of 4: [6 4]
	// rank 3 of 4: [6 4]
}

func ExampleSend() {
	out := inProcess(2, func(ctx context.Context, c *comm.Comm) string {
		if c.Rank() == 0 {
			if err := comm.Send(ctx, c, []int64{7, 8, 9}, 1, 42); err != nil {
				return err.Error()
			}
			return "sent"
		}
		buf := make([]int64, 10)
		st, err := comm.Recv(ctx, c, buf, comm.AnySource, comm.AnyTag)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%d elements from rank %d, tag %d: %v", st.Count, st.Source, st.Tag, buf[:st.Count])
	})
	fmt.Println(out[1])
	// Output: 3 elements from rank 0, tag 42: [7 8 9]
}

func ExampleComm_Split() {
	out := inProcess(4, func(ctx context.Context, c *comm.Comm) string {
		// Even and odd ranks, each half in reverse order.
		half, err := c.Split(ctx, c.Rank()%2, -c.Rank())
		if err != nil {
			return err.Error()
		}
		defer half.Close()
		sum := []int{c.Rank()}
		if err := comm.Allreduce(ctx, half, sum, comm.Sum); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("world %d -> rank %d of %d, sum %d", c.Rank(), half.Rank(), half.Size(), sum[0])
	})
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// world 0 -> rank 1 of 2, sum 2
	// world 1 -> rank 1 of 2, sum 4
	// world 2 -> rank 0 of 2, sum 2
	// world 3 -> rank 0 of 2, sum 4
}

func ExampleNewOp() {
	// A non-commutative user op: keep the element of the highest rank
	// whose value is not zero.
	lastNonZero := comm.NewOp("last-non-zero", false, func(inout, in []int32) {
		for i, v := range in {
			if v != 0 {
				inout[i] = v
			}
		}
	})
	out := inProcess(3, func(ctx context.Context, c *comm.Comm) string {
		buf := [][]int32{{1, 0, 3}, {0, 5, 0}, {0, 0, 0}}[c.Rank()]
		if err := comm.Allreduce(ctx, c, buf, lastNonZero); err != nil {
			return err.Error()
		}
		return fmt.Sprint(buf)
	})
	fmt.Println(out[0])
	// Output: [1 5 3]
}

func ExampleIallreduce() {
	out := inProcess(2, func(ctx context.Context, c *comm.Comm) string {
		buf := []float64{1.5, 2.5}
		req, err := comm.Iallreduce(ctx, c, buf, comm.Max)
		if err != nil {
			return err.Error()
		}
		// ... compute something else while the allreduce runs ...
		if _, err := req.Wait(ctx); err != nil {
			return err.Error()
		}
		return fmt.Sprint(buf)
	})
	fmt.Println(out[1])
	// Output: [1.5 2.5]
}

func ExampleOpError() {
	out := inProcess(2, func(ctx context.Context, c *comm.Comm) string {
		err := comm.Send(ctx, c, []byte("x"), 5, 0)
		var oe *comm.OpError
		if errors.As(err, &oe) && errors.Is(err, comm.ErrInvalidRank) {
			return fmt.Sprintf("%s failed on rank %d: %v", oe.Op, oe.Rank, err)
		}
		return "?"
	})
	fmt.Println(out[0])
	// Output: Send failed on rank 0: comm: Send on rank 0 of 2: peer 5, tag 0: invalid rank: rank 5 is not in [0, 2)
}

func ExampleComm_CreateGroup() {
	out := inProcess(4, func(ctx context.Context, c *comm.Comm) string {
		// Ranks 3 and 1 form a communicator; ranks 0 and 2 are not
		// involved and do not call CreateGroup.
		if c.Rank()%2 == 0 {
			return fmt.Sprintf("world %d: not in the group", c.Rank())
		}
		g, err := c.CreateGroup(ctx, []int{3, 1})
		if err != nil {
			return err.Error()
		}
		defer g.Close()
		sum := []int{c.Rank()}
		if err := comm.Allreduce(ctx, g, sum, comm.Sum); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("world %d -> rank %d of %d, sum %d", c.Rank(), g.Rank(), g.Size(), sum[0])
	})
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// world 0: not in the group
	// world 1 -> rank 1 of 2, sum 4
	// world 2: not in the group
	// world 3 -> rank 0 of 2, sum 4
}

func ExampleBcastVar() {
	out := inProcess(3, func(ctx context.Context, c *comm.Comm) string {
		var rec []byte
		if c.Rank() == 0 {
			rec = []byte(`{"step":42,"lr":0.01}`) // only the root knows the length
		}
		rec, err := comm.BcastVar(ctx, c, rec, 0)
		if err != nil {
			return err.Error()
		}
		return string(rec)
	})
	fmt.Println(out[2])
	// Output: {"step":42,"lr":0.01}
}

func ExampleIrecv() {
	out := inProcess(2, func(ctx context.Context, c *comm.Comm) string {
		peer := 1 - c.Rank()
		recv := make([]int32, 2)
		// The ctx given at the start bounds the request: if it ends before
		// a message matched, Wait reports ErrCanceled and ctx's error.
		rr, err := comm.Irecv(ctx, c, recv, peer, 0)
		if err != nil {
			return err.Error()
		}
		sr, err := comm.Isend(ctx, c, []int32{int32(c.Rank()), 10}, peer, 0)
		if err != nil {
			return err.Error()
		}
		if err := comm.WaitAll(ctx, rr, sr); err != nil {
			return err.Error()
		}
		return fmt.Sprint(recv)
	})
	fmt.Println(out[0], out[1])
	// Output: [1 10] [0 10]
}

func ExampleWaitAny() {
	out := inProcess(3, func(ctx context.Context, c *comm.Comm) string {
		// A gather of variable-length pieces and a prefix sum, in flight
		// together; handle whichever finishes first.
		counts := []int{1, 2, 3}
		piece := make([]int32, counts[c.Rank()])
		for i := range piece {
			piece[i] = int32(c.Rank())
		}
		var all []int32
		if c.Rank() == 0 {
			all = make([]int32, 6)
		}
		g, err := comm.Igatherv(ctx, c, piece, all, counts, 0)
		if err != nil {
			return err.Error()
		}
		prefix := []int{c.Rank() + 1}
		s, err := comm.Iscan(ctx, c, prefix, comm.Sum)
		if err != nil {
			return err.Error()
		}
		reqs := []*comm.Request{g, s}
		for range reqs {
			i, _, err := comm.WaitAny(ctx, reqs...)
			if err != nil {
				return err.Error()
			}
			reqs[i] = nil
		}
		if c.Rank() == 0 {
			return fmt.Sprint("gathered ", all, ", prefix ", prefix[0])
		}
		return fmt.Sprint("prefix ", prefix[0])
	})
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// gathered [0 1 1 2 2 2], prefix 1
	// prefix 3
	// prefix 6
}

func ExampleAllreduceInit() {
	out := inProcess(2, func(ctx context.Context, c *comm.Comm) string {
		grads := make([]float64, 3)
		// Set up once: the algorithm and the reduction kernel are chosen
		// here, not at every step.
		ar, err := comm.AllreduceInit(ctx, c, grads, comm.Sum)
		if err != nil {
			return err.Error()
		}
		defer ar.Free()
		var steps []string
		for step := range 3 {
			for i := range grads {
				grads[i] = float64((c.Rank() + 1) * (step + i))
			}
			if err := ar.Start(ctx); err != nil {
				return err.Error()
			}
			// ... compute something that does not touch grads ...
			if err := ar.Wait(ctx); err != nil {
				return err.Error()
			}
			steps = append(steps, fmt.Sprint(grads))
		}
		return fmt.Sprint(steps)
	})
	fmt.Println(out[0])
	// Output: [[0 3 6] [3 6 9] [6 9 12]]
}

func ExampleNewBatch() {
	out := inProcess(3, func(ctx context.Context, c *comm.Comm) string {
		// A halo exchange on a ring: send to both neighbours, receive from
		// both, posted together and completed as one request.
		p, me := c.Size(), c.Rank()
		left, right := (me+p-1)%p, (me+1)%p
		fromLeft, fromRight := make([]int32, 1), make([]int32, 1)
		b := comm.NewBatch(c)
		for _, err := range []error{
			comm.BatchRecv(b, fromLeft, left, 0),
			comm.BatchRecv(b, fromRight, right, 1),
			comm.BatchSend(b, []int32{int32(10 * me)}, right, 0),
			comm.BatchSend(b, []int32{int32(10 * me)}, left, 1),
		} {
			if err != nil {
				return err.Error()
			}
		}
		req, err := b.Start(ctx)
		if err != nil {
			return err.Error()
		}
		if _, err := req.Wait(ctx); err != nil {
			return err.Error()
		}
		return fmt.Sprintf("rank %d: left sent %d, right sent %d", me, fromLeft[0], fromRight[0])
	})
	for _, line := range out {
		fmt.Println(line)
	}
	// Output:
	// rank 0: left sent 20, right sent 10
	// rank 1: left sent 0, right sent 20
	// rank 2: left sent 10, right sent 0
}

func ExampleNewWin() {
	out := inProcess(3, func(ctx context.Context, c *comm.Comm) string {
		// Every rank exposes a slot per rank and Puts its rank number
		// into its slot of every window; after the fence every window
		// holds all of them. Then it Gets the next rank's window.
		local := make([]int64, c.Size())
		w, err := comm.NewWin(ctx, c, local)
		if err != nil {
			return err.Error()
		}
		defer w.Close(ctx)
		for r := range c.Size() {
			if err := w.Put(r, c.Rank(), []int64{int64(100 + c.Rank())}); err != nil {
				return err.Error()
			}
		}
		if err := w.Fence(ctx); err != nil {
			return err.Error()
		}
		next := make([]int64, c.Size())
		if err := w.Get((c.Rank()+1)%c.Size(), 0, next); err != nil {
			return err.Error()
		}
		if err := w.Flush(ctx); err != nil {
			return err.Error()
		}
		return fmt.Sprint(local, next)
	})
	fmt.Println(out[0])
	// Output: [100 101 102] [100 101 102]
}
