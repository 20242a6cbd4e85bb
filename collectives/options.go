package collectives

import (
	"fmt"
	"strings"
	"time"
)

// Collective names a collective operation.
type Collective uint8

const (
	CollBarrier Collective = iota + 1
	CollBcast
	CollReduce
	CollAllreduce
	CollAllgather
	CollAllgatherv
	CollReduceScatter
	CollGather
	CollGatherv
	CollScatter
	CollScatterv
	CollAlltoall
	CollAlltoallv
	CollScan
	CollExscan
	numCollectives
)

var collNames = [...]string{"", "barrier", "bcast", "reduce", "allreduce", "allgather", "allgatherv", "reduce_scatter", "gather", "gatherv", "scatter", "scatterv", "alltoall", "alltoallv", "scan", "exscan"}

func (c Collective) String() string {
	if c > 0 && int(c) < len(collNames) {
		return collNames[c]
	}
	return fmt.Sprintf("Collective(%d)", uint8(c))
}

// Algorithm names one way to run a collective. Auto lets the cost model
// choose.
type Algorithm uint8

const (
	Auto Algorithm = iota
	Dissemination
	Binomial
	ScatterAllgather
	Chain
	RecursiveDoubling
	Ring
	Rabenseifner
	RingOneSided
	Ordered
	Hierarchical
	Bruck
	RecursiveHalving
	Pairwise
	Linear
	SharedMemory
	numAlgorithms
)

var algNames = [...]string{"auto", "dissemination", "binomial", "scatter_allgather", "chain", "recursive_doubling", "ring", "rabenseifner", "ring_onesided", "ordered", "hierarchical", "bruck", "recursive_halving", "pairwise", "linear", "shared_memory"}

func (a Algorithm) String() string {
	if int(a) < len(algNames) {
		return algNames[a]
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}

// algorithmsOf lists, per collective, the algorithms that implement it (Auto
// excluded). Ordered is the deterministic, rank-order-preserving one where a
// reduction is involved.
var algorithmsOf = [numCollectives][]Algorithm{
	CollBarrier:       {Dissemination, Hierarchical, SharedMemory},
	CollBcast:         {Binomial, ScatterAllgather, Chain, Hierarchical, SharedMemory},
	CollReduce:        {Binomial, Rabenseifner, Ordered, Hierarchical, SharedMemory},
	CollAllreduce:     {RecursiveDoubling, Ring, Rabenseifner, RingOneSided, Ordered, Hierarchical, SharedMemory},
	CollAllgather:     {Ring, RecursiveDoubling, Bruck, Linear, Hierarchical, SharedMemory},
	CollAllgatherv:    {Ring},
	CollReduceScatter: {RecursiveHalving, Pairwise, Ring, Hierarchical, SharedMemory},
	CollGather:        {Binomial, Linear},
	CollGatherv:       {Linear},
	CollScatter:       {Binomial, Linear},
	CollScatterv:      {Linear},
	CollAlltoall:      {Pairwise, Bruck, Linear, Hierarchical, SharedMemory},
	CollAlltoallv:     {Pairwise},
	CollScan:          {RecursiveDoubling},
	CollExscan:        {RecursiveDoubling},
}

// Algorithms returns the algorithms implemented for c.
func Algorithms(c Collective) []Algorithm { return append([]Algorithm(nil), algsOf(c)...) }

// algsOf is algorithmsOf[c], nil for a collective that does not exist.
func algsOf(c Collective) []Algorithm {
	if c >= numCollectives {
		return nil
	}
	return algorithmsOf[c]
}

// Collectives lists every collective.
func Collectives() []Collective {
	var cs []Collective
	for c := CollBarrier; c < numCollectives; c++ {
		cs = append(cs, c)
	}
	return cs
}

func implements(c Collective, a Algorithm) bool {
	for _, x := range algsOf(c) {
		if x == a {
			return true
		}
	}
	return false
}

// Options configure an Engine. The zero value is ready to use. Every rank of
// a group must use the same Options (Debug and Deterministic change what is
// sent).
type Options struct {
	// Algorithms forces an algorithm per collective; missing entries (and
	// Auto) let the cost model choose. comm fills it from its options and
	// from the environment through ParseAlgorithms.
	Algorithms map[Collective]Algorithm
	// Deterministic makes reductions independent of message size and
	// algorithm for a given rank count: every element is combined as the
	// left fold x0 ⊕ x1 ⊕ … ⊕ x(p−1), in rank order (the Ordered
	// algorithms), and forcing another reducing algorithm is an error.
	Deterministic bool
	// Debug cross-checks every call's fingerprint (sequence number,
	// collective, algorithm, op, element type, count, root) among all ranks
	// before any data moves, so every rank reports a disagreement by name.
	// It costs one all-to-all exchange of 64-byte messages per call.
	Debug bool
	// InlineBytes is the largest payload sent in the same message as its
	// header (copied through a staging buffer; every receive posts one of
	// this size). Zero means 8 KiB, and for a peer whose transport sends
	// larger messages in one eager copy (EagerLimiter), as much as fits
	// one with the header: over tcp, where every message is a system call
	// on both sides, a 16 KiB payload in its own message cost the 2-rank
	// bcast a second write and a second wake-up of the receiver, more
	// than the two copies of the payload it saves. Values above 1 MiB are
	// clamped; a value set here applies to every peer (and to the cost
	// model, which counts a larger block of the linear allgather and
	// alltoall as two messages: by the default's 8 KiB whatever the links).
	InlineBytes int
	// SegmentBytes is the pipelining unit of the chain broadcast and the
	// one-sided ring. Zero means 256 KiB.
	SegmentBytes int
	// Model overrides the cost model's constants and size thresholds
	// (see Model; ParseTuning sets them by name); nil or zero fields mean
	// the defaults, the link constants refined by the group's LinkInfo.
	Model *Model
	// StallProbe is how long a call may run before it sends its
	// fingerprint to every peer, so that ranks whose counts differ so much
	// that they chose different algorithms (and so wait for messages that
	// never come) still report the mismatch. Zero means 100 ms; negative
	// disables the probe.
	StallProbe time.Duration
	// Serialized promises that the caller never runs two calls on the
	// Engine at once, and that its handing of calls from one goroutine to
	// another orders them (comm's collective queue does both). The Engine
	// then takes its lock on a call's path with plain stores instead of a
	// locked instruction, and cannot tell a caller that breaks the promise
	// (without it, a call that overlaps another fails with
	// ErrInvalidArgument). It need not be the same on every rank.
	Serialized bool
}

func (o *Options) stallProbe() time.Duration {
	if o.StallProbe == 0 {
		return 100 * time.Millisecond
	}
	return o.StallProbe
}

// ParseAlgorithms parses "allreduce=ring,bcast=chain" (the format of
// comm's RDMAGO_ALGORITHMS variable) into Options.Algorithms, checking that
// each algorithm implements its collective.
func ParseAlgorithms(s string) (map[Collective]Algorithm, error) {
	m := map[Collective]Algorithm{}
	err := eachPair(s, "algorithm override", "collective=algorithm", func(cn, an string) error {
		c, err := ParseCollective(strings.TrimSpace(cn))
		if err != nil {
			return err
		}
		a, err := ParseAlgorithm(strings.TrimSpace(an))
		if err != nil {
			return err
		}
		if a != Auto && !implements(c, a) {
			return fmt.Errorf("%w: %v has no algorithm %v (have %v)", ErrInvalidArgument, c, a, algsOf(c))
		}
		m[c] = a
		return nil
	})
	if err != nil {
		return nil, err
	}
	return m, nil
}

// eachPair calls fn with the two sides of every "key=value" item of the
// comma-separated list s, empty items skipped; an item without "=" is an
// ErrInvalidArgument naming what (and the form it should have).
func eachPair(s, what, form string, fn func(k, v string) error) error {
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("%w: %s %q is not %s", ErrInvalidArgument, what, item, form)
		}
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// ParseCollective maps a name ("allreduce") to its Collective.
func ParseCollective(s string) (Collective, error) {
	for c := CollBarrier; c < numCollectives; c++ {
		if c.String() == strings.ToLower(s) {
			return c, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown collective %q", ErrInvalidArgument, s)
}

// ParseAlgorithm maps a name ("ring") to its Algorithm.
func ParseAlgorithm(s string) (Algorithm, error) {
	for a := Auto; a < numAlgorithms; a++ {
		if a.String() == strings.ToLower(s) {
			return a, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown algorithm %q", ErrInvalidArgument, s)
}

func (o *Options) inline() int {
	if o.InlineBytes > 0 {
		return min(o.InlineBytes, 1<<20)
	}
	return 8 << 10
}

// inlineLimits returns the largest payload sent in its header's message to
// each rank of g (see InlineBytes), or nil when that is o.inline() for
// every rank. Both ranks of a pair compute the same figure (EagerLimiter
// says so), since the sender splits exactly the payloads the receiver
// expects as a second message.
func inlineLimits(g Group, o *Options) []int {
	el, ok := g.(EagerLimiter)
	if !ok || o.InlineBytes > 0 {
		return nil
	}
	def := o.inline()
	var lim []int
	for p := 0; p < g.Size(); p++ {
		// Less the whole header a receive stages (hdrLen), not only a data
		// message's: the stage is then the eager limit itself. p2p's
		// default limit is the provider's size and 64 bytes of room for
		// this header, so a payload of that size (a power of two, 64 KiB
		// over tcp) travels in one message rather than two.
		n := min(el.EagerLimit(p)-hdrLen, 1<<20)
		if p == g.Rank() || n <= def {
			continue
		}
		if lim == nil {
			lim = make([]int, g.Size())
			for i := range lim {
				lim[i] = def
			}
		}
		lim[p] = n
	}
	return lim
}

// inlineTo is the largest payload sent in its header's message to group
// rank peer.
func (e *Engine) inlineTo(peer int) int {
	if e.inl == nil {
		return e.opts.inline()
	}
	return e.inl[peer]
}

func (o *Options) segment() int {
	if o.SegmentBytes > 0 {
		return o.SegmentBytes
	}
	return 256 << 10
}
