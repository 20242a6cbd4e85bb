package p2p_test

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/affinity"
	"github.com/rdmago/rdmago/internal/hostid"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
)

// TestTCPPollSpinDefault: the tcp device's waiters poll their sockets
// (verbs.DeviceOptions.PollSpin) by default; when the ranks on the host
// outnumber its CPUs they give the CPU away between polls (PollYield)
// and poll for as long as a crowded waiter over several devices yields
// (20 ms), rather than sleep after 1 ms, since the reply often comes from
// a rank that shares the core and computes first; an explicit setting is
// kept.
func TestTCPPollSpinDefault(t *testing.T) {
	cpus := runtime.NumCPU()
	if l, err := affinity.CPUs(); err == nil {
		cpus = len(l)
	}
	_, hostErr := hostid.ID()
	for _, tc := range []struct {
		name  string
		ranks int
		set   time.Duration
		want  time.Duration
		yield bool
		skip  bool
	}{
		{"a-cpu-each", min(2, cpus), 0, time.Millisecond, false, cpus < 2},
		// Ranks that cannot tell they share the host (no host id) each
		// look alone, so only a known host shows the oversubscription.
		{"oversubscribed", cpus + 1, 0, 20 * time.Millisecond, true, hostErr != nil},
		{"explicit-off", 2, -1, -1, false, false},
		{"explicit", 2, 50 * time.Microsecond, 50 * time.Microsecond, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip {
				t.Skip("not on this machine")
			}
			var mu sync.Mutex
			type seenOpts struct {
				spin  time.Duration
				yield bool
			}
			var seen []seenOpts
			o := p2ptest.Options{Provider: "tcp", P2P: p2p.Options{LivenessTimeout: -1,
				Device: verbs.DeviceOptions{PollSpin: tc.set},
				OpenDevice: func(ctx context.Context, prov string, o verbs.DeviceOptions) (verbs.Device, error) {
					mu.Lock()
					seen = append(seen, seenOpts{o.PollSpin, o.PollYield})
					mu.Unlock()
					return verbs.Open(ctx, prov, o)
				}}}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			eps, err := p2ptest.Start(ctx, tc.ranks, o)
			require.NoError(t, err)
			defer p2ptest.Close(eps)
			require.NotEmpty(t, seen)
			for _, v := range seen {
				require.Equal(t, seenOpts{tc.want, tc.yield}, v)
			}
			// And messages flow.
			buf := []byte("spin")
			require.NoError(t, eps[0].Send(ctx, 1, 3, buf))
			got := make([]byte, 4)
			_, err = eps[1].Recv(ctx, 0, 3, got)
			require.NoError(t, err)
			require.Equal(t, buf, got)
		})
	}
}
