package affinity

import "errors"

// ErrUnsupported is what CPUs and StartPinned return where the system has
// no CPU affinity calls (PinThread and RestoreThread exist on Linux only).
var ErrUnsupported = errors.New("affinity: not supported on this system")

// groupByPackage groups cpus by pkg(cpu) (false: unknown, taken as 0),
// in the order of each group's first CPU.
func groupByPackage(cpus []int, pkg func(cpu int) (int, bool)) [][]int {
	var groups [][]int
	index := map[int]int{}
	for _, c := range cpus {
		id, ok := pkg(c)
		if !ok {
			id = 0
		}
		i, seen := index[id]
		if !seen {
			i = len(groups)
			index[id] = i
			groups = append(groups, nil)
		}
		groups[i] = append(groups[i], c)
	}
	return groups
}
