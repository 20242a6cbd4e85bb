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
// evaluated along each algorithm's critical path. Alpha and Beta describe
// the slowest link of the group (a flat algorithm runs at its speed); the
// Intra* pair describes links between ranks of one host, used by the
// hierarchical algorithms. Zero fields take defaults (3 µs, 8 GB/s, 4 GB/s
// of reduction), refined by the group's LinkInfo when it has one.
type Model struct {
	Alpha      time.Duration // per-message latency
	Beta       float64       // seconds per byte on the wire
	Gamma      float64       // seconds per byte reduced
	IntraAlpha time.Duration
	IntraBeta  float64
	// OneSidedAlpha is the per-message cost of a one-sided write with
	// notification; the one-sided ring is chosen only where it makes the
	// ring cheaper. Zero means Alpha (so Auto prefers the two-sided ring).
	OneSidedAlpha time.Duration
}

const (
	defAlpha = 3 * time.Microsecond
	defBeta  = 1 / 8e9
	defGamma = 1 / 4e9
)

func newModel(g Group, o *Model) Model {
	m := Model{Alpha: defAlpha, Beta: defBeta, Gamma: defGamma}
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
		if worstLat > 0 {
			m.Alpha = worstLat
		}
		if !math.IsInf(worstBW, 1) {
			m.Beta = 1 / worstBW
		}
		if bestLat != math.MaxInt64 && bestLat > 0 {
			m.IntraAlpha = bestLat
		}
		if bestBW > 0 {
			m.IntraBeta = 1 / bestBW
		}
	}
	if o != nil {
		if o.Alpha > 0 {
			m.Alpha = o.Alpha
		}
		if o.Beta > 0 {
			m.Beta = o.Beta
		}
		if o.Gamma > 0 {
			m.Gamma = o.Gamma
		}
		if o.IntraAlpha > 0 {
			m.IntraAlpha = o.IntraAlpha
		}
		if o.IntraBeta > 0 {
			m.IntraBeta = o.IntraBeta
		}
		if o.OneSidedAlpha > 0 {
			m.OneSidedAlpha = o.OneSidedAlpha
		}
	}
	if m.IntraAlpha == 0 {
		m.IntraAlpha = m.Alpha
	}
	if m.IntraBeta == 0 {
		m.IntraBeta = m.Beta
	}
	if m.OneSidedAlpha == 0 {
		m.OneSidedAlpha = m.Alpha
	}
	return m
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
// result; one rank's send buffer for alltoall). It returns +Inf for
// combinations that do not exist.
func (m *Model) Cost(c Collective, a Algorithm, p int, n int) float64 {
	return m.cost(c, a, p, float64(n), m.Alpha.Seconds(), m.Beta)
}

// postOverlap is the cost of each further message of a batch posted at
// once (Linear, Pairwise reduce-scatter), as a fraction of α: the
// messages travel together, and what each adds is its sender's and
// receiver's software. A form with p−1 dependent steps pays p−1
// latencies instead, and where ranks outnumber cores each step may wait
// for the peer's turn on a core.
const postOverlap = 0.25

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
	// first costs a latency, each further one its injection (see
	// postOverlap).
	atOnce := func(k float64) float64 { return alpha + (k-1)*postOverlap*alpha }
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
			seg := math.Min(n, 256<<10)
			if seg == 0 {
				return (pf - 1) * alpha
			}
			s := math.Ceil(n / seg)
			return (pf - 1 + s - 1) * (alpha + seg*beta)
		}
	case CollReduce:
		switch a {
		case Binomial:
			return lg * (alpha + n*beta + n*g)
		case Rabenseifner:
			return (pf-1)*alpha + frac*n*(beta+g) + lg*alpha + frac*n*beta
		case Ordered:
			return (pf-1)*alpha + frac*n*(beta+g) + lg*alpha + frac*n*beta + frac*n*g*0.1
		}
	case CollAllreduce:
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
	if local > 1 && n > 64<<10 {
		intra = m.cost(CollReduce, Rabenseifner, local, n, ia, ib) + m.cost(CollBcast, ScatterAllgather, local, n, ia, ib)
	}
	best := math.Inf(1)
	for _, a := range []Algorithm{RecursiveDoubling, Ring, Rabenseifner} {
		best = math.Min(best, m.cost(CollAllreduce, a, hosts, n, m.Alpha.Seconds(), m.Beta))
	}
	return intra + best
}

// hierBcastCost is the hierarchical broadcast: among one rank per host over
// the network, then inside each host.
func (m *Model) hierBcastCost(local, hosts int, n float64) float64 {
	best := func(p int, alpha, beta float64) float64 {
		return math.Min(m.cost(CollBcast, Binomial, p, n, alpha, beta), m.cost(CollBcast, ScatterAllgather, p, n, alpha, beta))
	}
	return best(hosts, m.Alpha.Seconds(), m.Beta) + best(local, m.IntraAlpha.Seconds(), m.IntraBeta)
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
				ok = a == Pairwise
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

// chooseAuto is choose's cost-model search.
func (e *Engine) chooseAuto(c Collective, nbytes int, admissible func(Algorithm) error) (Algorithm, error) {
	if e.shm != nil && e.shmPays(c, nbytes) && admissible(SharedMemory) == nil && implements(c, SharedMemory) {
		return SharedMemory, nil
	}
	best, bestCost := Auto, math.Inf(1)
	for _, a := range algsOf(c) {
		if a == SharedMemory || admissible(a) != nil {
			continue
		}
		if a == Linear && (c == CollAlltoall || c == CollAllgather) && nbytes/e.size > e.opts.inline() {
			// Blocks past the inline size travel as header and payload,
			// and the payload's receive waits for its header: the waits of
			// a batch would run one after another.
			continue
		}
		var cost float64
		if a == Hierarchical {
			local, hosts := e.hostShape()
			if hosts < 2 || local < 2 {
				continue
			}
			if c == CollBcast {
				cost = e.model.hierBcastCost(local, hosts, float64(nbytes))
			} else {
				cost = e.model.hierCost(local, hosts, float64(nbytes))
			}
		} else {
			cost = e.model.Cost(c, a, e.size, nbytes)
		}
		if cost < bestCost {
			best, bestCost = a, cost
		}
	}
	if best == Auto {
		return 0, fmt.Errorf("%w: no admissible algorithm for %v", ErrUnsupported, c)
	}
	return best, nil
}

// shmAutoBytes is the largest vector for which Auto picks the
// shared-memory algorithms when the group has a SharedRegion.
const shmAutoBytes = 64 << 10

// shmPays says whether Auto should run c on nbytes with the shared-memory
// algorithms (measured on a 2-vCPU VM; docs/collectives.md): always up to
// shmAutoBytes, where they replace every message by a flag; allreduce at
// every size (for large vectors blocks are folded in place and gathered,
// two synchronisations per round, far fewer than a ring's 2(p−1) steps
// when ranks share cores; the slots are written with non-temporal stores,
// which halved the time from 128 KiB up); bcast within shmReadMax when
// readers can copy the root's buffer themselves, and for two ranks at
// every size (the root copies one piece in while the reader copies the
// previous one out). A bcast of more ranks above that keeps p2p's trees,
// whose senders work in parallel.
func (e *Engine) shmPays(c Collective, nbytes int) bool {
	switch {
	case nbytes <= shmAutoBytes:
		return true
	case c == CollBcast && e.shm.pr != nil && nbytes <= shmReadMax:
		return true // the single-copy form (bcastShmRead)
	case c == CollAllreduce:
		return true
	case c == CollBcast:
		return e.size == 2
	}
	return false
}

// Between shmReadMin and shmReadMax bytes, a shared-memory bcast of more
// than two ranks has the readers copy the root's own buffer (bcastShmRead,
// when the region can), which beats the slots and p2p's tree there; above,
// pinning the root's pages for each read costs more than the slots'
// pipeline. Two ranks use the slots or split the copy (shmSplitMin).
const (
	shmReadMin = 32 << 10
	shmReadMax = 128 << 10
)

// A two-rank shared-memory bcast either splits the copy between the two
// ranks' process_vm_readv and _writev (bcastShmSplit) or pipelines it
// through the slots (bcastShm); bcastSplits says which. Each of those
// system calls costs a few µs before it copies anything, so the slots win
// up to shmSplitMin; above, the split's kernel copies win, except from 1
// to 4 MiB, where the slots' non-temporal stores leave the reader lines it
// fetches fast, and from shmSplitMax up, where the two tie and the slots
// stay.
const (
	shmSplitMin = 128 << 10
	shmSplitMax = 8 << 20
)

// bcastSplits reports whether a two-rank shared-memory bcast of n bytes
// splits the copy (see shmSplitMin).
func bcastSplits(n int) bool {
	return n > shmSplitMin && n <= shmSplitMax && (n <= 1<<20 || n > 4<<20)
}

// shmRSBytes is the size above which the shared-memory allreduce of more
// than two ranks reduces blocks and gathers them (allreduceShmRS) instead
// of having every rank read every chunk: up to there, reading all p chunks
// costs less than the block-folding's second synchronisation, which needs
// every rank to run once more (a round of context switches when ranks
// outnumber the cores). Two ranks, each reading only one other chunk
// anyway, save less by folding and switch at shmRSBytes2.
const (
	shmRSBytes  = 64 << 10
	shmRSBytes2 = 128 << 10
)

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
