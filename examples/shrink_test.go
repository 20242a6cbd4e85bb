package examples_test

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testbin"
)

var (
	recoveredRE = regexp.MustCompile(`(?m)^shrink: rank (\d+) recovered: .*; new communicator \[([\d ]*)\]; resuming at iteration (\d+); failed at (\d+), working at (\d+)$`)
	answerRE    = regexp.MustCompile(`(?m)^shrink: rank (\d+): acc (\d+) \(want (\d+)\) as rank (\d+) of (\d+) (OK|FAIL)$`)
	diesRE      = regexp.MustCompile(`(?m)^shrink: rank dies at (\d+)$`)
)

// TestShrinkExample kills a rank of examples/shrink at seeded random
// points (rank, iteration, and a delay into the iteration that puts the
// death in the computation or in the allreduce) under rdmarun
// --keep-going, over shm and tcp, and checks that every survivor finishes
// with the right answer, recovered once, and names the same new
// communicator: the survivors in the old order. It logs the time from the
// death to a working shrunk communicator.
func TestShrinkExample(t *testing.T) {
	rdmarun, bins := build(t, "shrink")
	const iters = 30
	rng := rand.New(rand.NewPCG(22, 3))
	for i, tr := range []string{"shm", "tcp", "shm", "tcp", "shm"} {
		np := 3 + i%2
		kill, at := rng.IntN(np), rng.IntN(iters)
		if i == 0 {
			kill = 0 // the rank that is rank 0 of every communicator
		}
		// In the last case a second rank dies as it sees the first death,
		// while the others shrink.
		second := -1
		if i == 4 {
			np = 4
			kill = rng.IntN(np)
			second = (kill + 1 + rng.IntN(np-1)) % np
		}
		seed := rng.Uint64()%1000 + 1
		t.Run(fmt.Sprintf("%s/np=%d/kill=%d@%d/seed=%d/second=%d", tr, np, kill, at, seed, second), func(t *testing.T) {
			r := testbin.Run(t, time.Minute, testbin.Environ("RDMARUN_*", "RDMAGO_*"), rdmarun,
				"-np", fmt.Sprint(np), "--keep-going", "--transport", tr, "--timeout", "40s", "--stdin", "none",
				bins["shrink"], "-n", "20000", "-iters", fmt.Sprint(iters),
				"-kill-rank", fmt.Sprint(kill), "-kill-iter", fmt.Sprint(at), "-kill-delay", "2ms", "-seed", fmt.Sprint(seed), "-die-on-failure", fmt.Sprint(second))
			require.Equal(t, 128+9, r.Code, "rdmarun exits with the killed rank's status\n%s", r)
			require.Regexp(t, fmt.Sprintf(`rank %d \(host localhost, pid \d+\) was killed by signal SIGKILL; --keep-going`, kill), r.Stderr, r)

			var survivors []int
			for q := range np {
				if q != kill && q != second {
					survivors = append(survivors, q)
				}
			}
			want := strings.Trim(fmt.Sprint(survivors), "[]")

			answers := answerRE.FindAllStringSubmatch(r.Stdout, -1)
			require.Len(t, answers, len(survivors), "one answer per survivor\n%s", r)
			for _, m := range answers {
				q, _ := strconv.Atoi(m[1])
				assert.Contains(t, survivors, q, "an answer from the killed rank\n%s", r)
				assert.Equal(t, m[3], m[2], "rank %d's answer", q)
				assert.Equal(t, "OK", m[6])
				assert.Equal(t, fmt.Sprint(len(survivors)), m[5], "rank %d's final communicator size", q)
				assert.Equal(t, fmt.Sprint(slices.Index(survivors, q)), m[4], "rank %d's rank in the final communicator", q)
			}
			require.Regexp(t, fmt.Sprintf(`(?m)^shrink: n=20000, %d iterations, %d ranks at the start, %d at the end, acc \d+ OK$`, iters, np, len(survivors)), r.Stdout, r)

			recs := recoveredRE.FindAllStringSubmatch(r.Stdout, -1)
			require.Len(t, recs, len(survivors), "each survivor recovers once\n%s", r)
			dies := diesRE.FindStringSubmatch(r.Stdout)
			require.NotNil(t, dies, r)
			died, _ := strconv.ParseInt(dies[1], 10, 64)
			var lastFail, lastWork int64
			for _, m := range recs {
				assert.Equal(t, want, m[2], "rank %s's new communicator", m[1])
				assert.Equal(t, recs[0][3], m[3], "the iteration the survivors resume at")
				f, _ := strconv.ParseInt(m[4], 10, 64)
				w, _ := strconv.ParseInt(m[5], 10, 64)
				lastFail, lastWork = max(lastFail, f), max(lastWork, w)
			}
			t.Logf("from the death to: the last survivor's error %v, a working shrunk communicator on every survivor %v",
				time.Duration(lastFail-died), time.Duration(lastWork-died))
		})
	}
}
