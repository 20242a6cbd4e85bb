//go:build !race

package collectives_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

// The large-message tests below run without the race detector only (it
// makes these loops about ten times slower); test.sh runs them in a step of
// their own (go test -run Large). Their sizes are not picked by hand: they
// are read from the model (every size at which Choose changes its answer)
// and from the algorithms' own thresholds (collectives.SizeThresholds,
// collectives.BcastSplits), so they follow when tuning moves them.

// blockColl says whether c's nbytes (what the model sees) covers p blocks
// of the per-rank count the grid cases take.
func blockColl(c collectives.Collective) bool {
	switch c {
	case collectives.CollReduceScatter, collectives.CollAllgather, collectives.CollAllgatherv,
		collectives.CollGather, collectives.CollGatherv, collectives.CollScatter,
		collectives.CollScatterv, collectives.CollAlltoall, collectives.CollAlltoallv:
		return true
	}
	return false
}

// countsAcross returns the element counts (float64) of c on p ranks whose
// model size is the last one below nbytes and the first one at or above
// it. The two differ by one element per block, so blocks stay uneven.
func countsAcross(c collectives.Collective, p, nbytes int) (below, above int) {
	per := 8
	if blockColl(c) {
		per *= p
	}
	above = (nbytes + per - 1) / per
	return max(above-1, 0), above
}

// probeWorld is a group shape Auto chooses for.
type probeWorld struct {
	name string
	p    int
	o    coltest.Options
}

func probeWorlds() []probeWorld {
	return []probeWorld{
		{"plain", 2, coltest.Options{}},
		{"plain", 3, coltest.Options{}},
		{"plain", 4, coltest.Options{}},
		{"plain", 8, coltest.Options{}},
		{"shared", 2, coltest.Options{Shared: true}},
		{"shared", 3, coltest.Options{Shared: true}},
		{"onesided", 3, coltest.Options{OneSided: true}},
		{"hosts", 4, worldFor(collectives.Hierarchical, 4)},
	}
}

// switchPoint is a size at which Auto's choice changes: below bytes it
// picks from, from bytes on it picks to.
type switchPoint struct {
	coll     collectives.Collective
	bytes    int
	from, to collectives.Algorithm
}

// switchPoints finds, by bisection to 8 bytes, every size up to maxBytes at
// which e's Auto choice for c changes (commutative ops).
func switchPoints(t *testing.T, e *collectives.Engine, c collectives.Collective, maxBytes int) []switchPoint {
	choose := func(n int) collectives.Algorithm {
		a, err := e.Choose(c, n, true)
		require.NoError(t, err, "%v of %d bytes", c, n)
		return a
	}
	var out []switchPoint
	lo, prev := 8, choose(8)
	for hi := 16; hi <= maxBytes; hi *= 2 {
		cur := choose(hi)
		// Several switches inside one doubling are found one by one: each
		// bisection finds the first change after lo.
		for cur != prev {
			a, b := lo, hi // choose(a) == prev, choose(b) != prev
			for b-a > 8 {
				m := (a + b) / 2 / 8 * 8
				if m <= a {
					m = a + 8
				}
				if choose(m) == prev {
					a = m
				} else {
					b = m
				}
			}
			next := choose(b)
			out = append(out, switchPoint{coll: c, bytes: b, from: prev, to: next})
			lo, prev = b, next
		}
		lo = hi
	}
	return out
}

// TestLargeAutoSwitches runs Auto on both sides of every size at which the
// model (with the default constants) switches algorithm, for every
// collective and group shape that has such a switch, and checks that each
// side ran the algorithm Choose named and got the serial reference's
// result.
func TestLargeAutoSwitches(t *testing.T) {
	if testing.Short() {
		t.Skip("large messages")
	}
	t.Parallel()
	const maxBytes = 32 << 20
	found := 0
	for _, pw := range probeWorlds() {
		for _, coll := range collectives.Collectives() {
			f := gridCases[coll]
			if f == nil {
				continue
			}
			probe := coltest.NewWorld(pw.p, pw.o)
			e, err := collectives.New(probe.Group(0), collectives.Options{})
			require.NoError(t, err)
			points := switchPoints(t, e, coll, maxBytes)
			require.NoError(t, e.Close())
			for _, sp := range points {
				found++
				below, above := countsAcross(coll, pw.p, sp.bytes)
				for _, side := range []struct {
					n    int
					want collectives.Algorithm
				}{{below, sp.from}, {above, sp.to}} {
					t.Run(name("world", pw.name, "p", pw.p, "coll", coll, "switch", fmt.Sprintf("%v->%v@%d", sp.from, sp.to, sp.bytes), "n", side.n), func(t *testing.T) {
						errs := world(t, pw.p, pw.o, collectives.Options{}, func(ctx context.Context, e *collectives.Engine, r int) error {
							if err := f(ctx, e, r, pw.p, side.n); err != nil {
								return err
							}
							switch coll {
							case collectives.CollAllgatherv, collectives.CollGatherv, collectives.CollScatterv, collectives.CollAlltoallv:
								return nil // uneven counts: each rank's model size is its own
							}
							return checkAlg(e, side.want)
						})
						requireAllOK(t, errs)
					})
				}
			}
		}
	}
	// The model has switches (latency- to bandwidth-bound forms, the
	// shared-memory cut-offs); finding none means the probe is broken.
	require.Greater(t, found, 10, "switch points found")
}

// splitBands returns the sizes at which BcastSplits changes its answer
// (the two-rank shared-memory bcast switching between the split copy and
// the slots' pipeline), up to maxBytes, on the first size past each.
func splitBands(maxBytes int) []int {
	var out []int
	prev := collectives.BcastSplits(8)
	for n := 16; n <= maxBytes; n += 8 {
		if s := collectives.BcastSplits(n); s != prev {
			out = append(out, n)
			prev = s
		}
	}
	return out
}

// TestLargeThresholds forces every algorithm of every collective across
// each size at which an algorithm changes its behaviour inside
// (collectives.SizeThresholds: inline payloads, pipelining segments,
// one-sided slots, shared-memory pieces and rounds) on uneven block
// counts, and the two-rank shared-memory bcast across its split bands,
// against the serial references. Sizes above 1 MiB other than the bcast
// bands are TestLarge's.
func TestLargeThresholds(t *testing.T) {
	if testing.Short() {
		t.Skip("large messages")
	}
	t.Parallel()
	var ths []int
	for _, b := range collectives.SizeThresholds(collectives.Options{}) {
		if b <= 1<<20 {
			ths = append(ths, b)
		}
	}
	slices.Sort(ths)
	ths = slices.Compact(ths)
	require.NotEmpty(t, ths)
	for _, coll := range collectives.Collectives() {
		f := gridCases[coll]
		if f == nil {
			continue
		}
		for _, alg := range collectives.Algorithms(coll) {
			p := 3
			if alg == collectives.Hierarchical {
				p = 4
			}
			for _, th := range ths {
				_, n := countsAcross(coll, p, th+1)
				t.Run(name("coll", coll, "alg", alg, "p", p, "threshold", th, "n", n), func(t *testing.T) {
					errs := world(t, p, worldFor(alg, p), force(coll, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
						if err := f(ctx, e, r, p, n); err != nil {
							return err
						}
						return checkAlg(e, alg)
					})
					requireAllOK(t, errs)
				})
			}
		}
	}
	bands := splitBands(64 << 20)
	require.NotEmpty(t, bands, "BcastSplits never switches")
	for _, b := range bands {
		for _, n := range []int{(b - 8) / 8, b / 8} {
			// Slots of 64 KiB, as a real region has, and 8 KiB (more rounds).
			for _, slot := range []int{8 << 10, 64 << 10} {
				t.Run(name("coll", "bcast", "alg", "shared_memory", "p", 2, "band", b, "slot", slot, "n", n), func(t *testing.T) {
					wo := coltest.Options{Shared: true, SharedSlot: slot}
					errs := world(t, 2, wo, force(collectives.CollBcast, collectives.SharedMemory), func(ctx context.Context, e *collectives.Engine, r int) error {
						if err := gridCases[collectives.CollBcast](ctx, e, r, 2, n); err != nil {
							return err
						}
						return checkAlg(e, collectives.SharedMemory)
					})
					requireAllOK(t, errs)
				})
			}
		}
	}
}
