package p2p_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// sendCounted sends an n-byte message from eps[0] to eps[1] (SendNow
// first, as the collectives do, then Isend) and reports how it went:
// "eager" or "rndv", from the sender's counters.
func sendCounted(ctx context.Context, t *testing.T, eps []*p2p.Endpoint, n int) string {
	t.Helper()
	before := eps[0].Stats().Peers[1]
	buf := make([]byte, n)
	for i := range buf {
		buf[i] = byte(i*7 + n)
	}
	got := make([]byte, n)
	rr, err := eps[1].Irecv(0, 3, got)
	require.NoError(t, err)
	if sent, err := eps[0].SendNow(1, 3, buf); err != nil || !sent {
		require.NoError(t, err)
		require.NoError(t, eps[0].Send(ctx, 1, 3, buf))
	}
	_, err = rr.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, buf, got, "%d bytes arrived changed", n)
	after := eps[0].Stats().Peers[1]
	switch {
	case after.RndvSent.Msgs == before.RndvSent.Msgs+1:
		return "rndv"
	case after.EagerSent.Msgs == before.EagerSent.Msgs+1 || after.PipeSent.Msgs == before.PipeSent.Msgs+1:
		return "eager"
	}
	t.Fatalf("%d bytes: neither an eager nor a rendezvous send counted: before %+v after %+v", n, before, after)
	return ""
}

// TestSingleCopyMinTakesRendezvous: over shm, a message larger than the
// crossover SetSingleCopyMin gives goes by rendezvous (also when sent
// with SendNow, which then declines), smaller ones and every message
// without a crossover eagerly; Options.SingleCopyMin wins over
// SetSingleCopyMin, and a negative one turns the rule off.
func TestSingleCopyMinTakesRendezvous(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name  string
		opt   int // Options.SingleCopyMin
		set   int // SetSingleCopyMin, on both ranks
		want  int // SingleCopyMin(peer) after
		sizes map[int]string
	}{
		{name: "none", sizes: map[int]string{4096: "eager", 16 << 10: "eager", 32 << 10: "eager"}},
		{name: "set", set: 6000, want: 6000, sizes: map[int]string{4096: "eager", 6000: "eager", 6001: "rndv", 16 << 10: "rndv", 48 << 10: "rndv"}},
		{name: "option", opt: 10000, set: 6000, want: 10000, sizes: map[int]string{8192: "eager", 16 << 10: "rndv"}},
		{name: "option-off", opt: -1, set: 6000, want: 0, sizes: map[int]string{16 << 10: "eager"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "shm", P2P: p2p.Options{SingleCopyMin: tc.opt}})
			require.NoError(t, err)
			defer p2ptest.Close(eps)
			if eps[0].Crowded() {
				t.Skip("the ranks outnumber this machine's CPUs: the rule does not apply")
			}
			if tc.set != 0 {
				for _, ep := range eps {
					ep.SetSingleCopyMin(tc.set)
				}
			}
			require.Equal(t, tc.want, eps[0].SingleCopyMin(1))
			for n, want := range tc.sizes {
				require.Equal(t, want, sendCounted(ctx, t, eps, n), "a message of %d bytes", n)
			}
		})
	}
}

// TestMeasureCopyNeedsAnotherProcess: between ranks of one process (their
// rendezvous READ is a plain copy) or over tcp there is nothing to
// choose, and MeasureCopy says so on both ranks with 0; a rank that is
// not a peer is an error naming it.
func TestMeasureCopyNeedsAnotherProcess(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, prov := range []string{"shm", "tcp"} {
		t.Run(prov, func(t *testing.T) {
			eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: prov})
			require.NoError(t, err)
			defer p2ptest.Close(eps)
			got := make([]int, 2)
			errs := make(chan error, 2)
			for r, ep := range eps {
				go func() {
					var err error
					got[r], err = ep.MeasureCopy(ctx, 1-r, p2p.CopyProbeOptions{})
					errs <- err
				}()
			}
			require.NoError(t, <-errs)
			require.NoError(t, <-errs)
			require.Equal(t, []int{0, 0}, got)
			_, err = eps[0].MeasureCopy(ctx, 5, p2p.CopyProbeOptions{})
			require.ErrorIs(t, err, p2p.ErrInvalidRank)
			require.ErrorContains(t, err, "rank 5")
		})
	}
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
	rank, _ := strconv.Atoi(role)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep := joinProcessEnv(ctx, t, rank)
	defer ep.Close()
	if rank == 2 {
		<-ctx.Done() // until killed
		return
	}
	n, err := ep.MeasureCopy(ctx, 0, p2p.CopyProbeOptions{})
	if err != nil {
		fmt.Printf("RESULT %v\n", err)
		<-ctx.Done()
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
	<-ctx.Done()
}

// joinProcessEnv joins a child of startProcessJob as rank.
func joinProcessEnv(ctx context.Context, t *testing.T, rank int) *p2p.Endpoint {
	token, _ := hex.DecodeString(os.Getenv("P2P_TEST_TOKEN"))
	return joinProcess(ctx, t, rank, os.Getenv("P2P_TEST_ADDR"), token, os.Getenv("P2P_TEST_PROVIDER"))
}
