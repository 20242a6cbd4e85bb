package p2p_test

import (
	"context"
	"encoding/binary"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
)

// measurePair runs MeasureLink on ranks a and b of eps at once and returns
// both ranks' estimates.
func measurePair(ctx context.Context, eps []*p2p.Endpoint, a, b int, o p2p.ProbeOptions) ([2]p2p.LinkEstimate, [2]error) {
	var est [2]p2p.LinkEstimate
	var errs [2]error
	done := make(chan struct{})
	go func() {
		defer close(done)
		est[1], errs[1] = eps[b].MeasureLink(ctx, a, o)
	}()
	est[0], errs[0] = eps[a].MeasureLink(ctx, b, o)
	<-done
	return est, errs
}

// TestMeasureLink: both ranks of a pair get the same estimate, a latency
// and a finite bandwidth; the probe's messages stay apart from the pair's
// own traffic (a message sent before it, with the probe's tags, is still
// there after it, intact); bad peers are refused at once.
func TestMeasureLink(t *testing.T) {
	for _, prov := range []string{"loop", "shm", "tcp"} {
		t.Run(prov, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			eps, err := p2ptest.Start(ctx, 3, p2ptest.Options{Provider: prov, P2P: p2p.Options{LivenessTimeout: -1}})
			require.NoError(t, err)
			defer p2ptest.Close(eps)

			// Waiting on rank 1: messages on the endpoint's own context with
			// every tag the probe uses.
			for tag := range 4 {
				require.NoError(t, eps[2].Send(ctx, 1, tag, []byte{byte(10 + tag)}))
			}
			est, errs := measurePair(ctx, eps, 1, 2, p2p.ProbeOptions{Rounds: 5, Bytes: 256 << 10})
			require.NoError(t, errs[0])
			require.NoError(t, errs[1])
			assert.Equal(t, est[0], est[1], "the follower returns the leader's estimate")
			assert.Positive(t, est[0].Latency)
			assert.Positive(t, est[0].Bandwidth)
			assert.False(t, math.IsInf(est[0].Bandwidth, 0) || math.IsNaN(est[0].Bandwidth), "bandwidth %v", est[0].Bandwidth)
			for tag := range 4 {
				got := make([]byte, 8)
				st, err := eps[1].Recv(ctx, 2, tag, got)
				require.NoError(t, err)
				assert.Equal(t, []byte{byte(10 + tag)}, got[:st.Count], "tag %d", tag)
			}

			for _, peer := range []int{0 + 1, -1, 3} { // itself, below, above
				_, err := eps[1].MeasureLink(ctx, peer, p2p.ProbeOptions{})
				require.ErrorIs(t, err, p2p.ErrInvalidRank, "peer %d", peer)
				assert.Contains(t, err.Error(), "rank 1")
			}
		})
	}
}

// TestMeasureLinkSeesASlowLink: a link whose every completion comes 3 ms
// late (faulty) is estimated at 3 ms or more one way, and its bandwidth
// at no more than a large message a 3 ms round trip allows.
func TestMeasureLinkSeesASlowLink(t *testing.T) {
	const delay = 3 * time.Millisecond
	inj := faulty.NewInjector()
	o := p2ptest.Options{Provider: "loop", P2P: p2p.Options{LivenessTimeout: -1,
		OpenDevice: faulty.Opener(inj)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	eps, err := p2ptest.Start(ctx, 2, o)
	require.NoError(t, err)
	defer p2ptest.Close(eps)
	// Only the receives: a send's completion does not hold its message
	// back, a receive's does.
	inj.DelayCompletions(-1, delay, func(wc verbs.WC) bool { return wc.Opcode == verbs.WCRecv })
	const bytes = 64 << 10
	est, errs := measurePair(ctx, eps, 0, 1, p2p.ProbeOptions{Rounds: 3, Bytes: bytes, Tries: 1})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.GreaterOrEqual(t, est[0].Latency, delay)
	assert.LessOrEqual(t, est[0].Bandwidth, bytes/delay.Seconds())
}

// loopPair starts two endpoints over loop, closed when the test ends, and
// a ctx that bounds the test.
func loopPair(t *testing.T) (context.Context, []*p2p.Endpoint) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{P2P: p2p.Options{LivenessTimeout: -1}})
	require.NoError(t, err)
	t.Cleanup(func() { p2ptest.Close(eps) })
	return ctx, eps
}

// TestMeasureLinkEndsWithCtx: a probe whose peer never joins fails when
// its ctx ends, with the ctx's error, rather than hanging.
func TestMeasureLinkEndsWithCtx(t *testing.T) {
	ctx, eps := loopPair(t)
	for r := range 2 {
		short, stop := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := eps[r].MeasureLink(short, 1-r, p2p.ProbeOptions{})
		stop()
		require.Error(t, err, "rank %d", r)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "rank %d: %v", r, err)
	}
}

// TestMeasureLinkRefusesABadLeader: a follower whose leader asks for more
// than it agrees to (a message of 1 GiB) or ends with a result of the
// wrong length fails with ErrProtocol naming the leader, instead of
// allocating what it was told or hanging.
func TestMeasureLinkRefusesABadLeader(t *testing.T) {
	ctx, eps := loopPair(t)
	lead := p2p.ProbeChannel(eps[0])
	var err error
	plan := func(rounds, bytes uint64) []byte {
		b := make([]byte, 16)
		binary.LittleEndian.PutUint64(b, rounds)
		binary.LittleEndian.PutUint64(b[8:], bytes)
		return b
	}

	require.NoError(t, lead.Send(ctx, 1, p2p.ProbePlanTag, plan(0, 1<<30)))
	_, err = eps[1].MeasureLink(ctx, 0, p2p.ProbeOptions{})
	require.ErrorIs(t, err, p2p.ErrProtocol)
	assert.Contains(t, err.Error(), "rank 0's probe plan asks for 0 round trips and messages of 1073741824 bytes")

	require.NoError(t, lead.Send(ctx, 1, p2p.ProbePlanTag, plan(0, 4096)))
	for range p2p.ProbeWarmups {
		require.NoError(t, lead.Send(ctx, 1, p2p.ProbeSmallTag, make([]byte, 8)))
	}
	require.NoError(t, lead.Send(ctx, 1, p2p.ProbeLargeTag, make([]byte, 15)))
	_, err = eps[1].MeasureLink(ctx, 0, p2p.ProbeOptions{})
	require.ErrorIs(t, err, p2p.ErrProtocol)
	assert.Contains(t, err.Error(), "rank 0's probe result is 15 bytes, not 16")
}
