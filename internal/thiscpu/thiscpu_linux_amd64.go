package thiscpu

// cpuNodeSeg is the selector of Linux's per-CPU segment on x86-64
// (GDT_ENTRY_CPUNODE, 15, at privilege level 3): its limit holds the CPU
// number in bits 0-11 and the NUMA node above them.
const cpuNodeSeg = 15*8 + 3

// lsl loads the limit of segment sel; ok is false when the selector is
// not valid (a kernel without the segment).
func lsl(sel uint32) (limit uint32, ok bool)

func id() int {
	limit, ok := lsl(cpuNodeSeg)
	if !ok {
		return -1
	}
	return int(limit & 0xfff)
}
