package comm_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/rdmago/rdmago/p2p"
)

// A rank of a one-host job dies (SIGKILL) or freezes (SIGSTOP: only
// liveness can tell) while the others run small allreduces through the
// world's shared memory, where they wait on flags, not messages: both
// survivors must fail with ErrPeerLost naming it, within the liveness
// bound, and never hang. The test re-executes itself as ranks 1 and 2.
func TestSharedMemoryPeerLoss(t *testing.T) {
	if role := os.Getenv("COMM_TEST_RANK"); role != "" {
		sharedLossChild(t, role)
		return
	}
	if testing.Short() {
		t.Skip("starts processes")
	}
	for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
		t.Run(sig.String(), func(t *testing.T) { sharedLoss(t, sig) })
	}
}

func sharedLossOptions() p2p.Options {
	return p2p.Options{Heartbeat: 100 * time.Millisecond, LivenessTimeout: 1500 * time.Millisecond}
}

// sharedLossColl keeps blockCollectives' alltoall, whose 800 KB blocks
// the model sends by messages past shm_alltoall_block_max, on the slots,
// so that it still runs several rounds of them across processes.
func sharedLossColl(t *testing.T) collectives.Options {
	var o collectives.Options
	require.NoError(t, collectives.ParseTuning("shm_alltoall_block_max=max", &o))
	return o
}

func sharedLoss(t *testing.T, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: 3})
	require.NoError(t, err)
	defer srv.Close()

	ranks := testbin.StartRanks(t, "^TestSharedMemoryPeerLoss$", 3, func(r int) []string {
		return []string{"COMM_TEST_RANK=" + strconv.Itoa(r), "COMM_TEST_ADDR=" + srv.Addr(), "COMM_TEST_TOKEN=" + hex.EncodeToString(token)}
	})
	c, err := comm.Init(ctx, comm.Options{Addr: srv.Addr(), Token: token, Rank: 0, Size: 3, NoEnv: true, P2P: sharedLossOptions(),
		Collectives: sharedLossColl(t)})
	require.NoError(t, err)
	defer c.Close()

	result := make(chan error, 1)
	running := make(chan struct{})
	go func() { result <- allreduceLoop(ctx, c, running) }()
	// An allreduce completed here: every rank is in the loop.
	select {
	case <-running:
	case err := <-result:
		t.Fatalf("rank 0 failed before the allreduces ran: %v", err)
	case <-ctx.Done():
		t.Fatal("the allreduces never ran")
	}
	start := time.Now()
	require.NoError(t, ranks[2].Cmd.Process.Signal(sig))
	select {
	case err := <-result:
		r, ok := comm.PeerLost(err)
		require.True(t, ok && r == 2, "rank 0: %v", err)
		t.Logf("rank 0 noticed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-ctx.Done():
		t.Fatal("rank 0 never noticed that rank 2 was gone")
	}
	line := ranks[1].Result()
	require.Contains(t, line, "lost=2", "rank 1's result")
}

// allreduceLoop first checks an 80 KB bcast from rank 1, which the ranks,
// separate processes, read straight out of rank 1's buffer (the
// shared-memory bcast's single-copy form, when process_vm_readv works);
// then it runs 8-byte allreduces (the shared-memory algorithm, which it
// checks) until one fails. It closes running, if not nil, once the first
// allreduce is done.
func allreduceLoop(ctx context.Context, c *comm.Comm, running chan<- struct{}) error {
	big := make([]float64, 10000)
	if c.Rank() == 1 {
		for i := range big {
			big[i] = float64(i*7 + 3)
		}
	}
	if err := comm.Bcast(ctx, c, big, 1); err != nil {
		return err
	}
	for i, v := range big {
		if v != float64(i*7+3) {
			return fmt.Errorf("bcast: element %d is %v, want %v", i, v, float64(i*7+3))
		}
	}
	if c.LastAlgorithm() != "shared_memory" {
		return fmt.Errorf("the bcast ran %s, not shared_memory", c.LastAlgorithm())
	}
	if err := blockCollectives(ctx, c); err != nil {
		return err
	}
	buf := make([]float64, 1)
	for i := 0; ; i++ {
		if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
			return err
		}
		if i == 0 && c.LastAlgorithm() != "shared_memory" {
			return fmt.Errorf("the allreduce ran %s, not shared_memory", c.LastAlgorithm())
		}
		if i == 0 && running != nil {
			close(running)
		}
	}
}

// blockCollectives checks a reduce, an allgather, an alltoall and a
// reduce-scatter (also in place) of a few MB across the processes, each of
// several rounds of the region's slots: the shared-memory algorithms,
// whose choice it checks.
func blockCollectives(ctx context.Context, c *comm.Comm) error {
	const n = 300001 // float64: 2.4 MB, uneven blocks
	me, p := c.Rank(), c.Size()
	val := func(r, i int) float64 { return float64(r*1_000_003 + i) }
	check := func(what string, got []float64, want func(i int) float64) error {
		if c.LastAlgorithm() != "shared_memory" {
			return fmt.Errorf("the %s ran %s, not shared_memory", what, c.LastAlgorithm())
		}
		for i, v := range got {
			if v != want(i) {
				return fmt.Errorf("%s: element %d is %v, want %v", what, i, v, want(i))
			}
		}
		return nil
	}
	buf := make([]float64, n)
	for i := range buf {
		buf[i] = val(me, i)
	}
	if err := comm.Reduce(ctx, c, buf, comm.Sum, 2); err != nil {
		return err
	}
	if me == 2 {
		if err := check("reduce", buf, func(i int) float64 { return val(0, i) + val(1, i) + val(2, i) }); err != nil {
			return err
		}
	}
	blk := n / p
	send := make([]float64, blk)
	for i := range send {
		send[i] = val(me, i)
	}
	recv := make([]float64, blk*p)
	if err := comm.Allgather(ctx, c, send, recv); err != nil {
		return err
	}
	if err := check("allgather", recv, func(i int) float64 { return val(i/blk, i%blk) }); err != nil {
		return err
	}
	send = make([]float64, blk*p)
	for i := range send {
		send[i] = val(me, i) // block j holds [j·blk, (j+1)·blk) of the sender's sequence
	}
	if err := comm.Alltoall(ctx, c, send, recv); err != nil {
		return err
	}
	if err := check("alltoall", recv, func(i int) float64 { return val(i/blk, me*blk+i%blk) }); err != nil {
		return err
	}
	// send still holds block j = [j·blk, (j+1)·blk) of this rank's sequence.
	sum := func(i int) float64 {
		s := 0.0
		for r := range p {
			s += val(r, me*blk+i)
		}
		return s
	}
	out := make([]float64, blk)
	if err := comm.ReduceScatter(ctx, c, send, out, comm.Sum); err != nil {
		return err
	}
	if err := check("reduce_scatter", out, sum); err != nil {
		return err
	}
	if err := comm.ReduceScatterInPlace(ctx, c, send, comm.Sum); err != nil {
		return err
	}
	return check("reduce_scatter in place", send[:blk], sum)
}

func sharedLossChild(t *testing.T, role string) {
	rank, _ := strconv.Atoi(role)
	token, _ := hex.DecodeString(os.Getenv("COMM_TEST_TOKEN"))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := comm.Init(ctx, comm.Options{Addr: os.Getenv("COMM_TEST_ADDR"), Token: token, Rank: rank, Size: 3, NoEnv: true, P2P: sharedLossOptions(),
		Collectives: sharedLossColl(t)})
	if err != nil {
		fmt.Printf("RESULT init: %v\n", err)
		return
	}
	err = allreduceLoop(ctx, c, nil)
	r, ok := comm.PeerLost(err)
	fmt.Printf("RESULT lost=%d ok=%v err=%v\n", r, ok, err)
	<-ctx.Done() // stay until the parent ends this process (see p2p's test)
}
