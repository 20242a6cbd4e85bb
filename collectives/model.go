package collectives

import (
	"fmt"
	"math"
	"math/bits"
	"time"
)

// Model holds the constants of the cost model
//
//	time ≈ α·messages + β·bytes + γ·reduced bytes
//
// evaluated along each algorithm's critical path, and the size thresholds
// that decide where the shared-memory and hierarchical algorithms pay and
// which of their forms runs. Alpha and Beta describe the slowest link of
// the group (a flat algorithm runs at its speed); the Intra* pair describes
// links between ranks of one host, used by the hierarchical algorithms.
// Zero fields take defaults (see Tunables), the link constants refined by
// the group's LinkInfo when it has one. A negative size threshold means no
// size: a band ending there is empty, one starting there covers every size.
// Every rank of a group must use the same thresholds: they decide what is
// sent.
type Model struct {
	Alpha time.Duration // per-message latency
	Beta  float64       // seconds per byte on the wire
	Gamma float64       // seconds per byte reduced
	// CopyBeta is the seconds per byte one rank copies in its own memory:
	// the hierarchical alltoall's leader packs the bundles it sends and
	// unpacks those it receives, on its call's critical path.
	CopyBeta   float64
	IntraAlpha time.Duration
	IntraBeta  float64
	// OneSidedAlpha is the per-message cost of a one-sided write with
	// notification; the one-sided ring is chosen only where it makes the
	// ring cheaper. Zero means Alpha (so Auto prefers the two-sided ring).
	OneSidedAlpha time.Duration
	// PostOverlap is the cost of each further message of a batch posted at
	// once (linear allgather and alltoall, pairwise reduce-scatter), as a
	// fraction of α: the messages travel together, and each adds only its
	// sender's and receiver's software.
	PostOverlap float64
	// Crowd is the ranks per CPU on the job's most crowded host (the
	// group's Crowding; at most 1 means none). Where ranks outnumber CPUs
	// they take turns, so a step in which every rank of a host sends pays
	// its messages' latency Crowd times over, in a group spanning hosts:
	// the flat algorithms' every step and the hierarchical ones' steps
	// inside a host, but not the exchange among the hosts' leaders, one
	// rank a host. (In one host the shared-memory algorithms and the
	// measured thresholds decide, so it changes nothing there.)
	Crowd float64

	// The shared-memory algorithms send no messages, so α and β do not
	// describe them: the model counts them as free inside the bands below
	// and unavailable outside.

	// ShmSmallBytes: every shared-memory collective up to this size, where
	// a flag replaces every message.
	ShmSmallBytes int
	// ShmAllreduceMax: the shared-memory allreduce up to this size (folding
	// blocks in place needs two synchronisations a round, far fewer than a
	// ring's 2(p−1) steps when ranks share cores).
	ShmAllreduceMax int
	// ShmReduceMax: the shared-memory reduce up to this size.
	ShmReduceMax int
	// ShmReduceFoldBytes: above this size the shared-memory reduce has
	// every rank fold a block and the root gather them (reduceShmRS)
	// instead of the root folding every chunk while the others copy the
	// next ones in. Folding blocks takes a second synchronisation per
	// round, which every rank must be running for: on 2 cores the root's
	// pipelined fold was faster at 2, 4 and 8 ranks, so by default it
	// never folds blocks.
	ShmReduceFoldBytes int
	// ShmReduceReadMin, ShmReduceReadMax: above ShmReduceReadMin and up
	// to ShmReduceReadMax a shared-memory reduce whose root folds in
	// place (rank 0, or either of two ranks when the op commutes and
	// Deterministic is off) reads every other rank's buffer straight out
	// (reduceShmRead), where the region can (PeerReader) and ranks have
	// CPUs of their own: one kernel copy of a rank's data instead of a
	// copy into the slots and one out. By default it never reads: the
	// slots' defaults were measured where two copies won; a group's
	// measured crossover (SingleCopy) lowers the minimum. Above 512 KiB
	// the slots' pipeline, whose copies in overlap the root's folds, was
	// faster again (2 ranks on the Intel VM: 1 MiB 94 µs against 124-144
	// reading, 2 MiB 243-249 against 278-314).
	ShmReduceReadMin, ShmReduceReadMax int
	// ShmReduceScatterMax: the shared-memory reduce-scatter up to this
	// size (of one rank's send buffer): a round publishes a piece of every
	// block and each rank folds its own, one synchronisation a round
	// against p−1 messages per rank through p2p. On 2 cores it beat the
	// p2p forms from 8 B to 32 MiB on 2 and 4 ranks (and tied at 64 MiB),
	// so by default it covers every size.
	ShmReduceScatterMax int
	// ShmAllgatherMax, ShmAlltoallMax: the shared-memory allgather and
	// alltoall up to these sizes (every rank copies its data into its
	// slots once and every other rank copies out what it needs, against
	// p−1 messages or log p steps through p2p).
	ShmAllgatherMax, ShmAlltoallMax int
	// ShmAllgather2Max, ShmAlltoall2Max: the same bands for two ranks
	// that do not share a CPU (the region is not Crowded). Past them p2p's
	// exchange moves each rank's block with one kernel copy out of its
	// registered memory (a rendezvous READ, huge pages), where the slots
	// take a copy in and a copy out: on 2 cores, with the same buffers
	// call after call, the exchange took 0.89-0.92 of the slots' time from
	// a 4 MiB allgather result and 0.91-0.96 from a 1 MiB alltoall send
	// buffer (0.65 at 4 MiB), and 1.02-1.6 below. With new buffers every
	// call (a Go program that allocates them, 2 MiB a rank; the
	// rendezvous registers its buffers) the alltoall still took about 0.6
	// of the slots' time and the allgather about the same (medians 260
	// and 277 us over 10 alternating runs, the pairs' ratios 0.34-1.48).
	// Crowded, or with more ranks (4 on 2 cores), the exchange's every
	// step waits for a rank to be scheduled, and it took 1.05-9 times the
	// slots' time.
	ShmAllgather2Max, ShmAlltoall2Max int
	// ShmAlltoallBlockMax: the shared-memory alltoall of more than two
	// ranks up to this size of a block (one send buffer over p). Past it
	// the linear alltoall moves each block by p2p's rendezvous, one kernel
	// copy, where the slots take a copy in and one out and every round
	// waits for every rank: 4 and 8 ranks on 2 cores took about half the
	// slots' time from 512 KiB and 1 MiB blocks (docs/collectives.md).
	// Two ranks leave the slots at the same block size (ShmAlltoall2Max).
	ShmAlltoallBlockMax int
	// ShmReadBlockMin: above this size of a block (the result over p,
	// one send buffer over p) the shared-memory allgather and alltoall
	// read every other rank's block straight out of its buffer, where the
	// region can (PeerReader): one kernel copy per block instead of a copy
	// into the slots and one out, for a system call per block. On the
	// 2-core machine these defaults were measured on, the slots were faster
	// at every size from 256 KiB to 4 MiB on 2 and 4 ranks (the reads win
	// only when the machine is loaded), so by default it never reads.
	ShmReadBlockMin int
	// ShmBcast2Max: the two-rank shared-memory bcast up to this size (the
	// root copies one piece in while the reader copies the previous out).
	ShmBcast2Max int
	// ShmBcastMax: the shared-memory bcast of more than two ranks up to
	// this size (the root copies pieces in, every reader copies them out;
	// p2p's trees pass each piece through up to log p ranks, every hop a
	// wake-up when ranks outnumber cores).
	ShmBcastMax int
	// ShmReadMin, ShmReadMax: a bcast of more than two ranks has the
	// readers copy the root's own buffer above ShmReadMin and up to
	// ShmReadMax, where the region can (PeerReader).
	ShmReadMin, ShmReadMax int
	// ShmSplitMin, ShmSplitMax: a two-rank bcast splits the copy between
	// the ranks' process_vm_readv and _writev above ShmSplitMin and up to
	// ShmSplitMax, where the region can (PeerWriter), except above
	// ShmSplitGapMin and up to ShmSplitGapMax, where the slots' pipeline
	// wins. Each system call costs a few µs before it copies anything.
	ShmSplitMin, ShmSplitMax       int
	ShmSplitGapMin, ShmSplitGapMax int
	// ShmFoldBytes: above this size the shared-memory allreduce of more
	// than two ranks reduces blocks and gathers them instead of having
	// every rank read every chunk; ShmFoldBytes2 is the same for two
	// ranks, which save less by folding (each reads one other chunk).
	ShmFoldBytes, ShmFoldBytes2 int
	// ShmPipeBytes: above this size the shared-memory allreduce of all
	// chunks, and the reduce whose root folds every chunk, move in pieces
	// (of at least ShmPieceMin, an eighth of the vector, at most a slot) so
	// that one rank copies the next piece in while another folds this one;
	// a shared-memory bcast always does. By default never: on the 2-core
	// machine these defaults were measured on, a 2-rank reduce of 2 MiB
	// took 0.81 of the pieces' time in whole slots (1 and 4 MiB 0.96-0.97),
	// and 4 and 8 ranks the same (0.65-1.09, within the noise).
	ShmPipeBytes, ShmPieceMin int
	// ShmPrefetchMax: a shared-memory reader waiting for a chunk whose
	// data lies past the slot's first line prefetches the lines it will
	// read, up to this many bytes, while it polls (see shmSlotFor). At
	// 1 KiB the prefetches of two slots' lines every poll cost what they
	// save (two ranks: 0.91-1.06 of the time; 0.75-0.93 at 64-512 B).
	ShmPrefetchMax int
	// ShmKeepCPU: where the ranks outnumber the CPUs, a shared-memory
	// waiter polls without yielding for at most this long while the rank
	// it waits for looks about to publish from another CPU (see Keeping
	// the CPU in alg_shm.go; negative: never). On the 2-vCPU VM the
	// defaults were measured on, 4 ranks with the root alone on a CPU, a
	// bcast of 4 B-1 KiB took 0.07-0.09 of its time without (7-10 µs a
	// call before); 2 µs beat 1 and 4 there, and in the exchanges
	// (alltoall with 2 ranks a CPU 0.78-0.84 of the time without; 0.99-1.13
	// with 3 ranks on one CPU, whose waits pay for the notes).
	ShmKeepCPU time.Duration
	// ShmLiveWindow: a rank counts as running for ShmKeepCPU if its wait
	// looked within this long. A waiter looks every 4 polls and a yield,
	// and a yield (a system call) took 1.3 µs on that VM: the looks came
	// 2-4 µs apart.
	ShmLiveWindow time.Duration
	// HierBigBytes: above this size the hierarchical algorithms use their
	// bandwidth forms (ring reduce-scatter and gather inside a host,
	// scatter-allgather bcast) instead of binomial trees.
	HierBigBytes int
	// HierBigCrowdedBytes is HierBigBytes where a host's ranks outnumber
	// its CPUs (Crowd above 1): every step of a bandwidth form waits for
	// the scheduler to run the ranks it joins, and the binomial trees'
	// fewer steps won up to 2 MiB on the 2-core machine the defaults were
	// measured on (4 hosts of 2 ranks, a CPU for 2 hosts: bcast 0.32–0.59
	// of the time at 128 KiB–2 MiB, allreduce 0.86–0.94; from 4 MiB the
	// allreduce's ring forms won again).
	HierBigCrowdedBytes int
	// RingPieceBytes: the ring allreduce moves each block in pieces of at
	// most this size, all of a step's pieces posted at once, so that a
	// rank reduces and forwards each piece while the next ones are still
	// arriving (negative: whole blocks). By default blocks move whole: on
	// loopback tcp, pieces at or under p2p's pipeline limit were up to
	// twice as slow (a train of eager fragments per piece) and larger ones
	// even; across a shaped 5 Gbit/s link, 1 MiB pieces were 2-11% faster
	// from 1 to 8 MiB but 1.56x slower at 16 MiB, 2 MiB pieces 1.6x slower
	// at 16 and 32 MiB, where whole blocks reached 89% of the link.
	RingPieceBytes int
	// PairExchangeBytes: a two-rank allreduce over messages (a group of two
	// ranks, or the leaders of two hosts) runs recursive doubling, one
	// exchange of the whole vector, up to this size. The ring and
	// Rabenseifner move the same bytes there and reduce half as many, at
	// the price of a second exchange that waits for the first and for
	// both ranks' folds: over tcp that step cost more than the half
	// reduction saved up to 2-4 MiB, far more than α (2 ranks over
	// loopback, recursive doubling took 0.65 of the ring's time at 512
	// KiB, 0.86 at 1 MiB, 0.84-0.89 at 2 MiB and 1.05 at 4 MiB; between
	// two cluster hosts 0.67 and 0.81 at 512 KiB and 1 MiB, 0.96 at 2 MiB
	// and 0.99-1.33 at 4-8 MiB). A two-rank reduce likewise sends the
	// root one message (binomial) up to this size rather than
	// Rabenseifner's exchange of halves and gather (between two cluster
	// hosts the binomial took 0.51-0.70 of its time at 256 KiB-2 MiB).
	PairExchangeBytes int

	segment int // Options.SegmentBytes, for the chain's pipeline
}

// defModel holds every default of Model (the link constants before a
// group's LinkInfo refines them).
var defModel = Model{
	Alpha:               3 * time.Microsecond,
	Beta:                1 / 8e9,
	Gamma:               1 / 4e9,
	CopyBeta:            1 / 6e9,
	PostOverlap:         0.25,
	ShmSmallBytes:       64 << 10,
	ShmAllreduceMax:     math.MaxInt,
	ShmReduceMax:        math.MaxInt,
	ShmReduceFoldBytes:  math.MaxInt,
	ShmReduceReadMin:    math.MaxInt,
	ShmReduceReadMax:    512 << 10,
	ShmReduceScatterMax: math.MaxInt,
	ShmAllgatherMax:     math.MaxInt,
	ShmAlltoallMax:      math.MaxInt,
	ShmAllgather2Max:    2 << 20,
	ShmAlltoall2Max:     512 << 10,
	ShmAlltoallBlockMax: 256 << 10,
	ShmReadBlockMin:     math.MaxInt,
	ShmBcast2Max:        math.MaxInt,
	ShmBcastMax:         math.MaxInt,
	ShmReadMin:          32 << 10,
	ShmReadMax:          128 << 10,
	ShmSplitMin:         128 << 10,
	ShmSplitMax:         8 << 20,
	ShmSplitGapMin:      1 << 20,
	ShmSplitGapMax:      4 << 20,
	ShmFoldBytes:        64 << 10,
	ShmFoldBytes2:       128 << 10,
	ShmPipeBytes:        math.MaxInt,
	ShmPieceMin:         64 << 10,
	ShmPrefetchMax:      512,
	ShmKeepCPU:          2 * time.Microsecond,
	ShmLiveWindow:       8 * time.Microsecond,
	HierBigBytes:        64 << 10,
	HierBigCrowdedBytes: 2 << 20,
	RingPieceBytes:      math.MaxInt,
	PairExchangeBytes:   2 << 20,
	segment:             256 << 10,
}

// DefaultModel returns the model's defaults (the link constants before a
// group's LinkInfo refines them; IntraAlpha, IntraBeta and OneSidedAlpha
// zero, meaning Alpha and Beta).
func DefaultModel() Model { return defModel }

// withDefaults fills m's zero fields from defModel.
func (m Model) withDefaults() Model {
	setD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	setF := func(v *float64, d float64) {
		if !(*v > 0) || math.IsInf(*v, 1) {
			*v = d
		}
	}
	setI := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	d := &defModel
	setD(&m.Alpha, d.Alpha)
	setF(&m.Beta, d.Beta)
	setF(&m.Gamma, d.Gamma)
	setF(&m.CopyBeta, d.CopyBeta)
	setF(&m.PostOverlap, d.PostOverlap)
	setF(&m.Crowd, 1)
	for _, f := range [...]struct{ v, d *int }{
		{&m.ShmSmallBytes, &d.ShmSmallBytes}, {&m.ShmAllreduceMax, &d.ShmAllreduceMax},
		{&m.ShmReduceMax, &d.ShmReduceMax}, {&m.ShmReduceFoldBytes, &d.ShmReduceFoldBytes},
		{&m.ShmReduceReadMin, &d.ShmReduceReadMin}, {&m.ShmReduceReadMax, &d.ShmReduceReadMax},
		{&m.ShmAllgatherMax, &d.ShmAllgatherMax}, {&m.ShmReduceScatterMax, &d.ShmReduceScatterMax},
		{&m.ShmAlltoallMax, &d.ShmAlltoallMax}, {&m.ShmReadBlockMin, &d.ShmReadBlockMin},
		{&m.ShmAllgather2Max, &d.ShmAllgather2Max}, {&m.ShmAlltoall2Max, &d.ShmAlltoall2Max},
		{&m.ShmAlltoallBlockMax, &d.ShmAlltoallBlockMax},
		{&m.ShmBcast2Max, &d.ShmBcast2Max}, {&m.ShmBcastMax, &d.ShmBcastMax}, {&m.ShmReadMin, &d.ShmReadMin},
		{&m.ShmReadMax, &d.ShmReadMax}, {&m.ShmSplitMin, &d.ShmSplitMin},
		{&m.ShmSplitMax, &d.ShmSplitMax}, {&m.ShmSplitGapMin, &d.ShmSplitGapMin},
		{&m.ShmSplitGapMax, &d.ShmSplitGapMax}, {&m.ShmFoldBytes, &d.ShmFoldBytes},
		{&m.ShmFoldBytes2, &d.ShmFoldBytes2}, {&m.ShmPipeBytes, &d.ShmPipeBytes},
		{&m.ShmPieceMin, &d.ShmPieceMin}, {&m.ShmPrefetchMax, &d.ShmPrefetchMax}, {&m.HierBigBytes, &d.HierBigBytes},
		{&m.HierBigCrowdedBytes, &d.HierBigCrowdedBytes},
		{&m.RingPieceBytes, &d.RingPieceBytes}, {&m.PairExchangeBytes, &d.PairExchangeBytes},
		{&m.segment, &d.segment},
	} {
		setI(f.v, *f.d)
	}
	if m.ShmKeepCPU == 0 {
		m.ShmKeepCPU = d.ShmKeepCPU
	}
	setD(&m.ShmLiveWindow, d.ShmLiveWindow)
	setD(&m.IntraAlpha, m.Alpha)
	setF(&m.IntraBeta, m.Beta)
	setD(&m.OneSidedAlpha, m.Alpha)
	return m
}

// newModel resolves an Engine's model: the defaults, refined by the
// group's LinkInfo, overridden by the nonzero fields of o.
func newModel(g Group, o *Model, segment int) Model {
	var m Model
	if o != nil {
		m = *o
	}
	m.segment = segment
	if li, ok := g.(LinkInfo); ok && g.Size() > 1 {
		var worstLat, bestLat time.Duration = 0, math.MaxInt64
		worstBW, bestBW := math.Inf(1), 0.0
		topo, _ := g.(Topology)
		for p := 0; p < g.Size(); p++ {
			if p == g.Rank() {
				continue
			}
			lat, bw := li.Link(p)
			if lat > worstLat {
				worstLat = lat
			}
			if bw > 0 && bw < worstBW {
				worstBW = bw
			}
			if topo != nil && topo.HostOf(p) == topo.HostOf(g.Rank()) {
				bestLat = min(bestLat, lat)
				bestBW = max(bestBW, bw)
			}
		}
		if m.Alpha <= 0 && worstLat > 0 {
			m.Alpha = worstLat
		}
		if m.Beta <= 0 && !math.IsInf(worstBW, 1) {
			m.Beta = 1 / worstBW
		}
		if m.IntraAlpha <= 0 && bestLat != math.MaxInt64 && bestLat > 0 {
			m.IntraAlpha = bestLat
		}
		if m.IntraBeta <= 0 && bestBW > 0 {
			m.IntraBeta = 1 / bestBW
		}
	}
	if cr, ok := g.(Crowding); ok && m.Crowd <= 0 {
		m.Crowd = cr.Crowding()
	}
	if sc, ok := g.(SingleCopy); ok {
		if n := sc.SingleCopyMin(); n > 0 {
			// The defaults were measured where two copies through the
			// slots beat a kernel copy up to them; a machine where the
			// kernel copy wins sooner reads sooner.
			for _, f := range [...]struct{ v, d *int }{
				{&m.ShmSplitMin, &defModel.ShmSplitMin}, {&m.ShmReadMin, &defModel.ShmReadMin},
				{&m.ShmReadBlockMin, &defModel.ShmReadBlockMin}, {&m.ShmReduceReadMin, &defModel.ShmReduceReadMin},
			} {
				if *f.v == 0 {
					*f.v = min(*f.d, n)
				}
			}
		}
	}
	return m.withDefaults()
}

func ceilLog2(p int) int {
	if p <= 1 {
		return 0
	}
	return bits.Len(uint(p - 1))
}

func isPow2(p int) bool { return p > 0 && p&(p-1) == 0 }

// Cost estimates, in seconds, algorithm a for collective c over p ranks
// moving n bytes (the whole vector for reductions, bcast and allgather's
// result; one rank's send buffer for alltoall), with m's zero fields at
// their defaults. It returns +Inf for combinations that do not exist, and
// for the algorithms whose cost depends on more than p (hierarchical,
// shared memory: Engine.Cost has them).
func (m Model) Cost(c Collective, a Algorithm, p int, n int) float64 {
	m = m.withDefaults()
	return m.cost(c, a, p, float64(n), m.Alpha.Seconds(), m.Beta)
}

func (m *Model) cost(c Collective, a Algorithm, p int, n float64, alpha, beta float64) float64 {
	if p <= 1 {
		return 0
	}
	lg := float64(ceilLog2(p))
	pf := float64(p)
	frac := (pf - 1) / pf
	g := m.Gamma
	fold := 0.0 // the extra steps non-powers of two pay in recursive schemes
	if !isPow2(p) {
		fold = 2 * (alpha + n*beta)
	}
	// k messages posted at once and waited for together overlap: the
	// first costs a latency, each further one its injection (PostOverlap);
	// a form with p−1 dependent steps pays p−1 latencies instead.
	atOnce := func(k float64) float64 { return alpha + (k-1)*m.PostOverlap*alpha }
	switch c {
	case CollBarrier:
		return lg * alpha
	case CollBcast:
		switch a {
		case Binomial:
			return lg * (alpha + n*beta)
		case ScatterAllgather:
			return (lg+pf-1)*alpha + 2*frac*n*beta
		case Chain:
			seg := math.Min(n, float64(m.segment))
			if seg == 0 {
				return (pf - 1) * alpha
			}
			s := math.Ceil(n / seg)
			return (pf - 1 + s - 1) * (alpha + seg*beta)
		}
	case CollReduce:
		if p == 2 && n <= float64(m.PairExchangeBytes) && (a == Rabenseifner || a == Ordered) {
			// As for the allreduce (PairExchangeBytes): the halves'
			// exchange and the gather after it cost more than the half
			// fold saves; one message to the root, plus that step.
			return m.cost(c, Binomial, p, n, alpha, beta) + alpha
		}
		switch a {
		case Binomial:
			return lg * (alpha + n*beta + n*g)
		case Rabenseifner:
			return (pf-1)*alpha + frac*n*(beta+g) + lg*alpha + frac*n*beta
		case Ordered:
			return (pf-1)*alpha + frac*n*(beta+g) + lg*alpha + frac*n*beta + frac*n*g*0.1
		}
	case CollAllreduce:
		if p == 2 && n <= float64(m.PairExchangeBytes) && (a == Ring || a == Rabenseifner || a == RingOneSided) {
			// Their second exchange costs more than the half reduction
			// saves (PairExchangeBytes): recursive doubling plus that step.
			return m.cost(c, RecursiveDoubling, p, n, alpha, beta) + alpha
		}
		switch a {
		case RecursiveDoubling:
			return lg*(alpha+n*beta+n*g) + fold
		case Ring:
			return 2*(pf-1)*alpha + 2*frac*n*beta + frac*n*g
		case Rabenseifner:
			return 2*lg*alpha + 2*frac*n*beta + frac*n*g + fold
		case RingOneSided:
			os := m.OneSidedAlpha.Seconds()
			return 2*(pf-1)*os + 2*frac*n*beta + frac*n*g + alpha
		case Ordered:
			// Like the ring, plus the scratch holding every contribution.
			return 2*(pf-1)*alpha + 2*frac*n*beta + frac*n*g + frac*n*beta*0.25
		}
	case CollAllgather, CollAllgatherv:
		switch a {
		case Ring:
			return (pf-1)*alpha + frac*n*beta
		case RecursiveDoubling:
			return lg*alpha + frac*n*beta + fold/2
		case Bruck:
			return lg*alpha + frac*n*beta + n*beta/2 // plus the final rotation copy
		case Linear:
			return atOnce(pf-1) + frac*n*beta
		}
	case CollReduceScatter:
		switch a {
		case RecursiveHalving:
			return lg*alpha + frac*n*(beta+g) + fold
		case Pairwise: // every block posted at once (orderedReduceScatter)
			return atOnce(pf-1) + frac*n*(beta+g) + frac*n*beta*0.25
		case Ring:
			return (pf-1)*alpha + frac*n*(beta+g)
		}
	case CollGather, CollGatherv, CollScatter, CollScatterv:
		switch a {
		case Binomial:
			return lg*alpha + frac*n*beta + n*beta/4 // subtree copies
		case Linear:
			return (pf-1)*alpha + frac*n*beta
		}
	case CollAlltoall, CollAlltoallv:
		switch a {
		case Pairwise:
			return (pf-1)*alpha + frac*n*beta
		case Bruck:
			return lg*(alpha+n/2*beta) + n*beta
		case Linear:
			return atOnce(pf-1) + frac*n*beta
		}
	case CollScan, CollExscan:
		return lg * (alpha + n*beta + n*g)
	}
	return math.Inf(1)
}

// hierCost is the hierarchical allreduce: reduce inside each host, allreduce
// among host leaders over the network, broadcast inside each host.
func (m *Model) hierCost(local, hosts int, n float64) float64 {
	ia, ib := m.IntraAlpha.Seconds(), m.IntraBeta
	intra := m.cost(CollReduce, Binomial, local, n, ia, ib) + m.cost(CollBcast, Binomial, local, n, ia, ib)
	if local > 1 && m.hierBig(int(n)) {
		intra = m.cost(CollReduce, Rabenseifner, local, n, ia, ib) + m.cost(CollBcast, ScatterAllgather, local, n, ia, ib)
	}
	_, best := m.cheapest(CollAllreduce, leadersAllreduce, hosts, n)
	return intra + best
}

// The algorithms the hierarchical allreduce and reduce choose among for
// the step between hosts (Model.cheapest).
var (
	leadersAllreduce = []Algorithm{RecursiveDoubling, Ring, Rabenseifner}
	leadersReduce    = []Algorithm{Binomial, Rabenseifner}
)

// cheapest is the cheapest of algs (the first among equals) for c over p
// ranks moving n bytes on the network's links (Alpha, Beta), and its cost:
// what a hierarchical form runs among one rank per host, and what its cost
// counts for that step, so the two cannot disagree.
func (m *Model) cheapest(c Collective, algs []Algorithm, p int, n float64) (Algorithm, float64) {
	best, bestCost := algs[0], math.Inf(1)
	for _, a := range algs {
		if cost := m.cost(c, a, p, n, m.Alpha.Seconds(), m.Beta); cost < bestCost {
			best, bestCost = a, cost
		}
	}
	return best, bestCost
}

// hierReduceCost is the hierarchical reduce: inside each host to its
// representative, then among the representatives over the network by the
// cheaper of the binomial tree and Rabenseifner's form (reduceHier).
func (m *Model) hierReduceCost(local, hosts int, n float64) float64 {
	ia, ib := m.IntraAlpha.Seconds(), m.IntraBeta
	intra := m.cost(CollReduce, Binomial, local, n, ia, ib)
	if local > 1 && m.hierBig(int(n)) {
		intra = m.cost(CollReduce, Rabenseifner, local, n, ia, ib)
	}
	_, leaders := m.cheapest(CollReduce, leadersReduce, hosts, n)
	return intra + leaders
}

// hierBcastCost is the hierarchical broadcast: among one rank per host over
// the network, then inside each host.
func (m *Model) hierBcastCost(local, hosts int, n float64) float64 {
	best := func(p int, alpha, beta float64) float64 {
		return math.Min(m.cost(CollBcast, Binomial, p, n, alpha, beta), m.cost(CollBcast, ScatterAllgather, p, n, alpha, beta))
	}
	return best(hosts, m.Alpha.Seconds(), m.Beta) + best(local, m.IntraAlpha.Seconds(), m.IntraBeta)
}

// hierBarrierCost is the hierarchical barrier: the ranks of a host arrive
// at their leader at once, the leaders run the dissemination barrier, and
// each releases its host at once.
func (m *Model) hierBarrierCost(local, hosts int) float64 {
	ia := m.IntraAlpha.Seconds()
	fan := ia + float64(local-2)*m.PostOverlap*ia
	return 2*fan + m.cost(CollBarrier, Dissemination, hosts, 0, m.Alpha.Seconds(), m.Beta)
}

// fanCost is the latency of k messages of size bytes posted at once and
// waited for together (alpha each): the first costs alpha, each further
// one its injection (PostOverlap). Messages larger than inline travel as
// header and payload, two messages each; the payload's receive is posted
// with the header's (call.recv), so they overlap as the others do.
func (m *Model) fanCost(k int, size float64, inline int, alpha float64) float64 {
	switch {
	case k <= 0:
		return 0
	case size > float64(inline):
		k *= 2
	}
	return alpha + float64(k-1)*m.PostOverlap*alpha
}

// hierAllgatherCost is the hierarchical allgather of n bytes (the result)
// over p ranks: the blocks of a host arrive at its leader at once, the
// leaders send their hosts' blocks to each other at once, and each leader
// broadcasts the result in its host by a binomial tree.
func (m *Model) hierAllgatherCost(local, hosts, p int, n float64, inline int) float64 {
	ia, ib, a := m.IntraAlpha.Seconds(), m.IntraBeta, m.Alpha.Seconds()
	block := n / float64(p)
	bundle := float64(local) * block
	return m.fanCost(local-1, block, inline, ia) + float64(local-1)*block*ib +
		m.fanCost(hosts-1, bundle, inline, a) + float64(hosts-1)*bundle*m.Beta +
		m.cost(CollBcast, Binomial, local, n, ia, ib)
}

// hierAlltoallCost is the hierarchical alltoall of n bytes per rank over p
// ranks: every rank's buffer to its leader at once, the leaders' bundles
// (local² blocks) to each other at once, every rank's result from its
// leader at once; and the leader's copies, which nobody else shares: its
// host's own blocks, the bundle it packs for each other host and the one it
// unpacks from each. (Without them the model kept this form at 2 hosts of
// 2 ranks sharing a CPU up to 128 KiB blocks, where the flat one ran in
// 0.61-0.74 of its time from 32 KiB.)
func (m *Model) hierAlltoallCost(local, hosts, p int, n float64, inline int) float64 {
	ia, ib, a := m.IntraAlpha.Seconds(), m.IntraBeta, m.Alpha.Seconds()
	bundle := float64(local*local) * n / float64(p)
	fan := m.fanCost(local-1, n, inline, ia) + float64(local-1)*n*ib
	copies := float64(2*(hosts-1)+1) * bundle * m.CopyBeta
	return 2*fan + m.fanCost(hosts-1, bundle, inline, a) + float64(hosts-1)*bundle*m.Beta + copies
}

// hierReduceScatterCost is the hierarchical reduce-scatter of an n-byte
// vector over p ranks: a binomial reduce of the vector in each host, the
// leaders' bundles of partial blocks to each other at once (and their
// folding), every rank's block from its leader at once.
func (m *Model) hierReduceScatterCost(local, hosts, p int, n float64, inline int) float64 {
	ia, ib, a := m.IntraAlpha.Seconds(), m.IntraBeta, m.Alpha.Seconds()
	block := n / float64(p)
	bundle := float64(local) * block
	return m.cost(CollReduce, Binomial, local, n, ia, ib) +
		m.fanCost(hosts-1, bundle, inline, a) + float64(hosts-1)*bundle*(m.Beta+m.Gamma) +
		m.fanCost(local-1, block, inline, ia) + float64(local-1)*block*ib
}

// choose picks the algorithm for one call: the forced one if Options name
// it (checked against capabilities, op and Deterministic), else the
// cheapest admissible one.
func (e *Engine) choose(c Collective, nbytes int, commutative bool) (Algorithm, error) {
	forced := e.forced[c]
	ordered := !commutative || e.opts.Deterministic
	admissible := func(a Algorithm) error {
		switch {
		case a == RingOneSided:
			if _, ok := e.g.(OneSided); !ok {
				return fmt.Errorf("%w: %v needs a group with one-sided windows", ErrUnsupported, a)
			}
		case a == Hierarchical:
			if e.hosts == nil {
				return fmt.Errorf("%w: %v needs a group that reports its topology", ErrUnsupported, a)
			}
		case a == SharedMemory:
			if e.shm == nil {
				return fmt.Errorf("%w: %v needs a group whose ranks share memory (one host, shm transport)", ErrUnsupported, a)
			}
		}
		if ordered {
			ok := true
			switch c {
			case CollAllreduce:
				ok = a == Ordered || a == SharedMemory || (a == RecursiveDoubling && !e.opts.Deterministic)
			case CollReduce:
				ok = a == Ordered || a == SharedMemory
			case CollReduceScatter:
				ok = a == Pairwise || a == SharedMemory
			}
			if !ok {
				why := "the op is not commutative"
				if e.opts.Deterministic {
					why = "Options.Deterministic is set"
				}
				return fmt.Errorf("%w: %v %v does not keep rank order and %s", ErrInvalidArgument, c, a, why)
			}
		}
		return nil
	}
	if forced != Auto {
		if err := admissible(forced); err != nil {
			return 0, err
		}
		return forced, nil
	}
	key := autoKey(nbytes, commutative)
	if m := e.autoMemo[c].Load(); key != 0 && m&^0xff == key {
		return Algorithm(m & 0xff), nil
	}
	a, err := e.chooseAuto(c, nbytes, admissible)
	if err == nil && key != 0 {
		e.autoMemo[c].Store(key | uint64(a))
	}
	return a, err
}

// autoKey is what Engine.autoMemo remembers a choice under (its low 8
// bits are the algorithm), or 0 for a size it does not remember.
func autoKey(nbytes int, commutative bool) uint64 {
	if nbytes < 0 || nbytes >= 1<<53 {
		return 0
	}
	k := 1<<63 | uint64(nbytes)<<9
	if commutative {
		k |= 1 << 8
	}
	return k
}

// chooseAuto is choose's cost-model search: the cheapest admissible
// algorithm by Engine.Cost, the first in autoOrder among equals.
func (e *Engine) chooseAuto(c Collective, nbytes int, admissible func(Algorithm) error) (Algorithm, error) {
	best, bestCost := Auto, math.Inf(1)
	for _, a := range autoOrder(c) {
		if admissible(a) != nil {
			continue
		}
		if cost := e.cost(c, a, nbytes); cost < bestCost {
			best, bestCost = a, cost
		}
	}
	if best == Auto {
		return 0, fmt.Errorf("%w: no admissible algorithm for %v", ErrUnsupported, c)
	}
	return best, nil
}

// autoOrder is the order in which Auto considers c's algorithms: the
// shared-memory one first (inside its bands it costs nothing, and it
// keeps a tie), then algorithmsOf's.
func autoOrder(c Collective) []Algorithm {
	if c >= numCollectives {
		return nil
	}
	return autoOrders[c]
}

var autoOrders = func() (o [numCollectives][]Algorithm) {
	for c := range o {
		for _, a := range algorithmsOf[c] {
			if a == SharedMemory {
				o[c] = append([]Algorithm{a}, o[c]...)
			} else {
				o[c] = append(o[c], a)
			}
		}
	}
	return o
}()

// Cost is the model's estimate, in seconds, of running c with algorithm a
// on nbytes in this Engine's group (see Model.Cost for what nbytes
// counts). It is +Inf where the model has no such form: an algorithm c
// does not have, the hierarchical ones without several hosts of several
// ranks, the shared-memory ones without a region or outside the sizes
// where they pay. It does not check capabilities or the op (Choose does).
func (e *Engine) Cost(c Collective, a Algorithm, nbytes int) float64 {
	if !implements(c, a) {
		return math.Inf(1)
	}
	return e.cost(c, a, nbytes)
}

func (e *Engine) cost(c Collective, a Algorithm, nbytes int) float64 {
	m := &e.model
	switch {
	case a == SharedMemory:
		if e.shm != nil && m.shmPays(c, e.size, nbytes, e.shm.crowded) {
			return 0
		}
		return math.Inf(1)
	case a == Hierarchical:
		local, hosts := e.hostShape()
		if hosts < 2 || local < 2 {
			return math.Inf(1)
		}
		// Every rank of a host runs the steps inside it; only the
		// leaders cross the network.
		crowded := *m
		crowded.IntraAlpha = time.Duration(float64(m.IntraAlpha) * e.crowd())
		crowded.HierBigBytes = e.hierBigEdge()
		m := &crowded
		switch c {
		case CollBcast:
			return m.hierBcastCost(local, hosts, float64(nbytes))
		case CollReduce:
			return m.hierReduceCost(local, hosts, float64(nbytes))
		case CollBarrier:
			return m.hierBarrierCost(local, hosts)
		case CollAllgather:
			return m.hierAllgatherCost(local, hosts, e.size, float64(nbytes), e.opts.inline())
		case CollAlltoall:
			return m.hierAlltoallCost(local, hosts, e.size, float64(nbytes), e.opts.inline())
		case CollReduceScatter:
			return m.hierReduceScatterCost(local, hosts, e.size, float64(nbytes), e.opts.inline())
		}
		return m.hierCost(local, hosts, float64(nbytes))
	case c == CollAlltoall || c == CollAlltoallv:
		return m.cost(c, a, e.size, float64(nbytes), m.Alpha.Seconds()*e.crowd(), m.Beta*e.sharedLink()) + e.splitCost(c, a, nbytes)
	}
	return m.cost(c, a, e.size, float64(nbytes), m.Alpha.Seconds()*e.crowd(), m.Beta) + e.splitCost(c, a, nbytes)
}

// splitCost is what the linear allgather and alltoall pay beyond
// Model.cost for blocks past the inline size, which travel as header and
// payload: a second message to every peer, posted with the first (call.recv
// posts the payload's receive with the header's), so each adds its
// injection, as in fanCost.
func (e *Engine) splitCost(c Collective, a Algorithm, nbytes int) float64 {
	if a != Linear || (c != CollAlltoall && c != CollAllgather) || nbytes/e.size <= e.opts.inline() {
		return 0
	}
	return float64(e.size-1) * e.model.PostOverlap * e.model.Alpha.Seconds() * e.crowd()
}

// crowd is how many times over a step in which every rank of a host
// sends pays its latency (Model.Crowd): 1 in a group within one host.
func (e *Engine) crowd() float64 {
	if e.model.Crowd <= 1 {
		return 1
	}
	if len(e.hl.leaders) < 2 { // one host (or none known)
		return 1
	}
	return e.model.Crowd
}

// sharedLink is how much longer a flat alltoall's bytes take on the
// network than the one-link figure the model counts (n(p−1)/p β per rank)
// says, because the ranks of a host share its link: every one of them
// sends its blocks for the other hosts' ranks at the same time, so the
// host's link carries local·n·(p−local)/p bytes. 1 with a rank per host
// or without Topology. (The hierarchical form's bundles are counted on
// the shared link already; without this the flat forms looked cheaper
// from 32 KiB a rank on 2 hosts of 2 ranks, where they ran up to 1.5×
// slower than the hierarchical one.)
func (e *Engine) sharedLink() float64 {
	local, hosts := e.hostShape()
	if hosts < 2 || local < 2 || e.size < 2 {
		return 1
	}
	return float64(local) * float64(e.size-local) / float64(e.size-1)
}

// Model returns the cost model this Engine chooses with: Options.Model
// over the defaults refined by the group's LinkInfo.
func (e *Engine) Model() Model { return e.model }

// shmPays says whether the shared-memory algorithms run c of nbytes on p
// ranks (crowded: more than their CPUs) at no cost: up to ShmSmallBytes
// every one; past that, allreduce, reduce, allgather, reduce-scatter and
// alltoall up to their Shm*Max (allgather and alltoall of two uncrowded
// ranks up to their Shm*2Max too), a bcast of two ranks up to
// ShmBcast2Max and of more up to ShmBcastMax; the alltoall of more than
// two ranks only while its blocks are at most ShmAlltoallBlockMax.
func (m *Model) shmPays(c Collective, p int, nbytes int, crowded bool) bool {
	pair := p == 2 && !crowded
	switch {
	case nbytes <= m.ShmSmallBytes:
		return true
	case c == CollAllreduce:
		return nbytes <= m.ShmAllreduceMax
	case c == CollReduce:
		return nbytes <= m.ShmReduceMax
	case c == CollAllgather:
		return nbytes <= m.ShmAllgatherMax && (!pair || nbytes <= m.ShmAllgather2Max)
	case c == CollReduceScatter:
		return nbytes <= m.ShmReduceScatterMax
	case c == CollAlltoall:
		return nbytes <= m.ShmAlltoallMax && (!pair || nbytes <= m.ShmAlltoall2Max) &&
			(p <= 2 || nbytes/p <= m.ShmAlltoallBlockMax)
	case c == CollBcast && p == 2:
		return nbytes <= m.ShmBcast2Max
	case c == CollBcast:
		return nbytes <= m.ShmBcastMax
	}
	return false
}

// bcastReads says whether a shared-memory bcast of more than two ranks
// has the readers copy the root's buffer (bcastShmRead, where the region
// is a PeerReader) rather than pipeline it through the slots.
func (m *Model) bcastReads(n int) bool { return n > m.ShmReadMin && n <= m.ShmReadMax }

// bcastSplits says whether a two-rank shared-memory bcast of n bytes
// splits the copy (bcastShmSplit, where the region is a PeerWriter)
// rather than pipeline it through the slots.
func (m *Model) bcastSplits(n int) bool {
	return n > m.ShmSplitMin && n <= m.ShmSplitMax && !(n > m.ShmSplitGapMin && n <= m.ShmSplitGapMax)
}

// shmFolds says whether a shared-memory allreduce of n bytes on p ranks
// folds blocks and gathers them (allreduceShmRS) rather than have every
// rank fold every chunk.
func (m *Model) shmFolds(p, n int) bool {
	return n > m.ShmFoldBytes && p > 2 || n > m.ShmFoldBytes2
}

// readsBlocks says whether a shared-memory allgather or alltoall whose
// blocks have n bytes reads them out of the other ranks' buffers
// (allgatherShmRead, alltoallShmRead; where the region is a PeerReader).
func (m *Model) readsBlocks(n int) bool { return n > m.ShmReadBlockMin }

// reduceFolds says whether a shared-memory reduce of n bytes folds
// blocks (reduceShmRS) rather than have the root fold every chunk.
func (m *Model) reduceFolds(n int) bool { return n > m.ShmReduceFoldBytes }

// reduceReads says whether a shared-memory reduce of n bytes whose root
// folds in place reads the other ranks' buffers (reduceShmRead; where
// the region is a PeerReader and not crowded).
func (m *Model) reduceReads(n int) bool { return n > m.ShmReduceReadMin && n <= m.ShmReduceReadMax }

// hierBig says whether the hierarchical algorithms use their bandwidth
// forms for n bytes where every rank has a CPU.
func (m *Model) hierBig(n int) bool { return n > m.HierBigBytes }

// hierBigEdge is the size above which this group's hierarchical
// algorithms take their bandwidth forms, in what runs (hierBig) and in
// what the model costs: HierBigCrowdedBytes where a host's ranks
// outnumber its CPUs, else HierBigBytes.
func (e *Engine) hierBigEdge() int {
	if e.crowd() > 1 {
		return e.model.HierBigCrowdedBytes
	}
	return e.model.HierBigBytes
}

// hierBig is the Model's hierBig for this group (hierBigEdge).
func (e *Engine) hierBig(n int) bool { return n > e.hierBigEdge() }

// ringPiece is the piece size of the pipelined ring for elements of
// esize bytes: RingPieceBytes rounded down to whole elements (at least
// one), or, for none, larger than any block.
func (m *Model) ringPiece(esize int) int {
	if m.RingPieceBytes < 0 || m.RingPieceBytes > math.MaxInt/4 {
		return math.MaxInt / 4 // (j+1)·piece and len+piece stay in range
	}
	return max(m.RingPieceBytes/esize, 1) * esize
}

// hostShape returns the largest number of ranks on one host and the number
// of hosts.
func (e *Engine) hostShape() (local, hosts int) {
	count := map[int]int{}
	for _, h := range e.hosts {
		count[h]++
	}
	for _, n := range count {
		local = max(local, n)
	}
	return local, len(count)
}

// Choose reports the algorithm a call of c moving nbytes would run with
// this Engine's options, group and cost model (what Auto resolves to, or
// the forced one), or why none can run. commutative is the op's property
// (true for collectives that do not reduce).
func (e *Engine) Choose(c Collective, nbytes int, commutative bool) (Algorithm, error) {
	return e.choose(c, nbytes, commutative)
}
