package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// singleCopy reports whether a message of n bytes to p, one the eager
// protocol or the pipeline would send, takes the rendezvous instead by
// SetSingleCopyMin's measured crossover (or during MeasureCopy's
// rendezvous rounds). The caller holds ep.mu.
func (p *peer) singleCopy(n int) bool {
	return p.forceRndv || p.single > 0 && n > p.single
}

// SetSingleCopyMin makes every message of more than n bytes to a peer on
// shared memory with a CPU of its own take the rendezvous, whose READ is
// one copy by the kernel (process_vm_readv), even where the eager limit
// or the pipeline would send it as copies through the receive buffers.
// It is what MeasureCopy finds: on some machines two copies through memory
// both cores touch cost more from a few KiB than a system call and one
// copy (on the 2-vCPU Intel VM measured, a 16 KiB ping-pong took 4.9 µs
// eagerly and 2.8 by rendezvous), on others they win up to past the eager
// limit. n <= 0 turns it off. Options.SingleCopyMin, when set, wins: the
// call then changes nothing. Call it before traffic that depends on it;
// it is safe to call concurrently with other methods.
func (ep *Endpoint) SetSingleCopyMin(n int) {
	if ep.opts.SingleCopyMin != 0 {
		return
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, p := range ep.peers {
		if p != nil && p.singleCopyApplies() {
			p.single = max(n, 0)
		}
	}
}

// singleCopyApplies says whether the single-copy rule may apply to p: a
// peer on shared memory, on a host whose ranks have CPUs of their own (a
// rendezvous where they take turns waits for the receiver's turn and then
// the sender's).
func (p *peer) singleCopyApplies() bool { return p.dev.traits.SharesMemory && !p.dev.crowded }

// SingleCopyMin is the size above which messages to peer go by the
// rendezvous whatever the eager limit (SetSingleCopyMin,
// Options.SingleCopyMin); 0 when that rule does not apply to peer.
func (ep *Endpoint) SingleCopyMin(peer int) int {
	if peer < 0 || peer >= ep.size || ep.peers[peer] == nil {
		return 0
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].single
}

// CopyProbeOptions shape MeasureCopy; only the leader's count (the lower
// rank of the pair). Zero fields take the defaults.
type CopyProbeOptions struct {
	// Rounds is how many round trips are timed per size and protocol in
	// each of copyPasses passes (default 48, at most 4096), after
	// copyWarmups untimed ones.
	Rounds int
}

// copyProbeSizes are the message sizes MeasureCopy times, up to the eager
// limit: below the smallest the rings and the eager frames' single
// buffer serve, and a crossover past the eager limit changes nothing.
var copyProbeSizes = [...]int{4 << 10, 8 << 10, 16 << 10, 32 << 10}

// Tags of MeasureCopy's messages, on ctxProbe after MeasureLink's.
const (
	copyPlan = probeReply + 1 + iota // the leader's plan, then its result
	copyData                         // a timed message and its echo
)

const copyProbeMaxRounds = 4096

// copyPasses is how many times the probe goes over the sizes, both
// protocols each time; each side's time is its shortest round trip over
// all passes. A rendezvous's round trip varies more than an eager one's,
// so its shortest needs more tries: inside comm's Init, 2 passes of 16
// put the crossover anywhere from 4 to 12 KiB in six runs, 3 of 48 at
// 4.1-4.6 KiB in seven of eight (about 10 ms on the Intel VM).
const copyPasses = 3

// copyWarmups is how many round trips of each size and protocol go
// untimed: the first ones fault the buffers' pages in and register them,
// and an eager message into a receive buffer not used before is cheaper
// than one into a buffer the receiver's core has read (here 4 against 6
// us a round trip of 8 KiB), so the rest wrap the receiver's 32 buffers
// (the default EagerSlots) first: with 6 the crossover measured 8-11 KiB,
// with 40 5-6 KiB, where the benchmark's ping-pong has it.
const copyWarmups = 40

// MeasureCopy times, between this rank and peer on the same host, a
// ping-pong of messages of 4 to 32 KiB (up to the eager limit) sent
// eagerly (two copies through a receive buffer) and by rendezvous (one
// copy by the kernel), and returns the size from which the rendezvous
// was as fast: interpolated between the two sizes around the crossover,
// the smallest size when the rendezvous was as fast at every size, and 0
// when it was slower at every size or the peer is not another process on
// shared memory that this one may read (nothing to choose between). Feed
// the result to SetSingleCopyMin on every rank, so that every rank
// applies the same rule (comm does, at Init).
//
// Both ranks of the pair call it at the same time, each naming the other;
// the lower rank leads (its options count, it times) and sends its result
// to the other, so both return the same size. Each side's time is the
// shortest round trip of its rounds (what else the ranks or their CPUs do
// only adds to a round trip). It takes the traffic to and from peer as it
// is: run it when nothing else is sent between the two, and only where
// the two have CPUs of their own (a ping-pong between ranks that share a
// CPU times their turns). It fails when ctx ends, peer fails, or peer is
// this rank or not in the job (ErrInvalidRank).
func (ep *Endpoint) MeasureCopy(ctx context.Context, peer int, o CopyProbeOptions) (int, error) {
	if peer < 0 || peer >= ep.size || peer == ep.rank || ep.peers[peer] == nil {
		return 0, &Error{Op: "MeasureCopy", Rank: ep.rank, Peer: peer, Tag: NoTag,
			Err: fmt.Errorf("%w: the copies to rank %d cannot be measured from rank %d of %d", ErrInvalidRank, peer, ep.rank, ep.size)}
	}
	ch := &Channel{ep: ep, id: ctxProbe}
	p := ep.peers[peer]
	defer func() {
		ep.mu.Lock()
		p.forceRndv = false
		ep.mu.Unlock()
	}()
	if ep.rank < peer {
		return ch.leadCopyProbe(ctx, p, o)
	}
	return ch.followCopyProbe(ctx, p)
}

// copySizes are the sizes of copyProbeSizes that p's eager limit sends in
// one frame; none where p's READ is not a kernel copy from another
// process.
func (c *Channel) copySizes(p *peer) []int {
	if !p.dev.traits.SharesMemory {
		return nil
	}
	if err := c.ep.ReadPeer(p.rank, 0, nil); errors.Is(err, verbs.ErrUnsupported) {
		return nil
	}
	var s []int
	for _, n := range copyProbeSizes {
		if n <= p.frag {
			s = append(s, n)
		}
	}
	return s
}

func (c *Channel) leadCopyProbe(ctx context.Context, p *peer, o CopyProbeOptions) (int, error) {
	rounds := o.Rounds
	if rounds <= 0 {
		rounds = 48
	}
	rounds = min(rounds, copyProbeMaxRounds)
	sizes := c.copySizes(p)
	var plan [16]byte
	binary.LittleEndian.PutUint64(plan[:], uint64(rounds))
	binary.LittleEndian.PutUint64(plan[8:], uint64(len(sizes)))
	if err := c.Send(ctx, p.rank, copyPlan, plan[:]); err != nil {
		return 0, err
	}
	if len(sizes) == 0 {
		return 0, nil
	}
	var peerSizes [8]byte
	if _, err := c.Recv(ctx, p.rank, copyPlan, peerSizes[:]); err != nil {
		return 0, err
	}
	// The follower measures with sizes of its own eager limit: the lesser
	// count serves both.
	sizes = sizes[:min(len(sizes), int(binary.LittleEndian.Uint64(peerSizes[:])))]
	if len(sizes) == 0 {
		return 0, nil // the follower has none and has returned
	}
	eager, rndv, err := c.runCopyPasses(ctx, p, sizes, rounds, true)
	if err != nil {
		return 0, err
	}
	single := copyCrossover(sizes, eager, rndv)
	var res [8]byte
	binary.LittleEndian.PutUint64(res[:], uint64(single))
	if err := c.Send(ctx, p.rank, copyPlan, res[:]); err != nil {
		return 0, err
	}
	return single, nil
}

func (c *Channel) followCopyProbe(ctx context.Context, p *peer) (int, error) {
	var plan [16]byte
	if _, err := c.Recv(ctx, p.rank, copyPlan, plan[:]); err != nil {
		return 0, err
	}
	rounds := binary.LittleEndian.Uint64(plan[:])
	count := binary.LittleEndian.Uint64(plan[8:])
	if rounds > copyProbeMaxRounds || count > uint64(len(copyProbeSizes)) {
		return 0, c.argErr("MeasureCopy", p.rank, copyPlan,
			fmt.Errorf("%w: rank %d's copy probe plan asks for %d round trips at %d sizes", ErrProtocol, p.rank, rounds, count))
	}
	if count == 0 {
		return 0, nil
	}
	sizes := c.copySizes(p)
	var mine [8]byte
	binary.LittleEndian.PutUint64(mine[:], uint64(len(sizes)))
	if err := c.Send(ctx, p.rank, copyPlan, mine[:]); err != nil {
		return 0, err
	}
	if len(sizes) == 0 {
		// The leader reads no count back from a plan of its own sizes:
		// it stops at the lesser, none.
		return 0, nil
	}
	sizes = sizes[:min(len(sizes), int(count))]
	if _, _, err := c.runCopyPasses(ctx, p, sizes, int(rounds), false); err != nil {
		return 0, err
	}
	var res [8]byte
	if _, err := c.Recv(ctx, p.rank, copyPlan, res[:]); err != nil {
		return 0, err
	}
	single := binary.LittleEndian.Uint64(res[:])
	if single > uint64(copyProbeSizes[len(copyProbeSizes)-1]) {
		return 0, c.argErr("MeasureCopy", p.rank, copyPlan,
			fmt.Errorf("%w: rank %d's copy probe found a crossover of %d bytes, past the sizes measured", ErrProtocol, p.rank, single))
	}
	return int(single), nil
}

// runCopyPasses runs copyPasses passes over sizes (ascending, not
// empty), each size eagerly and then by rendezvous, the leader (lead)
// sending first, and returns the shortest round trip of each size and
// protocol over all passes (the leader's count; the follower ignores
// its own).
func (c *Channel) runCopyPasses(ctx context.Context, p *peer, sizes []int, rounds int, lead bool) (eager, rndv []time.Duration, err error) {
	sbuf, rbuf := make([]byte, sizes[len(sizes)-1]), make([]byte, sizes[len(sizes)-1])
	eager, rndv = make([]time.Duration, len(sizes)), make([]time.Duration, len(sizes))
	for i := range eager {
		eager[i], rndv[i] = math.MaxInt64, math.MaxInt64
	}
	for range copyPasses {
		for i, n := range sizes {
			for _, r := range [2]bool{false, true} {
				best, err := c.copyRounds(ctx, p, sbuf[:n], rbuf[:n], rounds, r, lead)
				if err != nil {
					return nil, nil, err
				}
				if r {
					rndv[i] = min(rndv[i], best)
				} else {
					eager[i] = min(eager[i], best)
				}
			}
		}
	}
	return eager, rndv, nil
}

// copyRounds runs copyWarmups untimed and then rounds timed round trips with
// p, sending from sbuf and receiving into rbuf (one buffer for both would
// register it anew for each use), by the rendezvous when rndv is set, and
// returns the shortest (the leader's; lead sends first).
func (c *Channel) copyRounds(ctx context.Context, p *peer, sbuf, rbuf []byte, rounds int, rndv, lead bool) (time.Duration, error) {
	ep := c.ep
	ep.mu.Lock()
	p.forceRndv = rndv
	ep.mu.Unlock()
	best := time.Duration(math.MaxInt64)
	for i := range copyWarmups + rounds {
		t0 := time.Now()
		if lead {
			if err := c.Send(ctx, p.rank, copyData, sbuf); err != nil {
				return 0, err
			}
		}
		if _, err := c.Recv(ctx, p.rank, copyData, rbuf); err != nil {
			return 0, err
		}
		if !lead {
			if err := c.Send(ctx, p.rank, copyData, sbuf); err != nil {
				return 0, err
			}
		}
		if i >= copyWarmups {
			best = min(best, time.Since(t0))
		}
	}
	return best, nil
}

// copyCrossover is the size from which the rendezvous's round trip
// (rndv) was no longer than the eager one (eager), at sizes ascending:
// interpolated where the difference changes sign between two sizes, the
// first size when the rendezvous was as fast there, 0 when it never was.
func copyCrossover(sizes []int, eager, rndv []time.Duration) int {
	for i, n := range sizes {
		d := eager[i] - rndv[i] // > 0: the rendezvous was faster
		if d < 0 {
			continue
		}
		if i == 0 {
			return n
		}
		prev := eager[i-1] - rndv[i-1] // < 0
		frac := float64(-prev) / float64(d-prev)
		return sizes[i-1] + int(frac*float64(n-sizes[i-1]))
	}
	return 0
}
