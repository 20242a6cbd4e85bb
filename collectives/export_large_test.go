package collectives

// SizeThresholds lists, in bytes, the sizes at which an algorithm changes
// what it does inside (rather than which algorithm Auto picks, which
// Choose reports): the inline size, the pipelining segment (and the
// one-sided window of two segments), the shared-memory algorithms'
// thresholds and pieces. TestLargeThresholds runs every algorithm just
// across each, so the sizes follow when tuning moves them.
func SizeThresholds(o Options) []int {
	return []int{
		o.inline(), o.segment(), 2 * o.segment(),
		shmAutoBytes, shmReadMin, shmReadMax, shmSplitMin, shmSplitMax,
		shmRSBytes, shmRSBytes2, shmPipeMin, shmMinSlot,
	}
}
