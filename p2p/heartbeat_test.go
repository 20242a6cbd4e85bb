package p2p_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestHeartbeatEveryTick: an idle link is pinged at every tick of the
// liveness goroutine that comes about Heartbeat after the last, even a
// tick a little early (ticks jitter on a busy machine), and a ping counts
// as sent when it is sent. Before, an idle link was pinged every second
// or third tick, so the peer heard from it every 2-3 Heartbeats and a few
// seconds of lateness on top exhausted its LivenessTimeout. The ticks are
// driven by hand, at invented times; the real ticker (every Heartbeat, an
// hour) never fires.
func TestHeartbeatEveryTick(t *testing.T) {
	const hb = time.Hour
	opts := p2ptest.Options{P2P: p2p.Options{Heartbeat: hb, LivenessTimeout: 10 * hb}}
	p2ptest.Run(t, 2, opts, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		base := time.Now().Add(hb)
		// The first tick notes what set-up sent (and may ping); from then
		// on the link is idle but for the pings.
		if !ep.LivenessTick(base) {
			return fmt.Errorf("the endpoint failed")
		}
		before := ep.PingsSent(peer)
		const ticks = 3
		for i := 1; i <= ticks; i++ {
			// Each tick 1% early against the last.
			if !ep.LivenessTick(base.Add(time.Duration(i) * hb * 99 / 100)) {
				return fmt.Errorf("the endpoint failed at tick %d", i)
			}
		}
		if got := ep.PingsSent(peer) - before; got != ticks {
			return fmt.Errorf("rank %d pinged its idle peer at %d of %d ticks", ep.Rank(), got, ticks)
		}
		return nil
	})
}
