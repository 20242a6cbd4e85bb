package collectives_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

func engineFor(t *testing.T, n int, wo coltest.Options, eo collectives.Options) *collectives.Engine {
	t.Helper()
	w := coltest.NewWorld(n, wo)
	e, err := collectives.New(w.Group(0), eo)
	require.NoError(t, err)
	t.Cleanup(func() { e.Close() })
	return e
}

func TestCostModelSelection(t *testing.T) {
	t.Parallel()
	e := engineFor(t, 8, coltest.Options{}, collectives.Options{})
	choose := func(c collectives.Collective, n int, comm bool) collectives.Algorithm {
		a, err := e.Choose(c, n, comm)
		require.NoError(t, err)
		return a
	}
	// Latency-bound sizes take the log-depth algorithms, bandwidth-bound
	// ones the algorithms that move about 2n bytes.
	require.Equal(t, collectives.RecursiveDoubling, choose(collectives.CollAllreduce, 8, true))
	require.Contains(t, []collectives.Algorithm{collectives.Ring, collectives.Rabenseifner}, choose(collectives.CollAllreduce, 64<<20, true))
	require.Equal(t, collectives.Binomial, choose(collectives.CollBcast, 8, true))
	require.Contains(t, []collectives.Algorithm{collectives.ScatterAllgather, collectives.Chain}, choose(collectives.CollBcast, 64<<20, true))
	require.Equal(t, collectives.Dissemination, choose(collectives.CollBarrier, 0, true))
	require.Equal(t, collectives.Binomial, choose(collectives.CollReduce, 8, true))
	require.NotEqual(t, collectives.Binomial, choose(collectives.CollReduce, 64<<20, true))
	require.NotEqual(t, collectives.Ring, choose(collectives.CollAllgather, 64, true))
	// Non-commutative ops only get order-keeping algorithms.
	require.Equal(t, collectives.RecursiveDoubling, choose(collectives.CollAllreduce, 8, false))
	require.Equal(t, collectives.Ordered, choose(collectives.CollAllreduce, 64<<20, false))
	require.Equal(t, collectives.Ordered, choose(collectives.CollReduce, 64<<20, false))
	require.Equal(t, collectives.Pairwise, choose(collectives.CollReduceScatter, 64<<20, false))
	// Capabilities: no one-sided windows, no topology.
	_, err := e.Choose(collectives.CollAllreduce, 0, true)
	require.NoError(t, err)
	forced := engineFor(t, 4, coltest.Options{}, force(collectives.CollAllreduce, collectives.RingOneSided))
	_, err = forced.Choose(collectives.CollAllreduce, 1<<20, true)
	require.ErrorIs(t, err, collectives.ErrUnsupported)
	forced = engineFor(t, 4, coltest.Options{}, force(collectives.CollAllreduce, collectives.Hierarchical))
	_, err = forced.Choose(collectives.CollAllreduce, 1<<20, true)
	require.ErrorIs(t, err, collectives.ErrUnsupported)
}

// TestCostModelLinks: the model follows the group's link estimates. Slow
// links between hosts make the hierarchical allreduce win for large
// messages; cheap one-sided writes make the one-sided ring win.
func TestCostModelLinks(t *testing.T) {
	t.Parallel()
	hosts := []int{0, 0, 0, 0, 1, 1, 1, 1}
	wo := coltest.Options{Hosts: hosts, Latency: time.Microsecond, Bandwidth: 20e9, InterLatency: 20 * time.Microsecond, InterBandwidth: 1e9}
	e := engineFor(t, 8, wo, collectives.Options{})
	a, err := e.Choose(collectives.CollAllreduce, 64<<20, true)
	require.NoError(t, err)
	require.Equal(t, collectives.Hierarchical, a)
	a, err = e.Choose(collectives.CollBcast, 64<<20, true)
	require.NoError(t, err)
	require.Equal(t, collectives.Hierarchical, a)
	// The barrier too: only the hosts' leaders cross the slow links, at 2
	// hosts of 2 ranks as at 2 of 4.
	a, err = e.Choose(collectives.CollBarrier, 0, true)
	require.NoError(t, err)
	require.Equal(t, collectives.Hierarchical, a)
	wo2x2 := wo
	wo2x2.Hosts = []int{0, 0, 1, 1}
	e2x2 := engineFor(t, 4, wo2x2, collectives.Options{})
	a, err = e2x2.Choose(collectives.CollBarrier, 0, true)
	require.NoError(t, err)
	require.Equal(t, collectives.Hierarchical, a)
	// A small allgather sends one message per pair of hosts, not one per
	// pair of ranks on different hosts.
	for _, e := range []*collectives.Engine{e, e2x2} {
		a, err = e.Choose(collectives.CollAllgather, 64, true)
		require.NoError(t, err)
		require.Equal(t, collectives.Hierarchical, a)
		a, err = e.Choose(collectives.CollAlltoall, 64, true)
		require.NoError(t, err)
		require.Equal(t, collectives.Hierarchical, a)
		a, err = e.Choose(collectives.CollReduceScatter, 64, true)
		require.NoError(t, err)
		require.Equal(t, collectives.Hierarchical, a)
		// Not for a non-commutative op: the hosts regroup the ranks.
		a, err = e.Choose(collectives.CollReduceScatter, 64, false)
		require.NoError(t, err)
		require.Equal(t, collectives.Pairwise, a)
		// A reduce crosses the slow links once per host at every size.
		for _, n := range []int{64, 256 << 10, 16 << 20} {
			a, err = e.Choose(collectives.CollReduce, n, true)
			require.NoError(t, err)
			require.Equal(t, collectives.Hierarchical, a, "reduce of %d bytes", n)
		}
		a, err = e.Choose(collectives.CollReduce, 16<<20, false)
		require.NoError(t, err)
		require.Equal(t, collectives.Ordered, a)
	}
	// Same links everywhere: flat algorithms.
	wo.InterLatency, wo.InterBandwidth = 0, 0
	e = engineFor(t, 8, wo, collectives.Options{})
	a, err = e.Choose(collectives.CollAllreduce, 64<<20, true)
	require.NoError(t, err)
	require.NotEqual(t, collectives.Hierarchical, a)
	a, err = e.Choose(collectives.CollBarrier, 0, true)
	require.NoError(t, err)
	require.Equal(t, collectives.Dissemination, a)
	a, err = e.Choose(collectives.CollAllgather, 64, true)
	require.NoError(t, err)
	require.NotEqual(t, collectives.Hierarchical, a)
	a, err = e.Choose(collectives.CollAlltoall, 64, true)
	require.NoError(t, err)
	require.NotEqual(t, collectives.Hierarchical, a)
	a, err = e.Choose(collectives.CollReduceScatter, 64, true)
	require.NoError(t, err)
	require.NotEqual(t, collectives.Hierarchical, a)
	a, err = e.Choose(collectives.CollReduce, 256<<10, true)
	require.NoError(t, err)
	require.NotEqual(t, collectives.Hierarchical, a)

	os := engineFor(t, 4, coltest.Options{OneSided: true}, collectives.Options{Model: &collectives.Model{OneSidedAlpha: 100 * time.Nanosecond}})
	a, err = os.Choose(collectives.CollAllreduce, 16<<20, true)
	require.NoError(t, err)
	require.Equal(t, collectives.RingOneSided, a)

	var m collectives.Model
	m.Alpha, m.Beta, m.Gamma = time.Microsecond, 1e-9, 1e-9
	require.Less(t, m.Cost(collectives.CollAllreduce, collectives.RecursiveDoubling, 8, 8), m.Cost(collectives.CollAllreduce, collectives.Ring, 8, 8))
	require.Less(t, m.Cost(collectives.CollAllreduce, collectives.Ring, 8, 64<<20), m.Cost(collectives.CollAllreduce, collectives.RecursiveDoubling, 8, 64<<20))
}

func TestParseAlgorithms(t *testing.T) {
	t.Parallel()
	m, err := collectives.ParseAlgorithms("allreduce=ring, bcast=chain,barrier=auto")
	require.NoError(t, err)
	require.Equal(t, map[collectives.Collective]collectives.Algorithm{
		collectives.CollAllreduce: collectives.Ring, collectives.CollBcast: collectives.Chain, collectives.CollBarrier: collectives.Auto,
	}, m)
	_, err = collectives.ParseAlgorithms("bcast=ring")
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	require.ErrorContains(t, err, "bcast has no algorithm ring")
	_, err = collectives.ParseAlgorithms("allreduce")
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	_, err = collectives.ParseAlgorithms("allreduse=ring")
	require.ErrorContains(t, err, `unknown collective "allreduse"`)
	_, err = collectives.New(coltest.NewWorld(2, coltest.Options{}).Group(0), force(collectives.CollBcast, collectives.Bruck))
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	for _, c := range collectives.Collectives() {
		got, err := collectives.ParseCollective(c.String())
		require.NoError(t, err)
		require.Equal(t, c, got)
		for _, a := range collectives.Algorithms(c) {
			got, err := collectives.ParseAlgorithm(a.String())
			require.NoError(t, err)
			require.Equal(t, a, got)
		}
	}
}

// TestUnknownCollectiveOption: Options.Algorithms naming a collective that
// does not exist is refused with an algorithm, ignored with Auto, and
// never panics; Algorithms of it is empty.
func TestUnknownCollectiveOption(t *testing.T) {
	t.Parallel()
	bogus := collectives.Collective(200)
	w := coltest.NewWorld(1, coltest.Options{})
	_, err := collectives.New(w.Group(0), collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{bogus: collectives.Ring}})
	require.ErrorIs(t, err, collectives.ErrInvalidArgument)
	e, err := collectives.New(w.Group(0), collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{bogus: collectives.Auto, collectives.CollAllreduce: collectives.Ring}})
	require.NoError(t, err)
	alg, err := e.Choose(collectives.CollAllreduce, 8, true)
	require.NoError(t, err)
	require.Equal(t, collectives.Ring, alg, "a forced algorithm still applies")
	require.NoError(t, e.Close())
	require.Empty(t, collectives.Algorithms(bogus))
}

// TestCostModelPostsAllAtOnce: with few ranks and small blocks, Auto picks
// the forms that post every message of a call at once (alltoall and
// allgather Linear, reduce_scatter Pairwise): their messages overlap, so
// the call pays one latency and a small injection cost per further
// message, not one latency per dependent step (which, with ranks
// outnumbering cores, is a context switch each). Large blocks and many
// ranks keep the stepwise and log-depth forms.
func TestCostModelPostsAllAtOnce(t *testing.T) {
	t.Parallel()
	choose := func(e *collectives.Engine, c collectives.Collective, n int) collectives.Algorithm {
		a, err := e.Choose(c, n, true)
		require.NoError(t, err)
		return a
	}
	e4 := engineFor(t, 4, coltest.Options{}, collectives.Options{})
	for _, n := range []int{4 * 4, 4 * 4096} { // whole vectors of 4 blocks
		assert.Equal(t, collectives.Linear, choose(e4, collectives.CollAlltoall, n), "alltoall %d B", n)
		assert.Equal(t, collectives.Linear, choose(e4, collectives.CollAllgather, n), "allgather %d B", n)
		assert.Equal(t, collectives.Pairwise, choose(e4, collectives.CollReduceScatter, n), "reduce_scatter %d B", n)
	}
	// Blocks above the inline size go as two messages each, posted
	// together: the second adds an injection per peer, no more.
	a := e4.Model().Alpha.Seconds()
	big := engineFor(t, 4, coltest.Options{}, collectives.Options{InlineBytes: 1 << 20})
	for _, c := range []collectives.Collective{collectives.CollAlltoall, collectives.CollAllgather} {
		n := 4 * 64 << 10
		assert.InDelta(t, big.Cost(c, collectives.Linear, n)+3*0.25*a, e4.Cost(c, collectives.Linear, n), 1e-12, "%v, 64 KiB blocks", c)
		assert.InDelta(t, big.Cost(c, collectives.Linear, 4*4096), e4.Cost(c, collectives.Linear, 4*4096), 1e-12, "%v, 4 KiB blocks", c)
	}
	assert.NotEqual(t, collectives.Pairwise, choose(e4, collectives.CollReduceScatter, 64<<20))
	// Many ranks: log-depth forms for tiny blocks.
	e64 := engineFor(t, 64, coltest.Options{}, collectives.Options{})
	assert.Equal(t, collectives.Bruck, choose(e64, collectives.CollAlltoall, 64*4))
	assert.NotEqual(t, collectives.Linear, choose(e64, collectives.CollAllgather, 64*4))
}

// TestChooseRemembersBySizeAndOp: Auto's remembered choice is per
// collective, size and commutativity: interleaved queries on one Engine
// get what a fresh Engine answers to each.
func TestChooseRemembersBySizeAndOp(t *testing.T) {
	t.Parallel()
	e := engineFor(t, 8, coltest.Options{}, collectives.Options{})
	for round := 0; round < 2; round++ {
		for _, comm := range []bool{true, false, true} {
			for _, n := range []int{64 << 20, 8, 4096, 8, 64 << 20} {
				for _, c := range []collectives.Collective{collectives.CollAllreduce, collectives.CollReduce, collectives.CollAllgather} {
					got, err := e.Choose(c, n, comm)
					require.NoError(t, err)
					want, err := engineFor(t, 8, coltest.Options{}, collectives.Options{}).Choose(c, n, comm)
					require.NoError(t, err)
					require.Equal(t, want, got, "%v %d bytes commutative=%v", c, n, comm)
				}
			}
		}
	}
}

// TestCostModelAlltoallSharedLink: the ranks of a host share its network
// link, and in a flat alltoall they all send their blocks for the other
// hosts at once, so the host's link carries local times a rank's remote
// bytes, as many as the hierarchical form's bundles. With shm inside the
// hosts and tcp between them (the transports' figures) and 2 hosts of 2
// ranks sharing a CPU (as bench/cross-host.sh runs them), the hierarchical
// alltoall keeps blocks up to 16 KiB, and the linear one, which copies
// nothing through a leader, takes them from 32 KiB, where it ran in
// 0.61-0.74 of the hierarchical one's time. With one rank per host nothing
// is shared, and the flat forms keep their one-link cost.
func TestCostModelAlltoallSharedLink(t *testing.T) {
	t.Parallel()
	wo := coltest.Options{Hosts: []int{0, 0, 1, 1}, Latency: 150 * time.Nanosecond, Bandwidth: 20e9,
		InterLatency: 20 * time.Microsecond, InterBandwidth: 1e9, Crowding: 2}
	e := engineFor(t, 4, wo, collectives.Options{})
	for _, c := range []struct {
		n    int
		want collectives.Algorithm
	}{
		{8, collectives.Hierarchical}, {4 * 8 << 10, collectives.Hierarchical}, {4 * 16 << 10, collectives.Hierarchical},
		{4 * 32 << 10, collectives.Linear}, {4 * 1 << 20, collectives.Linear},
	} {
		a, err := e.Choose(collectives.CollAlltoall, c.n, true)
		require.NoError(t, err)
		require.Equal(t, c.want, a, "alltoall of %d bytes a rank", c.n)
	}
	wo.Crowding = 0
	e = engineFor(t, 4, wo, collectives.Options{})
	// The flat forms' cost grows by local·(p−local)/(p−1) = 4/3 here.
	flat := collectives.DefaultModel()
	flat.Alpha, flat.Beta = 20*time.Microsecond, 1/1e9
	n := 1 << 20
	want := flat.Cost(collectives.CollAlltoall, collectives.Pairwise, 4, n)
	got := e.Cost(collectives.CollAlltoall, collectives.Pairwise, n)
	require.InDelta(t, 3*20e-6+float64(n)/1e9, got, 1e-9)
	require.Greater(t, got, want)

	wo.Hosts = []int{0, 1, 2, 3}
	one := engineFor(t, 4, wo, collectives.Options{})
	require.InDelta(t, want, one.Cost(collectives.CollAlltoall, collectives.Pairwise, n), 1e-12)
}

// TestCostModelHierSplitMessagesOverlap: the payload of a message past
// InlineBytes has its receive posted with its header's, so the leaders'
// bundles of a hierarchical alltoall overlap like small messages (two
// messages each) rather than wait one after another: 4 hosts of 2 ranks
// sharing a CPU (as bench/cross-host.sh runs them) keep the hierarchical
// alltoall at 32 KiB a rank (4 KiB blocks), where it ran 3x faster than
// the linear form the model used to pick there, and up to 128 KiB a rank.
func TestCostModelHierSplitMessagesOverlap(t *testing.T) {
	t.Parallel()
	wo := coltest.Options{Hosts: []int{0, 0, 1, 1, 2, 2, 3, 3}, Latency: 150 * time.Nanosecond, Bandwidth: 20e9,
		InterLatency: 20 * time.Microsecond, InterBandwidth: 1e9, Crowding: 2}
	e := engineFor(t, 8, wo, collectives.Options{})
	for _, n := range []int{8, 32 << 10, 128 << 10} {
		a, err := e.Choose(collectives.CollAlltoall, n, true)
		require.NoError(t, err)
		require.Equal(t, collectives.Hierarchical, a, "alltoall of %d bytes a rank", n)
	}
}

// TestCostModelCrowding: where a host's ranks outnumber its CPUs (the
// group's Crowding, or Model.Crowd), they take turns, and the flat forms,
// in which every rank of a host sends at once, pay their latencies that
// many times over, while the hierarchical forms cross the network with
// one rank a host. At 4 hosts of 2 ranks sharing a CPU the hierarchical
// alltoall then keeps 64 KiB a rank (8 KiB blocks), where it ran 2.7x
// faster than the linear form the model picked without crowding. An
// explicit Model.Crowd wins over the group's figure; a group within one
// host is not affected.
func TestCostModelCrowding(t *testing.T) {
	t.Parallel()
	hosts := []int{0, 0, 1, 1, 2, 2, 3, 3}
	wo := func(hosts []int, crowding float64) coltest.Options {
		return coltest.Options{Hosts: hosts, Latency: 150 * time.Nanosecond, Bandwidth: 20e9,
			InterLatency: 20 * time.Microsecond, InterBandwidth: 1e9, Crowding: crowding}
	}
	for _, c := range []struct {
		name     string
		crowding float64
		model    *collectives.Model
		want     collectives.Algorithm
	}{
		{"not crowded", 0, nil, collectives.Linear},
		{"a CPU a rank", 1, nil, collectives.Linear},
		{"two ranks a CPU", 2, nil, collectives.Hierarchical},
		{"two ranks a CPU, Crowd set to 1", 2, &collectives.Model{Crowd: 1}, collectives.Linear},
		{"Crowd set without Crowding", 0, &collectives.Model{Crowd: 2}, collectives.Hierarchical},
	} {
		e := engineFor(t, 8, wo(hosts, c.crowding), collectives.Options{Model: c.model})
		a, err := e.Choose(collectives.CollAlltoall, 64<<10, true)
		require.NoError(t, err)
		assert.Equal(t, c.want, a, c.name)
	}
	// The flat forms' latencies count twice at two ranks a CPU; the
	// leaders' exchange does not grow (its steps inside a host do).
	plain := engineFor(t, 8, wo(hosts, 1), collectives.Options{})
	crowded := engineFor(t, 8, wo(hosts, 2), collectives.Options{})
	n := 1 << 20
	require.InDelta(t, plain.Cost(collectives.CollAlltoall, collectives.Pairwise, n)+7*20e-6,
		crowded.Cost(collectives.CollAlltoall, collectives.Pairwise, n), 1e-12)
	require.InDelta(t, plain.Cost(collectives.CollAllgather, collectives.Ring, n)+7*20e-6,
		crowded.Cost(collectives.CollAllgather, collectives.Ring, n), 1e-12)
	hp, hc := plain.Cost(collectives.CollAlltoall, collectives.Hierarchical, n), crowded.Cost(collectives.CollAlltoall, collectives.Hierarchical, n)
	require.Greater(t, hc, hp)
	require.Less(t, hc-hp, 1e-6)
	// One host: the same costs, crowded or not.
	one := []int{0, 0, 0, 0}
	require.Equal(t, engineFor(t, 4, wo(one, 1), collectives.Options{}).Cost(collectives.CollAllgather, collectives.Ring, n),
		engineFor(t, 4, wo(one, 2), collectives.Options{}).Cost(collectives.CollAllgather, collectives.Ring, n))
}

// TestCostModelPairExchange: two ranks over messages allreduce up to
// PairExchangeBytes (2 MiB) by recursive doubling, one exchange, where
// the α-only model took the ring from about 160 KiB over tcp's links;
// above it, and with the threshold off, the ring or Rabenseifner; groups
// of more ranks are not affected. The hierarchical allreduce picks its
// leaders' algorithm by Model.Cost, so two hosts' leaders follow too.
func TestCostModelPairExchange(t *testing.T) {
	t.Parallel()
	tcp := coltest.Options{Latency: 20 * time.Microsecond, Bandwidth: 1e9}
	bulk := []collectives.Algorithm{collectives.Ring, collectives.Rabenseifner}
	choose := func(e *collectives.Engine, n int) collectives.Algorithm {
		a, err := e.Choose(collectives.CollAllreduce, n, true)
		require.NoError(t, err)
		return a
	}
	e := engineFor(t, 2, tcp, collectives.Options{})
	for _, n := range []int{8, 256 << 10, 512 << 10, 1 << 20, 2 << 20} {
		require.Equal(t, collectives.RecursiveDoubling, choose(e, n), "%d bytes", n)
	}
	require.Contains(t, bulk, choose(e, 2<<20+1))
	require.Contains(t, bulk, choose(e, 64<<20))

	off := engineFor(t, 2, tcp, collectives.Options{Model: &collectives.Model{PairExchangeBytes: -1}})
	require.Contains(t, bulk, choose(off, 512<<10), "without the threshold the α-only model takes the ring")

	four := engineFor(t, 4, tcp, collectives.Options{})
	fourOff := engineFor(t, 4, tcp, collectives.Options{Model: &collectives.Model{PairExchangeBytes: -1}})
	for _, n := range []int{64 << 10, 512 << 10, 1 << 20} {
		require.Equal(t, choose(fourOff, n), choose(four, n), "4 ranks, %d bytes", n)
	}

	m := e.Model()
	for _, a := range bulk {
		require.Less(t, m.Cost(collectives.CollAllreduce, collectives.RecursiveDoubling, 2, 512<<10), m.Cost(collectives.CollAllreduce, a, 2, 512<<10), "%v", a)
	}
	m.PairExchangeBytes = -1
	require.Less(t, m.Cost(collectives.CollAllreduce, collectives.Ring, 2, 512<<10), m.Cost(collectives.CollAllreduce, collectives.RecursiveDoubling, 2, 512<<10))
}

// TestCostModelPairReduce: two ranks over messages reduce up to
// PairExchangeBytes with one message to the root (binomial), where the
// model took Rabenseifner's exchange of halves and gather from about 160
// KiB over tcp's links; above it, and with the threshold off,
// Rabenseifner; groups of more ranks are not affected.
func TestCostModelPairReduce(t *testing.T) {
	t.Parallel()
	tcp := coltest.Options{Latency: 20 * time.Microsecond, Bandwidth: 1e9}
	choose := func(e *collectives.Engine, n int) collectives.Algorithm {
		a, err := e.Choose(collectives.CollReduce, n, true)
		require.NoError(t, err)
		return a
	}
	e := engineFor(t, 2, tcp, collectives.Options{})
	for _, n := range []int{8, 256 << 10, 1 << 20, 2 << 20} {
		require.Equal(t, collectives.Binomial, choose(e, n), "%d bytes", n)
	}
	require.Equal(t, collectives.Rabenseifner, choose(e, 64<<20))
	off := engineFor(t, 2, tcp, collectives.Options{Model: &collectives.Model{PairExchangeBytes: -1}})
	require.Equal(t, collectives.Rabenseifner, choose(off, 1<<20), "without the threshold")

	four := engineFor(t, 4, tcp, collectives.Options{})
	fourOff := engineFor(t, 4, tcp, collectives.Options{Model: &collectives.Model{PairExchangeBytes: -1}})
	for _, n := range []int{64 << 10, 512 << 10, 1 << 20} {
		require.Equal(t, choose(fourOff, n), choose(four, n), "4 ranks, %d bytes", n)
	}
}

// TestHierBigFollowsCrowding: the hierarchical algorithms switch to their
// bandwidth forms (ring and scatter-allgather) above hier_big_bytes where
// every rank has a CPU, and above hier_big_crowded_bytes where a host's
// ranks outnumber its CPUs, whose every extra step waits for the
// scheduler; the model's cost of the hierarchical allreduce follows the
// same edge.
func TestHierBigFollowsCrowding(t *testing.T) {
	t.Parallel()
	const small, large = 100 << 10, 3 << 20
	eng := func(crowding float64, tune string) *collectives.Engine {
		wo := coltest.Options{Hosts: []int{0, 0, 0, 1, 1, 1}, Latency: 150 * time.Nanosecond, Bandwidth: 20e9,
			InterLatency: 20 * time.Microsecond, InterBandwidth: 1e9, Crowding: crowding}
		var o collectives.Options
		require.NoError(t, collectives.ParseTuning(tune, &o))
		return engineFor(t, 6, wo, o)
	}
	both := "hier_big_bytes=100K,hier_big_crowded_bytes=3M"
	for _, c := range []struct {
		crowding float64
		edge     int
	}{{0, small}, {1, small}, {2, large}} {
		e := eng(c.crowding, both)
		require.False(t, collectives.HierBig(e, c.edge), "crowding %v", c.crowding)
		require.True(t, collectives.HierBig(e, c.edge+1), "crowding %v", c.crowding)
	}
	// Defaults: 64 KiB with a CPU per rank, 2 MiB crowded.
	require.True(t, collectives.HierBig(eng(0, ""), 64<<10+1))
	require.False(t, collectives.HierBig(eng(2, ""), 2<<20))
	require.True(t, collectives.HierBig(eng(2, ""), 2<<20+1))

	cost := func(crowding float64, tune string) float64 {
		return eng(crowding, tune).Cost(collectives.CollAllreduce, collectives.Hierarchical, small+1)
	}
	// Crowded, hier_big_bytes moves nothing and hier_big_crowded_bytes does.
	require.Equal(t, cost(2, both), cost(2, "hier_big_bytes=1G,hier_big_crowded_bytes=3M"))
	require.NotEqual(t, cost(2, both), cost(2, "hier_big_bytes=100K,hier_big_crowded_bytes=100K"))
	// With a CPU per rank, the other way round.
	require.Equal(t, cost(0, both), cost(0, "hier_big_bytes=100K,hier_big_crowded_bytes=1K"))
	require.NotEqual(t, cost(0, both), cost(0, "hier_big_bytes=3M,hier_big_crowded_bytes=3M"))
}
