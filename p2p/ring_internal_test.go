package p2p

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every ring's tail word starts an aligned pair of lines of its own (CPUs
// may fetch such pairs together): not beside the sleepers word, which
// senders load after every message, nor beside a ring's lines, which they
// write. A tail beside the sleepers word made its stores cost the
// ping-pong time (see ringTailArea).
func TestRingTailOwnsItsLinePair(t *testing.T) {
	const pair = 2 * ringLine
	assert.GreaterOrEqual(t, ringWinHdr, pair, "the sleepers word's pair")
	assert.GreaterOrEqual(t, ringTailArea, pair, "a ring's lines start past its tail's pair")
	for _, n := range []int{ringMinLines, 256, maxRingLines} {
		for ranks := 2; ranks <= 8; ranks++ {
			for r := range ranks {
				tail := ringWinHdr + r*ringBlock(n)
				if !assert.Zero(t, tail%pair, "ring lines %d, ranks %d: rank %d's tail at %d", n, ranks, r, tail) {
					return
				}
			}
		}
	}
}

// A scan that finds a ring empty watches its head stamp for ringWatch
// more loads (scanEnd): the watch reports a stamp it finds, and gives up
// on one that does not come rather than spinning on.
func TestWatchStamp(t *testing.T) {
	w := uint32(7)
	assert.True(t, watchStamp(&w, 7), "a stamp already there")
	assert.False(t, watchStamp(&w, 8), "a stamp that never comes")
	assert.Positive(t, ringWatch, "a scan watches an empty head at all")
	assert.LessOrEqual(t, ringWatch, 8, "a watcher that loads too often takes the line from its writer")
}
