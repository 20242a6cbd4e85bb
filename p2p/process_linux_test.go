package p2p_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/verbs"
)

// Peer loss across processes: a job of three processes over tcp (or shm);
// rank 2 is killed (SIGKILL) or frozen (SIGSTOP: it dies silently and only
// liveness can tell) while ranks 0 and 1 ping-pong and never talk to it.
// Both must fail with ErrPeerLost naming rank 2, within the liveness bound,
// never hang. The test re-executes its own binary as ranks 1 and 2.
func TestProcessPeerLoss(t *testing.T) {
	if role := os.Getenv("P2P_TEST_RANK"); role != "" {
		processChild(t, role)
		return
	}
	for _, prov := range []string{"tcp", "shm"} {
		for _, sig := range []syscall.Signal{syscall.SIGKILL, syscall.SIGSTOP} {
			t.Run(prov+"/"+sig.String(), func(t *testing.T) { processPeerLoss(t, prov, sig) })
		}
	}
}

func processOptions(prov string) p2p.Options {
	return p2p.Options{Provider: prov, Heartbeat: 100 * time.Millisecond, LivenessTimeout: 1500 * time.Millisecond}
}

func processPeerLoss(t *testing.T, prov string, sig syscall.Signal) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, ranks := startProcessJob(ctx, t, "^TestProcessPeerLoss$", prov)

	result := make(chan error, 1)
	go func() { result <- pingPong(ctx, ep, 1) }()
	// The loss comes while the ping-pong runs.
	require.Eventually(t, func() bool { return ep.Stats().Peers[1].EagerRecv.Msgs >= 3 }, 20*time.Second, time.Millisecond, "the ping-pong never ran")
	start := time.Now()
	require.NoError(t, ranks[2].Cmd.Process.Signal(sig))

	select {
	case err := <-result:
		require.NoError(t, checkLost(err, 2), "rank 0: %v", err)
		t.Logf("rank 0 noticed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	case <-ctx.Done():
		t.Fatal("rank 0 never noticed that rank 2 was gone")
	}
	// Rank 1 reports its own error on stdout.
	line := ranks[1].Result()
	require.Contains(t, line, "rank 2 lost", "rank 1's result")
}

// startProcessJob starts a rendezvous and ranks 1 and 2 of a three-rank
// job as child processes running the test named by run, and joins this
// process as rank 0 over prov. Everything ends with the test.
func startProcessJob(ctx context.Context, t *testing.T, run, prov string) (*p2p.Endpoint, []*testbin.Rank) {
	t.Helper()
	token, err := bootstrap.NewToken()
	require.NoError(t, err)
	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Token: token, Size: 3})
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	ranks := testbin.StartRanks(t, run, 3, func(r int) []string {
		return []string{"P2P_TEST_RANK=" + strconv.Itoa(r), "P2P_TEST_ADDR=" + srv.Addr(),
			"P2P_TEST_TOKEN=" + hex.EncodeToString(token), "P2P_TEST_PROVIDER=" + prov}
	})
	ep := joinProcess(ctx, t, 0, srv.Addr(), token, prov)
	t.Cleanup(func() { ep.Close() })
	return ep, ranks
}

func joinProcess(ctx context.Context, t testing.TB, rank int, addr string, token []byte, prov string) *p2p.Endpoint {
	c, err := bootstrap.Dial(ctx, bootstrap.ClientOptions{Addr: addr, Token: token, Rank: rank, Size: 3, Version: "p2p-test"})
	require.NoError(t, err)
	ep, err := p2p.New(ctx, c, processOptions(prov))
	require.NoError(t, err)
	return ep
}

// pingPong exchanges 8-byte messages with peer until something fails.
func pingPong(ctx context.Context, ep *p2p.Endpoint, peer int) error {
	buf := make([]byte, 8)
	for {
		if ep.Rank() < peer {
			if err := ep.Send(ctx, peer, 0, buf); err != nil {
				return err
			}
			if _, err := ep.Recv(ctx, peer, 0, buf); err != nil {
				return err
			}
		} else {
			if _, err := ep.Recv(ctx, peer, 0, buf); err != nil {
				return err
			}
			if err := ep.Send(ctx, peer, 0, buf); err != nil {
				return err
			}
		}
	}
}

// runChild joins a child of startProcessJob as the rank role names and,
// but on rank 2, which idles until killed, runs body; either way it then
// stays until killed: closing could break the link to rank 0 before rank
// 0 is done with what it tests (the parent kills this process then).
func runChild(t *testing.T, role string, body func(ctx context.Context, ep *p2p.Endpoint)) {
	rank, _ := strconv.Atoi(role)
	token, _ := hex.DecodeString(os.Getenv("P2P_TEST_TOKEN"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep := joinProcess(ctx, t, rank, os.Getenv("P2P_TEST_ADDR"), token, os.Getenv("P2P_TEST_PROVIDER"))
	defer ep.Close()
	if rank != 2 {
		body(ctx, ep)
	}
	<-ctx.Done()
}

// processChild ping-pongs with rank 0 until something fails and reports
// the error. It stays on after: gone at once, it could break the link to
// rank 0 before rank 0 has heard of rank 2's loss, and rank 0 would blame
// rank 1.
func processChild(t *testing.T, role string) {
	runChild(t, role, func(ctx context.Context, ep *p2p.Endpoint) {
		fmt.Printf("RESULT %v\n", pingPong(ctx, ep, 0))
	})
}

// A process_vm_readv of a peer that has died fails with ESRCH: that is
// the peer lost (ErrPeerLost naming it, and the endpoint revoked so the
// other ranks learn it too), not an unsupported operation. Before the fix
// a dead root made the collectives' single-copy bcast report "not
// supported".
func TestProcessReadPeerLost(t *testing.T) {
	if role := os.Getenv("P2P_TEST_RANK"); role != "" {
		processChild(t, role)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, ranks := startProcessJob(ctx, t, "^TestProcessReadPeerLost$", "shm")
	// Address 0 is never mapped: a live peer reached by CMA answers with
	// a bad address, one reached otherwise with ErrUnsupported.
	if err := ep.ReadPeer(2, 0, make([]byte, 8)); errors.Is(err, verbs.ErrUnsupported) {
		t.Skipf("no cross-memory attach between these processes: %v", err)
	}
	// One exchange with rank 1 (which then waits in a receive from rank
	// 0) so that it is up before rank 2 goes.
	buf := make([]byte, 8)
	require.NoError(t, ep.Send(ctx, 1, 0, buf))
	_, err := ep.Recv(ctx, 1, 0, buf)
	require.NoError(t, err)
	require.NoError(t, ranks[2].Cmd.Process.Kill())
	_, _ = ranks[2].Cmd.Process.Wait() // gone for good: process_vm_readv now fails with ESRCH
	err = ep.ReadPeer(2, 0, make([]byte, 8))
	require.NoError(t, checkLost(err, 2), "ReadPeer of a dead rank: %v", err)
	require.False(t, errors.Is(err, verbs.ErrUnsupported), "%v", err)
	require.NoError(t, checkLost(ep.Err(), 2), "the endpoint's error")
	// Rank 1 learns it through the revoke (its receive from rank 0 fails).
	require.Contains(t, ranks[1].Result(), "rank 2 lost", "rank 1's result")
}

// TestProcessMeasureCopy: between two processes over shm, MeasureCopy
// times both protocols and both ranks return the same crossover, 0 or
// within the sizes it measured; fed to SetSingleCopyMin on both, a
// message above it goes by rendezvous. The test re-executes its own
// binary as ranks 1 and 2 (rank 2 idles). SetSingleCopyMin applies
// only where the ranks have CPUs of their own.
func TestProcessMeasureCopy(t *testing.T) {
	if role := os.Getenv("P2P_TEST_RANK"); role != "" {
		measureCopyChild(t, role)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, ranks := startProcessJob(ctx, t, "^TestProcessMeasureCopy$", "shm")
	n, err := ep.MeasureCopy(ctx, 1, p2p.CopyProbeOptions{Rounds: 4})
	require.NoError(t, err)
	if n != 0 {
		require.GreaterOrEqual(t, n, 4096)
		require.LessOrEqual(t, n, 32<<10)
	}
	t.Logf("crossover: %d bytes", n)
	// Then rank 1 sets the same crossover and sends 40 KiB (rendezvous
	// where a crossover is set, the pipeline otherwise) and reports how.
	ep.SetSingleCopyMin(n)
	buf := make([]byte, 40<<10)
	_, err = ep.Recv(ctx, 1, 9, buf)
	require.NoError(t, err)
	for i, b := range buf {
		require.Equal(t, byte(i*3), b, "byte %d", i)
	}
	// The job's three processes outnumber a 2-CPU machine's CPUs, and
	// where ranks do the rule stays off (a rendezvous waits for turns).
	want := fmt.Sprintf("RESULT %d rndv=%v", n, n > 0 && !ep.Crowded())
	require.Equal(t, want, strings.TrimSpace(ranks[1].Result()))
}

func measureCopyChild(t *testing.T, role string) {
	runChild(t, role, func(ctx context.Context, ep *p2p.Endpoint) {
		n, err := ep.MeasureCopy(ctx, 0, p2p.CopyProbeOptions{})
		if err != nil {
			fmt.Printf("RESULT %v\n", err)
			return
		}
		ep.SetSingleCopyMin(n)
		buf := make([]byte, 40<<10)
		for i := range buf {
			buf[i] = byte(i * 3)
		}
		before := ep.Stats().Peers[0].RndvSent.Msgs
		if err := ep.Send(ctx, 0, 9, buf); err != nil {
			fmt.Printf("RESULT %v\n", err)
		} else {
			fmt.Printf("RESULT %d rndv=%v\n", n, ep.Stats().Peers[0].RndvSent.Msgs == before+1)
		}
	})
}
