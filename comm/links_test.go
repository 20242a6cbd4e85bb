package comm_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
)

// slowLinks returns Options whose devices deliver every message at least
// delay late (the receive's completion is held back), on every link.
func slowLinks(delay time.Duration) comm.Options {
	inj := faulty.NewInjector()
	inj.DelayCompletions(-1, delay, func(wc verbs.WC) bool { return wc.Opcode == verbs.WCRecv })
	o := comm.Options{NoEnv: true}
	o.P2P.OpenDevice = faulty.Opener(inj)
	return o
}

// linkView is what one rank of a job saw: its Peer estimates and the
// algorithms its small allgather and allreduce ran.
type linkView struct {
	lat       []time.Duration
	bw        []float64
	allgather string
	allreduce string
}

// viewLinks runs o on ranks of the given hosts and returns every rank's view.
func viewLinks(t *testing.T, hosts []string, o comm.Options) []linkView {
	t.Helper()
	views := make([]linkView, len(hosts))
	var mu sync.Mutex
	per := func(r int, o *comm.Options) { o.Hostname = hosts[r] }
	requireOK(t, runWith(t, len(hosts), o, per, func(ctx context.Context, c *comm.Comm) error {
		var v linkView
		for r := range c.Size() {
			p, err := c.Peer(r)
			if err != nil {
				return err
			}
			v.lat, v.bw = append(v.lat, p.Latency), append(v.bw, p.Bandwidth)
		}
		if err := comm.Allgather(ctx, c, make([]byte, 8), make([]byte, 8*c.Size())); err != nil {
			return err
		}
		v.allgather = c.LastAlgorithm()
		if err := comm.Allreduce(ctx, c, make([]float32, 2), comm.Sum); err != nil {
			return err
		}
		v.allreduce = c.LastAlgorithm()
		mu.Lock()
		views[c.Rank()] = v
		mu.Unlock()
		return nil
	}))
	return views
}

// TestLinkProbe: Init measures the network between hosts; every rank takes
// the same figures for the links to other hosts, here the measured ones
// (every message 2 ms late: far slower than the transport's estimate) and
// so no faster than the network is, and the cost model chooses with them: small calls,
// where 2 ms a message between hosts against 1 µs inside one makes
// messages between hosts the cost, take the hierarchical forms. Links
// inside a host keep the transport's estimate. NoLinkProbe and
// RDMAGO_LINK_PROBE=0 keep the transports' estimates everywhere.
func TestLinkProbe(t *testing.T) {
	const delay = 2 * time.Millisecond
	hosts := []string{"a", "a", "b", "b"}
	off := slowLinks(delay)
	off.NoLinkProbe = true
	plain := viewLinks(t, hosts, off)
	measured := viewLinks(t, hosts, slowLinks(delay))
	for me, v := range measured {
		for r := range hosts {
			switch {
			case r == me:
				assert.Zero(t, v.lat[r], "rank %d itself", me)
			case hosts[r] == hosts[me]:
				assert.Equal(t, plain[me].lat[r], v.lat[r], "rank %d to %d, one host: the transport's", me, r)
				assert.Equal(t, plain[me].bw[r], v.bw[r], "rank %d to %d, one host: the transport's", me, r)
			default:
				assert.GreaterOrEqual(t, v.lat[r], delay, "rank %d to %d", me, r)
				assert.GreaterOrEqual(t, v.lat[r], plain[me].lat[r], "rank %d to %d", me, r)
				assert.Positive(t, v.bw[r], "rank %d to %d", me, r)
				assert.LessOrEqual(t, v.bw[r], plain[me].bw[r], "rank %d to %d", me, r)
				assert.Equal(t, measured[0].lat[2], v.lat[r], "rank %d to %d: not rank 0's figure", me, r)
				assert.Equal(t, measured[0].bw[2], v.bw[r], "rank %d to %d: not rank 0's figure", me, r)
			}
		}
		assert.Equal(t, "hierarchical", v.allgather, "rank %d", me)
		assert.Equal(t, "hierarchical", v.allreduce, "rank %d", me)
		assert.NotEqual(t, "hierarchical", plain[me].allgather, "rank %d without the probe", me)
		assert.NotEqual(t, "hierarchical", plain[me].allreduce, "rank %d without the probe", me)
		for r := range hosts {
			if r != me {
				assert.Less(t, plain[me].lat[r], delay, "rank %d to %d without the probe", me, r)
			}
		}
	}

	t.Run("env", func(t *testing.T) {
		t.Setenv(comm.EnvLinkProbe, "0")
		o := slowLinks(delay)
		o.NoEnv = false
		for me, v := range viewLinks(t, hosts, o) {
			assert.Equal(t, plain[me].lat, v.lat, "rank %d", me)
		}
		t.Setenv(comm.EnvLinkProbe, "no")
		errs := runEnv(t, 2, comm.Options{}, func(context.Context, *comm.Comm) error { return nil })
		for r, err := range errs {
			require.ErrorIs(t, err, comm.ErrInvalidArgument, "rank %d", r)
			assert.Contains(t, err.Error(), fmt.Sprintf("%s=%q", comm.EnvLinkProbe, "no"))
		}
	})

	t.Run("ranks that differ", func(t *testing.T) {
		// Rank 0's setting decides; a rank of the pair that skips the
		// measurement costs the other a wait of linkProbeMax, not a hang
		// or a failed Init, and every rank ends with the same figures.
		defer comm.SetLinkProbeMax(comm.SetLinkProbeMax(300 * time.Millisecond))
		for _, skip := range []int{0, 2} {
			var logged syncBuffer
			o := slowLinks(delay)
			per := func(r int, ro *comm.Options) {
				ro.Hostname = hosts[r]
				ro.NoLinkProbe = r == skip
				ro.Logger = slog.New(slog.NewTextHandler(&logged, nil))
			}
			errs := runWith(t, len(hosts), o, per, func(ctx context.Context, c *comm.Comm) error {
				if _, _, ok := c.MeasuredNetwork(); ok {
					return fmt.Errorf("rank %d: a figure measured though rank %d skipped", c.Rank(), skip)
				}
				p, err := c.Peer((c.Rank() + 2) % 4)
				if err != nil {
					return err
				}
				if p.Latency >= delay {
					return fmt.Errorf("rank %d: latency %v to the other host, not the transport's", c.Rank(), p.Latency)
				}
				return comm.Allreduce(ctx, c, make([]float32, 2), comm.Sum)
			})
			requireOK(t, errs)
			assert.Contains(t, logged.String(), "measuring the network between hosts failed", "skipping rank %d", skip)
		}
	})

	t.Run("one host", func(t *testing.T) {
		one := []string{"a", "a", "a"}
		off := slowLinks(delay)
		off.NoLinkProbe = true
		want := viewLinks(t, one, off)
		for me, v := range viewLinks(t, one, slowLinks(delay)) {
			assert.Equal(t, want[me].lat, v.lat, "rank %d: nothing measured inside a host", me)
			assert.Equal(t, want[me].bw, v.bw, "rank %d", me)
		}
	})
}
