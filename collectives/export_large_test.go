package collectives

// SizeThresholds lists, in bytes, the sizes at which an algorithm changes
// what it does inside (rather than which algorithm Auto picks, which
// Choose reports): the inline size, the pipelining segment (and the
// one-sided window of two segments), the shared-memory algorithms'
// thresholds and pieces. TestLargeThresholds runs every algorithm just
// across each, so the sizes follow when tuning moves them.
func SizeThresholds(o Options) []int {
	var m Model
	if o.Model != nil {
		m = *o.Model
	}
	m = m.withDefaults()
	return []int{
		o.inline(), o.segment(), 2 * o.segment(),
		m.ShmSmallBytes, m.ShmReadMin, m.ShmReadMax, m.ShmSplitMin, m.ShmSplitMax,
		m.ShmFoldBytes, m.ShmFoldBytes2, m.ShmPipeBytes, m.ShmPieceMin, shmMinSlot,
	}
}
