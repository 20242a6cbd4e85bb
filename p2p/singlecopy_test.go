package p2p_test

import (
	"context"
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
