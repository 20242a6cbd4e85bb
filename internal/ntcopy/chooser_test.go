package ntcopy

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestChooserCopies: both ways copy exactly the bytes, at every class and
// below MinBytes, and Copy returns the count.
func TestChooserCopies(t *testing.T) {
	src := testSource(2<<20 + 100)
	var c Chooser
	for _, n := range []int{0, 1, MinBytes - 1, MinBytes, 20000, 100000, 300000, 1 << 20, 2<<20 + 100} {
		for range 3 * probeEvery { // every way of the class, probes included
			dst := make([]byte, n+2)
			require.Equal(t, n, c.Copy(dst[1:n+1], src[:n]))
			require.Equal(t, src[:n], dst[1:n+1], "%d bytes", n)
			require.Zero(t, dst[0], "%d bytes: byte before", n)
			require.Zero(t, dst[n+1], "%d bytes: byte after", n)
		}
	}
}

// TestChooserPicksCheaperWay: each way is tried once, then the one of the
// lower recent cost is taken, the other once every probeEvery copies; a
// way whose cost falls below the other's takes over.
func TestChooserPicksCheaperWay(t *testing.T) {
	var c Chooser
	k := classOf(64 << 10)
	w, timed := c.pick(k)
	require.Equal(t, wayNT, w)
	require.True(t, timed)
	c.note(k, w, 100)
	w, _ = c.pick(k)
	require.Equal(t, wayCached, w)
	c.note(k, w, 300)
	count := [2]int{}
	for range 10 * probeEvery {
		w, _ := c.pick(k)
		count[w]++
	}
	require.Equal(t, 10, count[wayCached], "probes of the dearer way")
	require.Equal(t, 10*probeEvery-10, count[wayNT])
	// Cached copies get cheap (a placement where the cores share a cache):
	// the probes bring its cost down until it wins.
	for range 40 {
		c.note(k, wayCached, 10)
	}
	w, _ = c.pick(k)
	require.Equal(t, wayCached, w)
	// Another class keeps its own costs.
	w, _ = c.pick(classOf(8 << 10))
	require.Equal(t, wayNT, w)
}

// TestChooserCapsOutliers: one copy that lost its CPU raises its way's
// cost by at most what four times the recent cost would.
func TestChooserCapsOutliers(t *testing.T) {
	var c Chooser
	c.note(0, wayNT, 100)
	c.note(0, wayNT, 1_000_000)
	require.Equal(t, uint64(100-100/8+400/8), c.cost[0][wayNT])
}

func TestClassOf(t *testing.T) {
	for _, tc := range []struct{ n, k int }{{4 << 10, 0}, {16<<10 - 1, 0}, {16 << 10, 1}, {64<<10 - 1, 1}, {64 << 10, 2},
		{256 << 10, 3}, {1<<20 - 1, 3}, {1 << 20, 4}, {64 << 20, 4}} {
		require.Equal(t, tc.k, classOf(tc.n), "%d bytes", tc.n)
	}
}
