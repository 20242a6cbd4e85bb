package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// ctxProbe is the context of MeasureLink's messages, apart from every
// program's and library's traffic.
const ctxProbe = FirstReservedContext + 1

// Tags of MeasureLink's messages.
const (
	probePlan  = iota // the leader's plan: rounds and bytes
	probeSmall        // a small message and its echo
	probeLarge        // a large message, or the result that ends the probe
	probeReply        // the follower's answer to a large message
)

// LinkEstimate is what MeasureLink found for the link between two ranks.
type LinkEstimate struct {
	// Latency is the one-way time of a small message: half the shortest
	// round trip (what else the two ranks do, or their CPUs, only adds to
	// a round trip).
	Latency time.Duration
	// Bandwidth is in bytes per second: a large message's size over the
	// best one-way time of the tries, less Latency.
	Bandwidth float64
}

// ProbeOptions shape MeasureLink. Only the leader's count (the lower rank
// of the pair); zero fields take the defaults.
type ProbeOptions struct {
	// Rounds is how many small round trips are timed (default 20, at most
	// 65536), after four untimed ones that open the connection and warm
	// both sides up.
	Rounds int
	// Bytes is the size of the large messages (default 1 MiB, at least
	// 64 B, at most 64 MiB): large enough that its transfer, not the
	// latency, takes the time.
	Bytes int
	// Tries is how many large messages are sent at most (default 3);
	// sending stops once Budget has gone to them, after the first.
	Tries  int
	Budget time.Duration // default 20 ms
}

func (o ProbeOptions) withDefaults() ProbeOptions {
	if o.Rounds <= 0 {
		o.Rounds = 20
	}
	o.Rounds = min(o.Rounds, probeMaxRounds)
	if o.Bytes <= 0 {
		o.Bytes = 1 << 20
	}
	o.Bytes = min(max(o.Bytes, probeMinBytes), probeMaxBytes)
	if o.Tries <= 0 {
		o.Tries = 3
	}
	if o.Budget <= 0 {
		o.Budget = 20 * time.Millisecond
	}
	return o
}

// probeWarmups is how many small round trips go untimed first.
const probeWarmups = 4

// The large messages' sizes: longer than the 16-byte result that ends the
// probe, which the follower tells from them by its length, and no larger
// than a follower agrees to allocate.
const (
	probeMinBytes = 64
	probeMaxBytes = 64 << 20
)

// probeMaxRounds bounds Rounds, and what a follower agrees to answer.
const probeMaxRounds = 1 << 16

// MeasureLink times the link to peer with a ping-pong of small messages
// and a few large messages, and returns the estimate. Both ranks of the
// pair call it at the same time, each naming the other; the lower rank
// leads (its ProbeOptions count, it times) and sends its result to the
// other, so both return the same estimate. It takes the endpoint's
// traffic to and from peer as it is: run it when nothing else is sent
// between the two. The messages travel on a context of their own; Stats
// counts them. It fails when ctx ends, peer fails, or peer is this rank
// or not in the job (ErrInvalidRank).
func (ep *Endpoint) MeasureLink(ctx context.Context, peer int, o ProbeOptions) (LinkEstimate, error) {
	if peer < 0 || peer >= ep.size || peer == ep.rank {
		return LinkEstimate{}, &Error{Op: "MeasureLink", Rank: ep.rank, Peer: peer, Tag: NoTag,
			Err: fmt.Errorf("%w: the link to rank %d cannot be measured from rank %d of %d", ErrInvalidRank, peer, ep.rank, ep.size)}
	}
	ch := &Channel{ep: ep, id: ctxProbe}
	if ep.rank < peer {
		return ch.leadProbe(ctx, peer, o.withDefaults())
	}
	return ch.followProbe(ctx, peer)
}

func (c *Channel) leadProbe(ctx context.Context, peer int, o ProbeOptions) (LinkEstimate, error) {
	var plan [16]byte
	binary.LittleEndian.PutUint64(plan[:], uint64(o.Rounds))
	binary.LittleEndian.PutUint64(plan[8:], uint64(o.Bytes))
	if err := c.Send(ctx, peer, probePlan, plan[:]); err != nil {
		return LinkEstimate{}, err
	}
	var small [8]byte
	best := time.Duration(math.MaxInt64)
	for i := range probeWarmups + o.Rounds {
		t0 := time.Now()
		if err := c.Send(ctx, peer, probeSmall, small[:]); err != nil {
			return LinkEstimate{}, err
		}
		if _, err := c.Recv(ctx, peer, probeSmall, small[:]); err != nil {
			return LinkEstimate{}, err
		}
		if i >= probeWarmups {
			best = min(best, time.Since(t0))
		}
	}
	lat := best / 2

	large := make([]byte, o.Bytes)
	best = time.Duration(math.MaxInt64)
	start := time.Now()
	for i := 0; i < o.Tries && (i == 0 || time.Since(start) < o.Budget); i++ {
		t0 := time.Now()
		if err := c.Send(ctx, peer, probeLarge, large); err != nil {
			return LinkEstimate{}, err
		}
		if _, err := c.Recv(ctx, peer, probeReply, small[:]); err != nil {
			return LinkEstimate{}, err
		}
		best = min(best, time.Since(t0))
	}
	// The try was the large message one way and the small reply back.
	move := best - 2*lat
	if move < best/2 {
		// Latency is most of it (a link that moves memory faster than it
		// answers): count the whole try rather than a difference of noise.
		move = best
	}
	est := LinkEstimate{Latency: lat, Bandwidth: float64(o.Bytes) / move.Seconds()}
	var res [16]byte
	binary.LittleEndian.PutUint64(res[:], uint64(est.Latency))
	binary.LittleEndian.PutUint64(res[8:], math.Float64bits(est.Bandwidth))
	if err := c.Send(ctx, peer, probeLarge, res[:]); err != nil {
		return LinkEstimate{}, err
	}
	return est, nil
}

func (c *Channel) followProbe(ctx context.Context, peer int) (LinkEstimate, error) {
	var plan [16]byte
	if _, err := c.Recv(ctx, peer, probePlan, plan[:]); err != nil {
		return LinkEstimate{}, err
	}
	rounds := binary.LittleEndian.Uint64(plan[:])
	n := binary.LittleEndian.Uint64(plan[8:])
	if rounds > probeMaxRounds || n < probeMinBytes || n > probeMaxBytes {
		return LinkEstimate{}, c.argErr("MeasureLink", peer, probePlan,
			fmt.Errorf("%w: rank %d's probe plan asks for %d round trips and messages of %d bytes", ErrProtocol, peer, rounds, n))
	}
	var small [8]byte
	for range probeWarmups + int(rounds) {
		if _, err := c.Recv(ctx, peer, probeSmall, small[:]); err != nil {
			return LinkEstimate{}, err
		}
		if err := c.Send(ctx, peer, probeSmall, small[:]); err != nil {
			return LinkEstimate{}, err
		}
	}
	large := make([]byte, n)
	for {
		st, err := c.Recv(ctx, peer, probeLarge, large)
		if err != nil {
			return LinkEstimate{}, err
		}
		if st.Count != len(large) {
			if st.Count != 16 {
				return LinkEstimate{}, c.argErr("MeasureLink", peer, probeLarge,
					fmt.Errorf("%w: rank %d's probe result is %d bytes, not 16", ErrProtocol, peer, st.Count))
			}
			return LinkEstimate{
				Latency:   time.Duration(binary.LittleEndian.Uint64(large)),
				Bandwidth: math.Float64frombits(binary.LittleEndian.Uint64(large[8:])),
			}, nil
		}
		if err := c.Send(ctx, peer, probeReply, small[:1]); err != nil {
			return LinkEstimate{}, err
		}
	}
}
