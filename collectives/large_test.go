package collectives_test

import (
	"context"
	"testing"

	"github.com/rdmago/rdmago/collectives"
)

// TestLarge runs every algorithm of every collective once at 1<<20+3
// elements (float64 sums of integer values, so exact), on 3 ranks (4 for
// the hierarchical allreduce, two hosts of two). Collectives whose buffers
// hold p blocks use blocks of (1<<20+3)/p+1 elements, so every vector is
// about that size. It exercises split payloads, uneven blocks, pipelining
// segments and the one-sided slots. Under -race (ten times slower on
// these loops) it runs only with RDMAGO_LONG=1.
func TestLarge(t *testing.T) {
	t.Parallel()
	if testing.Short() || raceEnabled && !long {
		t.Skip("large messages: without -short, and with -race only when RDMAGO_LONG=1")
	}
	const big = 1<<20 + 3
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
			n := big
			switch coll {
			case collectives.CollReduceScatter, collectives.CollAllgather, collectives.CollAllgatherv,
				collectives.CollGather, collectives.CollGatherv, collectives.CollScatter,
				collectives.CollScatterv, collectives.CollAlltoall, collectives.CollAlltoallv:
				n = big/p + 1
			}
			t.Run(name("coll", coll, "alg", alg), func(t *testing.T) {
				errs := world(t, p, worldFor(alg, p), force(coll, alg), func(ctx context.Context, e *collectives.Engine, r int) error {
					return f(ctx, e, r, p, n)
				})
				requireAllOK(t, errs)
			})
		}
	}
}
