package ntcopy

import "math/bits"

// Chooser copies data that another core will read (a shared-memory slot)
// by whichever of two ways has lately been the faster here: Copy's
// non-temporal stores or Bulk's cached ones. Which wins depends on the
// machine and on the moment, not on the size alone: on the 2-core VM
// measured, a 2-rank allreduce of 4 KiB-4 MiB through slots took 0.45-0.7
// of the time with cached stores in one minute (the non-temporal ones,
// which go to memory, had become slow) and 1.05-1.9 times the time in
// another (where cached stores pay for taking back every line the other
// core had read, up to 7 times as long at 16-512 KiB,
// BenchmarkCrossCoreRewrite). So each copy is timed, per size class, and
// the way with the lower recent cost per byte is taken, the other one
// every probeEvery copies of the class to notice when that changes. With
// it the 2-rank allgather took 0.51-0.73 of the time of non-temporal
// stores alone at 32 KiB-4 MiB in a minute of the first kind, and
// 0.97-1.09 in one of the second (its timing and probes).
//
// A Chooser is not safe for concurrent use; its zero value is ready. Copies
// below MinBytes, and every copy where the CPU has no non-temporal stores,
// are Copy's.
type Chooser struct {
	cost  [chooserClasses][2]uint64 // recent ticks per KiB of each way (0: none yet)
	count [chooserClasses]uint32    // copies of each class so far
}

const (
	// chooserClasses: 4-16 KiB, 16-64 KiB, 64-256 KiB, 256 KiB-1 MiB and
	// larger, which the two ways' relative costs differ between.
	chooserClasses = 5
	// probeEvery: the way that is not the faster one is tried once every
	// probeEvery copies of a class, which costs at most 1/probeEvery of
	// the difference while it stays slower.
	probeEvery = 32
	// timeEvery: of the copies the faster way makes, one in timeEvery is
	// timed (two reads of the time-stamp counter, a few percent of a
	// 4 KiB copy).
	timeEvery = 4
	// wayNT and wayCached index Chooser's costs.
	wayNT, wayCached = 0, 1
)

// classOf is the size class of a copy of n >= MinBytes bytes.
func classOf(n int) int { return min((bits.Len(uint(n))-13)/2, chooserClasses-1) }

// Copy copies min(len(dst), len(src)) bytes from src to dst, which must
// not overlap, by the way Chooser picks, and returns that count. Like
// Copy's, the stores are complete (fenced where they need it) when it
// returns, so a release store after it publishes the data.
func (c *Chooser) Copy(dst, src []byte) int {
	if min(len(dst), len(src)) < MinBytes {
		// Small enough for Go's copy either way; small enough to inline:
		// a publication of a few bytes went through two more calls.
		return copy(dst, src)
	}
	return c.copyLarge(dst, src)
}

func (c *Chooser) copyLarge(dst, src []byte) int {
	n := min(len(dst), len(src))
	if !haveNT {
		return Copy(dst, src)
	}
	k := classOf(n)
	way, timed := c.pick(k)
	var t0 uint64
	if timed {
		t0 = ticks()
	}
	if way == wayNT {
		Copy(dst[:n], src[:n])
	} else {
		Bulk(dst[:n], src[:n])
	}
	if timed {
		c.note(k, way, (ticks()-t0)<<10/uint64(n))
	}
	return n
}

// pick is the way the next copy of class k takes, and whether to time it:
// each way once first, then the one of the lower recent cost (timed one
// copy in timeEvery), the other every probeEvery-th (timed).
func (c *Chooser) pick(k int) (way int, timed bool) {
	i := c.count[k]
	c.count[k]++
	nt, ca := c.cost[k][wayNT], c.cost[k][wayCached]
	switch {
	case nt == 0:
		return wayNT, true
	case ca == 0:
		return wayCached, true
	}
	best := wayNT
	if ca < nt {
		best = wayCached
	}
	if i%probeEvery == probeEvery-1 {
		return 1 - best, true
	}
	return best, i%timeEvery == 0
}

// note folds one copy's cost per KiB into its way's recent cost (an
// average weighing the newest copy an eighth). A copy more than four
// times the recent cost (the thread lost its CPU meanwhile) counts as
// four times: one preemption would otherwise keep a way out of use for
// hundreds of probes.
func (c *Chooser) note(k, way int, per uint64) {
	per = max(per, 1)
	old := c.cost[k][way]
	if old == 0 {
		c.cost[k][way] = per
		return
	}
	per = min(per, 4*old)
	c.cost[k][way] = old - old/8 + per/8
}
