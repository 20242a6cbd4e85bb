package collectives_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
)

var (
	rankCounts = []int{1, 2, 3, 4, 5, 7, 8, 16}
	sizes      = []int{0, 1, 7, 1000}
	long       = os.Getenv("RDMAGO_LONG") == "1"
)

// gridRanks is rankCounts, except under -race (about ten times slower)
// without RDMAGO_LONG=1, where a subset keeps the run short: one and two
// ranks, odd counts, a power of two with folding neighbours.
func gridRanks() []int {
	if raceEnabled && !long {
		return []int{1, 2, 3, 5, 8}
	}
	return rankCounts
}

// world runs fn on n ranks over a fresh coltest world, each with its own
// Engine, under a deadline so that a bug fails instead of hanging.
func world(t testing.TB, n int, wo coltest.Options, eo collectives.Options, fn func(ctx context.Context, e *collectives.Engine, rank int) error) []error {
	t.Helper()
	return runWorld(coltest.NewWorld(n, wo), eo, fn)
}

// runWorld is world on a world the caller made (to kill a rank of it, say).
func runWorld(w *coltest.World, eo collectives.Options, fn func(ctx context.Context, e *collectives.Engine, rank int) error) []error {
	return runWorldAs(w, eo, true, fn)
}

// runWorldAs is runWorld over groups that keep their optional
// capabilities (FoldReceiver, PartsSender, ...) only when capable.
func runWorldAs(w *coltest.World, eo collectives.Options, capable bool, fn func(ctx context.Context, e *collectives.Engine, rank int) error) []error {
	// Generous: the multi-megabyte cases under -race, beside the package's
	// other parallel tests on a loaded 2-core machine, take 12-22 s.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return w.Run(func(rank int, g collectives.Group) error {
		if !capable {
			g = plainGroup{g}
		}
		e, err := collectives.New(g, eo)
		if err != nil {
			return err
		}
		defer e.Close()
		return fn(ctx, e, rank)
	})
}

func requireAllOK(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

func force(c collectives.Collective, a collectives.Algorithm) collectives.Options {
	return collectives.Options{Algorithms: map[collectives.Collective]collectives.Algorithm{c: a}}
}

// worldFor gives the world options an algorithm needs (windows, topology).
func worldFor(a collectives.Algorithm, n int) coltest.Options {
	var o coltest.Options
	switch a {
	case collectives.RingOneSided:
		o.OneSided = true
	case collectives.SharedMemory:
		o.Shared = true
	case collectives.Hierarchical:
		o.Hosts = make([]int, n)
		for r := range o.Hosts {
			o.Hosts[r] = r * 7 % 3 // up to three hosts, uneven, ranks interleaved
		}
	}
	return o
}

func name(kv ...any) string {
	s := ""
	for i := 0; i+1 < len(kv); i += 2 {
		if s != "" {
			s += "/"
		}
		s += fmt.Sprintf("%v=%v", kv[i], kv[i+1])
	}
	return s
}
