package collectives_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

// propWorld is one random group shape and Engine configuration.
type propWorld struct {
	p  int
	wo coltest.Options
	eo collectives.Options
}

func (w propWorld) String() string {
	m := "defaults"
	if w.eo.Model != nil {
		m = fmt.Sprintf("%+v", *w.eo.Model)
	}
	return fmt.Sprintf("p=%d hosts=%v onesided=%v shared=%v lat=%v/%v bw=%g/%g crowding=%g det=%v inline=%d seg=%d model=%s",
		w.p, w.wo.Hosts, w.wo.OneSided, w.wo.Shared, w.wo.Latency, w.wo.InterLatency, w.wo.Bandwidth, w.wo.InterBandwidth,
		w.wo.Crowding, w.eo.Deterministic, w.eo.InlineBytes, w.eo.SegmentBytes, m)
}

// logUniform is a random value between lo and hi, uniform in its logarithm.
func logUniform(r *rand.Rand, lo, hi float64) float64 {
	return math.Exp(math.Log(lo) + r.Float64()*(math.Log(hi)-math.Log(lo)))
}

// randSize is a random size threshold: mostly 1 KiB to 64 MiB, sometimes
// none (negative) or every size.
func randSize(r *rand.Rand) int {
	switch x := r.IntN(20); {
	case x == 0:
		return -1
	case x == 1:
		return math.MaxInt
	}
	return int(logUniform(r, 1<<10, 64<<20))
}

// randModel sets each of the model's parameters with probability one half.
func randModel(r *rand.Rand) *collectives.Model {
	var m collectives.Model
	dur := func(v *time.Duration) {
		if r.IntN(2) == 0 {
			*v = time.Duration(logUniform(r, 100, 100e3)) // 100 ns to 100 µs
		}
	}
	perByte := func(v *float64) {
		if r.IntN(2) == 0 {
			*v = logUniform(r, 1e-11, 1e-8) // 100 GB/s to 100 MB/s
		}
	}
	size := func(v *int) {
		if r.IntN(2) == 0 {
			*v = randSize(r)
		}
	}
	dur(&m.Alpha)
	perByte(&m.Beta)
	perByte(&m.Gamma)
	dur(&m.IntraAlpha)
	perByte(&m.IntraBeta)
	dur(&m.OneSidedAlpha)
	if r.IntN(2) == 0 {
		m.PostOverlap = logUniform(r, 0.01, 2)
	}
	for _, v := range []*int{&m.ShmSmallBytes, &m.ShmAllreduceMax, &m.ShmBcast2Max, &m.ShmReadMin, &m.ShmReadMax,
		&m.ShmReduceMax, &m.ShmReduceFoldBytes, &m.ShmAllgatherMax, &m.ShmReduceScatterMax, &m.ShmAlltoallMax, &m.ShmAllgather2Max, &m.ShmAlltoall2Max, &m.ShmAlltoallBlockMax, &m.ShmReadBlockMin, &m.ShmBcastMax,
		&m.ShmSplitMin, &m.ShmSplitMax, &m.ShmSplitGapMin, &m.ShmSplitGapMax, &m.ShmFoldBytes, &m.ShmFoldBytes2,
		&m.ShmPipeBytes, &m.ShmPieceMin, &m.HierBigBytes, &m.HierBigCrowdedBytes} {
		size(v)
	}
	return &m
}

// randWorld draws a group: a rank count, capabilities (shared memory
// excludes the others in coltest), link estimates, hosts, options and
// model parameters.
func randWorld(r *rand.Rand) propWorld {
	w := propWorld{p: 1 + r.IntN(4)}
	switch r.IntN(8) {
	case 0:
		w.p = 64
	case 1, 2, 3:
		w.p = 1 + r.IntN(24)
	}
	if w.p > 1 && r.IntN(4) == 0 {
		w.wo.Shared = true
	} else {
		w.wo.OneSided = r.IntN(3) == 0
		if r.IntN(2) == 0 {
			w.wo.Latency = time.Duration(logUniform(r, 200, 50e3))
			w.wo.Bandwidth = logUniform(r, 1e8, 1e11)
			w.wo.InterLatency = time.Duration(logUniform(r, 200, 50e3))
			w.wo.InterBandwidth = logUniform(r, 1e8, 1e11)
		}
		if r.IntN(2) == 0 {
			hosts := 1 + r.IntN(w.p)
			w.wo.Hosts = make([]int, w.p)
			for i := range w.wo.Hosts {
				w.wo.Hosts[i] = r.IntN(hosts)
			}
		}
	}
	w.eo.Deterministic = r.IntN(5) == 0
	if r.IntN(3) == 0 {
		w.eo.InlineBytes = int(logUniform(r, 64, 1<<20))
	}
	if r.IntN(3) == 0 {
		w.eo.SegmentBytes = int(logUniform(r, 4<<10, 4<<20))
	}
	if r.IntN(4) != 0 {
		w.eo.Model = randModel(r)
	}
	if w.wo.Hosts != nil && w.wo.Latency > 0 && r.IntN(2) == 0 {
		w.wo.Crowding = logUniform(r, 1, 4)
	}
	return w
}

// admissible restates the capability and order rules of Options and the
// Group interfaces: which algorithms Auto may pick at all.
func (w propWorld) admissible(c collectives.Collective, a collectives.Algorithm, commutative bool) bool {
	switch a {
	case collectives.RingOneSided:
		if !w.wo.OneSided {
			return false
		}
	case collectives.Hierarchical:
		if w.wo.Hosts == nil {
			return false
		}
	case collectives.SharedMemory:
		if !w.wo.Shared {
			return false
		}
	}
	if commutative && !w.eo.Deterministic {
		return true
	}
	switch c {
	case collectives.CollAllreduce:
		return a == collectives.Ordered || a == collectives.SharedMemory || a == collectives.RecursiveDoubling && !w.eo.Deterministic
	case collectives.CollReduce:
		return a == collectives.Ordered || a == collectives.SharedMemory
	case collectives.CollReduceScatter:
		return a == collectives.Pairwise || a == collectives.SharedMemory
	}
	return true
}

// propSizes are the sizes a world is asked about: random ones, and each
// side of some of the model's size thresholds.
func propSizes(r *rand.Rand, e *collectives.Engine) []int {
	sizes := []int{0, 8}
	for range 4 {
		sizes = append(sizes, int(logUniform(r, 1, 256<<20)))
	}
	m := e.Model()
	th := []int{m.ShmSmallBytes, m.ShmAllreduceMax, m.ShmReduceMax, m.ShmAllgatherMax, m.ShmReduceScatterMax, m.ShmAlltoallMax, m.ShmAllgather2Max, m.ShmAlltoall2Max, m.ShmBcast2Max, m.ShmBcastMax, m.HierBigBytes, m.HierBigCrowdedBytes}
	for range 3 {
		sizes = appendAround(sizes, th[r.IntN(len(th))])
	}
	return sizes
}

// appendAround appends n and n+1 to sizes when n is a size a call can have.
func appendAround(sizes []int, n int) []int {
	if n >= 0 && n < 1<<40 {
		sizes = append(sizes, n, n+1)
	}
	return sizes
}

// checkCheapest asserts that every Auto choice of e for the sizes is
// admissible and no admissible algorithm costs less by e's model; it
// returns the choices, by collective, commutativity and size.
func checkCheapest(t *testing.T, w propWorld, e *collectives.Engine, sizes []int) map[string]collectives.Algorithm {
	t.Helper()
	got := map[string]collectives.Algorithm{}
	for _, c := range collectives.Collectives() {
		for _, commutative := range []bool{true, false} {
			for _, n := range sizes {
				a, err := e.Choose(c, n, commutative)
				require.NoError(t, err, "%v %d B commutative=%v in %v", c, n, commutative, w)
				require.True(t, w.admissible(c, a, commutative), "%v %d B commutative=%v: chose %v, not admissible in %v", c, n, commutative, a, w)
				ca := e.Cost(c, a, n)
				require.False(t, math.IsInf(ca, 1), "%v %d B: chose %v at +Inf in %v", c, n, a, w)
				for _, b := range collectives.Algorithms(c) {
					if w.admissible(c, b, commutative) {
						require.LessOrEqual(t, ca, e.Cost(c, b, n), "%v %d B commutative=%v: chose %v, %v is cheaper by the model in %v", c, n, commutative, a, b, w)
					}
				}
				got[fmt.Sprint(c, commutative, n)] = a
			}
		}
	}
	return got
}

// choices is e's Auto choice by collective, commutativity and size.
func choices(t *testing.T, e *collectives.Engine, sizes []int) map[string]collectives.Algorithm {
	got := map[string]collectives.Algorithm{}
	for _, c := range collectives.Collectives() {
		for _, commutative := range []bool{true, false} {
			for _, n := range sizes {
				a, err := e.Choose(c, n, commutative)
				require.NoError(t, err)
				got[fmt.Sprint(c, commutative, n)] = a
			}
		}
	}
	return got
}

// TestAutoIsCheapestByModel: over random rank counts, capabilities, links,
// hosts, options, model parameters and sizes, Auto's choice is an
// admissible algorithm that no admissible one undercuts by the Engine's
// model; the flat algorithms' model costs are Model.Cost's formulas; and
// setting any one tunable (by name, as RDMAGO_TUNE does) keeps that true
// of the new model, while every tunable that enters the cost moves some
// choice.
func TestAutoIsCheapestByModel(t *testing.T) {
	t.Parallel()
	// A fixed seed keeps the run reproducible; RDMAGO_TEST_SEED explores.
	seed := uint64(1)
	if v := os.Getenv("RDMAGO_TEST_SEED"); v != "" {
		var err error
		seed, err = strconv.ParseUint(v, 10, 64)
		require.NoError(t, err)
	}
	r := rand.New(rand.NewPCG(seed, 23))
	moved := map[string]int{}
	for i := 0; i < 15; i++ {
		w := randWorld(r)
		e, err := collectives.New(coltest.NewWorld(w.p, w.wo).Group(0), w.eo)
		require.NoError(t, err)
		sizes := propSizes(r, e)
		checkCheapest(t, w, e, sizes)
		m := e.Model()
		for _, c := range collectives.Collectives() {
			for _, a := range collectives.Algorithms(c) {
				// (A crowded group spanning hosts pays its flat forms'
				// latencies over again, and a flat alltoall's hosts share
				// their links, which Model.Cost cannot know.)
				alltoall := c == collectives.CollAlltoall || c == collectives.CollAlltoallv
				if a != collectives.SharedMemory && a != collectives.Hierarchical && a != collectives.Linear &&
					w.wo.Crowding == 0 && !(alltoall && w.wo.Hosts != nil) {
					for _, n := range sizes {
						require.Equal(t, m.Cost(c, a, w.p, n), e.Cost(c, a, n), "%v %v %d B", c, a, n)
					}
				}
			}
		}
		for _, tu := range collectives.Tunables() {
			v := randTunableValue(r, tu)
			// Ask each side of the new value too, where it is a size.
			tsizes := sizes
			if n, err := strconv.Atoi(v); err == nil {
				tsizes = appendAround(slices.Clone(sizes), n)
				if tu.Name == "inline_bytes" {
					tsizes = appendAround(tsizes, n*w.p)
				}
			}
			base := choices(t, e, tsizes)
			w2 := w
			w2.eo.Model = nil
			if w.eo.Model != nil {
				mm := *w.eo.Model
				w2.eo.Model = &mm
			}
			require.NoError(t, collectives.ParseTuning(tu.Name+"="+v, &w2.eo))
			e2, err := collectives.New(coltest.NewWorld(w2.p, w2.wo).Group(0), w2.eo)
			require.NoError(t, err)
			after := checkCheapest(t, w2, e2, tsizes)
			require.NoError(t, e2.Close())
			for k, a := range after {
				if base[k] != a {
					moved[tu.Name]++
				}
			}
		}
		require.NoError(t, e.Close())
	}
	// The parameters every flat algorithm's cost depends on moved some
	// choice (TestTuningMovesChoice moves the others on purpose).
	for _, name := range []string{"alpha", "beta", "gamma", "post_overlap", "inline_bytes", "segment_bytes"} {
		require.Positive(t, moved[name], "setting %s never moved Auto's choice (seed %d): %v", name, seed, moved)
	}
}

// randTunableValue is a value for tu in ParseTuning's syntax.
func randTunableValue(r *rand.Rand, tu collectives.Tunable) string {
	switch tu.Name {
	case "alpha", "intra_alpha", "onesided_alpha", "crowded_keep_cpu", "crowded_live_window":
		return time.Duration(logUniform(r, 50, 200e3)).String()
	case "beta", "gamma", "intra_beta", "copy_beta":
		return strconv.FormatFloat(logUniform(r, 1e-12, 1e-7), 'g', -1, 64)
	case "post_overlap":
		return strconv.FormatFloat(logUniform(r, 0.001, 10), 'g', -1, 64)
	case "crowd":
		return strconv.FormatFloat(logUniform(r, 0.5, 8), 'g', -1, 64)
	case "inline_bytes":
		return strconv.Itoa(int(logUniform(r, 1, 1<<20)))
	case "segment_bytes":
		return strconv.Itoa(int(logUniform(r, 1<<10, 64<<20)))
	}
	switch n := randSize(r); n {
	case math.MaxInt:
		return "max"
	default:
		return strconv.Itoa(n)
	}
}

// TestTuningMovesChoice sets each parameter that only some groups' costs
// depend on where it decides, by name as RDMAGO_TUNE does, and checks that
// Auto's choice moves as the model says.
func TestTuningMovesChoice(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(2, 23))
	engine := func(p int, wo coltest.Options, tune string) *collectives.Engine {
		var o collectives.Options
		require.NoError(t, collectives.ParseTuning(tune, &o))
		e, err := collectives.New(coltest.NewWorld(p, wo).Group(0), o)
		require.NoError(t, err)
		t.Cleanup(func() { e.Close() })
		return e
	}
	choose := func(e *collectives.Engine, c collectives.Collective, n int) collectives.Algorithm {
		a, err := e.Choose(c, n, true)
		require.NoError(t, err)
		return a
	}
	shared := coltest.Options{Shared: true}
	// The shared-memory bands end where their tunables say, at random sizes.
	for range 4 {
		small := int(logUniform(r, 1<<10, 32<<10))
		upper := int(logUniform(r, 64<<10, 16<<20))
		for _, c := range []struct {
			p    int
			coll collectives.Collective
			tune string
			edge int
		}{
			{3, collectives.CollReduce, fmt.Sprintf("shm_small_bytes=%d,shm_reduce_max=%d", small, upper), upper},
			{3, collectives.CollBcast, fmt.Sprintf("shm_small_bytes=%d,shm_bcast_max=-1", small), small},
			{3, collectives.CollAllgather, fmt.Sprintf("shm_small_bytes=%d,shm_allgather_max=%d", small, upper), upper},
			{3, collectives.CollAlltoall, fmt.Sprintf("shm_small_bytes=%d,shm_alltoall_max=%d,shm_alltoall_block_max=max", small, upper), upper},
			{2, collectives.CollAlltoall, fmt.Sprintf("shm_small_bytes=%d,shm_alltoall_max=%d,shm_alltoall2_max=max", small, upper), upper},
			{2, collectives.CollAlltoall, fmt.Sprintf("shm_small_bytes=%d,shm_alltoall2_max=%d", small, upper), upper},
			{2, collectives.CollAllgather, fmt.Sprintf("shm_small_bytes=%d,shm_allgather2_max=%d", small, upper), upper},
			{2, collectives.CollAllgather, fmt.Sprintf("shm_small_bytes=%d,shm_allgather_max=%d,shm_allgather2_max=%d", small, upper, 2*upper), upper},
			{3, collectives.CollReduceScatter, fmt.Sprintf("shm_small_bytes=%d,shm_reduce_scatter_max=%d", small, upper), upper},
			{3, collectives.CollBarrier, fmt.Sprintf("shm_small_bytes=%d", small), -1}, // 0 bytes: always inside
			{3, collectives.CollAllreduce, fmt.Sprintf("shm_small_bytes=%d,shm_allreduce_max=%d", small, upper), upper},
			{2, collectives.CollBcast, fmt.Sprintf("shm_small_bytes=%d,shm_bcast2_max=%d", small, upper), upper},
			{3, collectives.CollBcast, fmt.Sprintf("shm_small_bytes=%d,shm_bcast_max=%d", small, upper), upper},
		} {
			e := engine(c.p, shared, c.tune)
			if c.edge < 0 {
				require.Equal(t, collectives.SharedMemory, choose(e, c.coll, 0), c.tune)
				continue
			}
			require.Equal(t, collectives.SharedMemory, choose(e, c.coll, c.edge), "%v p=%d %s at the edge", c.coll, c.p, c.tune)
			require.NotEqual(t, collectives.SharedMemory, choose(e, c.coll, c.edge+1), "%v p=%d %s past the edge", c.coll, c.p, c.tune)
		}
	}
	// The two-rank bands of allgather and alltoall hold for ranks that do
	// not share a CPU: crowded, the slots take every size; with more
	// ranks, the bands of every rank count do.
	crowded := coltest.Options{Shared: true, Crowded: true}
	const pairs = "shm_allgather2_max=1M,shm_alltoall2_max=1M"
	for _, c := range []collectives.Collective{collectives.CollAllgather, collectives.CollAlltoall} {
		require.Equal(t, collectives.SharedMemory, choose(engine(2, shared, pairs), c, 1<<20), "%v at the edge", c)
		require.NotEqual(t, collectives.SharedMemory, choose(engine(2, shared, pairs), c, 1<<20+1), "%v past the edge", c)
		require.Equal(t, collectives.SharedMemory, choose(engine(2, crowded, pairs), c, 64<<20), "%v crowded", c)
		require.Equal(t, collectives.SharedMemory, choose(engine(3, shared, pairs+",shm_alltoall_block_max=max"), c, 64<<20), "%v on 3 ranks", c)
	}
	// The alltoall of more than two ranks, crowded or not, leaves the slots
	// past shm_alltoall_block_max a block (256 KiB by default), whatever
	// the pairs' band says; two ranks do not look at it.
	for _, c := range []struct {
		p     int
		o     coltest.Options
		tune  string
		block int
	}{
		{3, shared, "", 256 << 10},
		{4, crowded, "", 256 << 10},
		{8, crowded, "shm_alltoall2_max=max", 256 << 10},
		{5, shared, "shm_alltoall_block_max=96K", 96 << 10},
	} {
		e := engine(c.p, c.o, c.tune)
		require.Equal(t, collectives.SharedMemory, choose(e, collectives.CollAlltoall, c.p*c.block), "p=%d %q: blocks of %d", c.p, c.tune, c.block)
		require.NotEqual(t, collectives.SharedMemory, choose(e, collectives.CollAlltoall, c.p*(c.block+1)), "p=%d %q: blocks past %d", c.p, c.tune, c.block)
	}
	require.Equal(t, collectives.SharedMemory, choose(engine(2, crowded, ""), collectives.CollAlltoall, 64<<20), "two crowded ranks")
	// By default the allgather leaves them past 2 MiB of result, the
	// alltoall past 512 KiB of send buffer.
	for _, c := range []struct {
		coll collectives.Collective
		edge int
	}{{collectives.CollAllgather, 2 << 20}, {collectives.CollAlltoall, 512 << 10}} {
		require.Equal(t, collectives.SharedMemory, choose(engine(2, shared, ""), c.coll, c.edge), "%v by default", c.coll)
		require.NotEqual(t, collectives.SharedMemory, choose(engine(2, shared, ""), c.coll, c.edge+1), "%v by default", c.coll)
	}

	// "Never": a negative size empties the band.
	e := engine(2, shared, "shm_small_bytes=-1,shm_allreduce_max=-1")
	require.NotEqual(t, collectives.SharedMemory, choose(e, collectives.CollAllreduce, 0))

	// Writes that cost next to nothing make the one-sided ring win.
	os := coltest.Options{OneSided: true}
	require.NotEqual(t, collectives.RingOneSided, choose(engine(4, os, ""), collectives.CollAllreduce, 16<<20))
	require.Equal(t, collectives.RingOneSided, choose(engine(4, os, "onesided_alpha=1ns"), collectives.CollAllreduce, 16<<20))

	// Links inside a host much faster than the one between hosts make the
	// hierarchical allreduce win: latency for small vectors, bandwidth for
	// large ones.
	hosts := coltest.Options{Hosts: []int{0, 0, 0, 0, 1, 1, 1, 1}}
	require.NotEqual(t, collectives.Hierarchical, choose(engine(8, hosts, ""), collectives.CollAllreduce, 8))
	require.Equal(t, collectives.Hierarchical, choose(engine(8, hosts, "intra_alpha=1ns"), collectives.CollAllreduce, 8))
	// (Cheap reduction, so that the bytes moved decide.)
	require.NotEqual(t, collectives.Hierarchical, choose(engine(8, hosts, "gamma=1e-12"), collectives.CollAllreduce, 64<<20))
	require.Equal(t, collectives.Hierarchical, choose(engine(8, hosts, "gamma=1e-12,intra_beta=1e-14"), collectives.CollAllreduce, 64<<20))

	// hier_big_bytes switches the hierarchical allreduce's intra-host
	// forms: its cost is the intra-host binomial reduce and bcast up to
	// there, Rabenseifner and scatter-allgather above, plus the leaders'
	// cheapest allreduce (Model.Cost's formulas).
	for range 4 {
		n := int(logUniform(r, 1<<10, 16<<20))
		for _, big := range []bool{false, true} {
			edge := n
			if big {
				edge = n - 1
			}
			e := engine(8, hosts, fmt.Sprintf("hier_big_bytes=%d", edge))
			m := e.Model()
			intra := collectives.Model{Alpha: m.IntraAlpha, Beta: m.IntraBeta, Gamma: m.Gamma}
			want := intra.Cost(collectives.CollReduce, collectives.Binomial, 4, n) + intra.Cost(collectives.CollBcast, collectives.Binomial, 4, n)
			if big {
				want = intra.Cost(collectives.CollReduce, collectives.Rabenseifner, 4, n) + intra.Cost(collectives.CollBcast, collectives.ScatterAllgather, 4, n)
			}
			want += min(m.Cost(collectives.CollAllreduce, collectives.RecursiveDoubling, 2, n),
				m.Cost(collectives.CollAllreduce, collectives.Ring, 2, n), m.Cost(collectives.CollAllreduce, collectives.Rabenseifner, 2, n))
			require.InDelta(t, want, e.Cost(collectives.CollAllreduce, collectives.Hierarchical, n), want*1e-9, "n=%d hier_big_bytes=%d", n, edge)
		}
	}
}

// TestTuningMovesBcastSplit: the two-rank shared-memory bcast splits the
// copy (process_vm_writev, which this region fails on purpose) exactly in
// the bands its tunables set, and pipelines through the slots elsewhere.
func TestTuningMovesBcastSplit(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 23))
	for range 3 {
		// Bands in 8-byte steps between 1 and 64 KiB, in random order.
		var b [4]int
		for i := range b {
			b[i] = 8 * (128 + r.IntN(8*1024-128))
		}
		lo, hi, gapLo, gapHi := min(b[0], b[1]), max(b[0], b[1]), min(b[2], b[3]), max(b[2], b[3])
		tune := fmt.Sprintf("shm_small_bytes=8,shm_split_min=%d,shm_split_max=%d,shm_split_gap_min=%d,shm_split_gap_max=%d", lo, hi, gapLo, gapHi)
		var o collectives.Options
		require.NoError(t, collectives.ParseTuning(tune, &o))
		o.Algorithms = map[collectives.Collective]collectives.Algorithm{collectives.CollBcast: collectives.SharedMemory}
		for _, n := range []int{lo, lo + 8, hi, hi + 8, gapLo, gapLo + 8, gapHi, gapHi + 8} {
			splits := n > lo && n <= hi && !(n > gapLo && n <= gapHi)
			wo := coltest.Options{Shared: true, PeerWriteErr: fmt.Errorf("no process_vm_writev here")}
			errs := world(t, 2, wo, o, func(ctx context.Context, e *collectives.Engine, rank int) error {
				return collectives.Bcast(ctx, e, make([]float64, n/8), 0)
			})
			if splits {
				require.Error(t, errs[0], "%s: %d bytes should split the copy", tune, n)
				require.ErrorContains(t, errs[0], "no process_vm_writev here")
			} else {
				requireAllOK(t, errs)
			}
		}
	}
}

// TestTuningMovesBcastRead: a shared-memory bcast of more than two ranks
// has the readers copy the root's buffer (process_vm_readv, which this
// region fails on purpose) exactly above shm_read_min and up to
// shm_read_max, and uses the slots elsewhere.
func TestTuningMovesBcastRead(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(4, 23))
	for range 3 {
		a, b := 8*(1+r.IntN(4096)), 8*(1+r.IntN(4096))
		lo, hi := min(a, b), max(a, b)
		tune := fmt.Sprintf("shm_read_min=%d,shm_read_max=%d", lo, hi)
		var o collectives.Options
		require.NoError(t, collectives.ParseTuning(tune, &o))
		o.Algorithms = map[collectives.Collective]collectives.Algorithm{collectives.CollBcast: collectives.SharedMemory}
		for _, n := range []int{lo, lo + 8, hi, hi + 8} {
			reads := n > lo && n <= hi
			wo := coltest.Options{Shared: true, PeerReadErr: fmt.Errorf("no process_vm_readv here")}
			errs := world(t, 3, wo, o, func(ctx context.Context, e *collectives.Engine, rank int) error {
				return collectives.Bcast(ctx, e, make([]float64, n/8), 0)
			})
			if reads {
				require.ErrorContains(t, errs[1], "no process_vm_readv here", "%s: %d bytes should be read from the root", tune, n)
			} else {
				requireAllOK(t, errs)
			}
		}
	}
}

// TestTunedSharedMemoryResults: whatever the shared-memory thresholds and
// piece sizes (random, down to a few bytes), the shared-memory algorithms
// give the serial references' results on each side of them.
func TestTunedSharedMemoryResults(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(5, 23))
	for i := range 6 {
		var names []string
		var vals []int
		for _, name := range []string{"shm_read_min", "shm_read_max", "shm_split_min", "shm_split_max", "shm_split_gap_min", "shm_split_gap_max",
			"shm_fold_bytes", "shm_fold_bytes2", "shm_pipe_bytes", "shm_piece_min", "shm_reduce_fold_bytes", "shm_prefetch_max"} {
			v := int(logUniform(r, 1, 64<<10))
			names = append(names, fmt.Sprintf("%s=%d", name, v))
			vals = append(vals, v)
		}
		tune := strings.Join(names, ",")
		p := 2 + i%2
		for _, coll := range []collectives.Collective{collectives.CollBcast, collectives.CollAllreduce, collectives.CollReduce} {
			var o collectives.Options
			require.NoError(t, collectives.ParseTuning(tune, &o))
			o.Algorithms = map[collectives.Collective]collectives.Algorithm{coll: collectives.SharedMemory}
			for _, v := range []int{vals[r.IntN(len(vals))], vals[r.IntN(len(vals))]} {
				for _, n := range []int{v / 8, v/8 + 1} {
					errs := world(t, p, coltest.Options{Shared: true}, o, func(ctx context.Context, e *collectives.Engine, rank int) error {
						if err := gridCases[coll](ctx, e, rank, p, n); err != nil {
							return err
						}
						return checkAlg(e, collectives.SharedMemory)
					})
					requireAllOK(t, errs)
				}
			}
		}
	}
}
