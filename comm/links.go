package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/p2p"
)

// EnvLinkProbe=0 skips Init's measurement of the network between hosts
// (Options.NoLinkProbe).
const EnvLinkProbe = "RDMAGO_LINK_PROBE"

// linkProbeOff is whether Init's probeLinks skips the measurement:
// Options.NoLinkProbe, or EnvLinkProbe=0 (env nil: Options.NoEnv).
func linkProbeOff(env jobenv.LookupEnv, off bool) (bool, error) {
	if off || env == nil {
		return off, nil
	}
	switch v, _ := env(EnvLinkProbe); strings.TrimSpace(v) {
	case "", "1":
		return false, nil
	case "0":
		return true, nil
	default:
		return false, fmt.Errorf("%w: %s=%q: want 0 (skip the measurement) or 1", ErrInvalidArgument, EnvLinkProbe, v)
	}
}

// netLink is the network between the job's hosts as Init measured it.
type netLink struct {
	lat time.Duration
	bw  float64 // bytes per second
	ok  bool
}

// linkProbeMax bounds the measurement: past it the transports' estimates
// stay (a peer too busy to answer, or one told to skip the measurement,
// is no reason to fail Init). A variable for tests.
var linkProbeMax = 5 * time.Second

// probeLinks measures, once at Init, the network between hosts when the
// job spans several and the copies between a host's ranks when rank 0's
// host has two or more with CPUs of their own. Rank 0 and the lowest rank
// on another host time the network (p2p.Endpoint.MeasureLink: a
// ping-pong of small messages and a few of 1 MiB); rank 0 and the next
// rank on its host time messages of 4-32 KiB sent eagerly and by
// rendezvous (p2p.Endpoint.MeasureCopy). Every rank takes rank 0's results
// from the rendezvous, so that every rank's cost model and protocol
// choice, and so every rank's choice of algorithm, is the same. Links
// inside a crowded host are not measured: where a host's ranks share its
// CPUs, a ping-pong between two of them times their turns on a CPU, which
// the model counts apart (collectives.Crowding). A failed measurement
// leaves the estimates and defaults, unless ctx ended. A rank told not to
// measure (measure false) still takes its part in the rendezvous, so that
// every rank makes the same calls on the store whatever its options; rank
// 0's then decides.
func (w *world) probeLinks(ctx context.Context, measure bool) error {
	me, other, mate := w.ep.Rank(), -1, -1
	for r, h := range w.hostIdx {
		switch {
		case r == 0:
		case h != w.hostIdx[0] && other < 0:
			other = r
		case h == w.hostIdx[0] && mate < 0:
			mate = r
		}
	}
	if other < 0 && mate < 0 {
		return nil
	}
	var val [24]byte
	// probe runs f with the other rank of the pair (0, r), this rank
	// being one of them; a failure other than ctx's leaves the estimates.
	probe := func(r int, what string, f func(ctx context.Context, peer int) error) error {
		peer := r
		if me == r {
			peer = 0
		}
		pctx, cancel := context.WithTimeout(ctx, linkProbeMax)
		err := f(pctx, peer)
		cancel()
		switch {
		case err != nil && ctx.Err() != nil:
			return err
		case err != nil:
			w.log.Warn("comm: measuring "+what+" failed; the estimates and defaults stay",
				"rank", me, "peer", peer, "err", err)
		}
		return nil
	}
	if measure && mate >= 0 && (me == 0 || me == mate) && !w.ep.Crowded() {
		err := probe(mate, "the copies between a host's ranks", func(ctx context.Context, peer int) error {
			n, err := w.ep.MeasureCopy(ctx, peer, p2p.CopyProbeOptions{})
			if err == nil && me == 0 {
				binary.LittleEndian.PutUint64(val[16:], uint64(n))
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	if measure && other >= 0 && (me == 0 || me == other) {
		err := probe(other, "the network between hosts", func(ctx context.Context, peer int) error {
			est, err := w.ep.MeasureLink(ctx, peer, p2p.ProbeOptions{})
			if err == nil && me == 0 {
				binary.LittleEndian.PutUint64(val[:], uint64(est.Latency))
				binary.LittleEndian.PutUint64(val[8:], math.Float64bits(est.Bandwidth))
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	// Rank 0's results, through the rendezvous: one value, put by rank 0
	// (zero where its measurement failed or was not made), read by every
	// rank after a fence.
	key := "comm/" + w.name + "/netlink"
	if me == 0 {
		if err := w.store.Put(ctx, key, val[:]); err != nil {
			return err
		}
	}
	if err := w.store.Fence(ctx); err != nil {
		return err
	}
	v, err := w.store.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(v) != len(val) {
		return nil
	}
	lat := time.Duration(binary.LittleEndian.Uint64(v))
	bw := math.Float64frombits(binary.LittleEndian.Uint64(v[8:]))
	if lat > 0 && bw > 0 && !math.IsInf(bw, 0) {
		w.net = netLink{lat: lat, bw: bw, ok: true}
		w.log.Debug("comm: network between hosts measured", "rank", me,
			"latency", lat, "bandwidth_GBps", bw/1e9, "between", []int{0, other})
	}
	if n := binary.LittleEndian.Uint64(v[16:]); n > 0 && n <= maxSingleCopyMin {
		w.ep.SetSingleCopyMin(int(n))
		w.singleCopy = int(n)
		w.log.Debug("comm: copies between a host's ranks measured", "rank", me,
			"single_copy_above", n, "between", []int{0, mate})
	}
	return nil
}

// maxSingleCopyMin bounds the crossover a rank takes from rank 0's store
// value, well past what p2p.Endpoint.MeasureCopy can return (32 KiB, its
// largest size), so that a value that is not a crossover changes nothing.
const maxSingleCopyMin = 1 << 20

// SingleCopyMin is the size above which, as Init measured on rank 0's
// host, one copy by the kernel (process_vm_readv) between two of a
// host's ranks beat two copies through shared memory: messages larger
// than this to ranks on this host go by rendezvous, and the collectives'
// shared-memory algorithms read a peer's buffer rather than copy through
// slots above it (where their own thresholds are lower already, those
// stay). 0 when nothing was measured (one rank a host, a crowded host,
// Options.NoLinkProbe) or the two copies won at every size measured. It
// is the same on every rank and local (no communication).
func (c *Comm) SingleCopyMin() int { return c.w.singleCopy }

// MeasuredNetwork is what Init measured for the network between hosts: the
// one-way latency of a small message and the bandwidth of a large one, in
// bytes per second. ok is false when nothing was measured (one host,
// Options.NoLinkProbe, a failed measurement). The cost model takes these
// figures only where they are clearly slower than the transport's own
// estimate (Peer.Latency). It is local (no communication).
func (c *Comm) MeasuredNetwork() (latency time.Duration, bandwidth float64, ok bool) {
	n := c.w.net
	return n.lat, n.bw, n.ok
}

// link is the cost model's estimate of the link to world rank r: the
// transport's own (verbs.Caps), or Init's measurement of the network where
// r is on another host and the network is clearly slower (netSlower).
func (w *world) link(r int) (time.Duration, float64) {
	lat, bw := w.ep.Link(r)
	if r != w.ep.Rank() && w.hostIdx[r] != w.hostIdx[w.ep.Rank()] {
		lat, bw = w.net.over(lat, bw)
	}
	return lat, bw
}

// netSlower is how many times slower than a transport's estimate a measured
// figure must be to replace it. Only slower: the model's other constants
// were tuned with the transports' estimates, and measured figures faster
// than those made it choose worse (see the commit that brought this in); a
// slow network, 1 Gbit/s under tcp's estimate of 1 GB/s, is what the
// measurement is for. And clearly slower, so that the choice of algorithm
// does not change from run to run with the measurement's noise.
const netSlower = 2

// over is the estimate of a link between hosts whose transport estimates
// lat and bw: either figure replaced by the measurement when that is at
// least netSlower times slower.
func (n netLink) over(lat time.Duration, bw float64) (time.Duration, float64) {
	if !n.ok {
		return lat, bw
	}
	if n.lat >= netSlower*lat {
		lat = n.lat
	}
	if bw <= 0 || n.bw*netSlower <= bw {
		bw = n.bw
	}
	return lat, bw
}
