//go:build !linux

package affinity

import "os/exec"

// CPUs reports ErrUnsupported.
func CPUs() ([]int, error) { return nil, ErrUnsupported }

// StartPinned reports ErrUnsupported.
func StartPinned(*exec.Cmd, int) error { return ErrUnsupported }

// StartPinnedSet reports ErrUnsupported.
func StartPinnedSet(*exec.Cmd, []int) error { return ErrUnsupported }

// Sockets puts every CPU in one group.
func Sockets(cpus []int) [][]int {
	return groupByPackage(cpus, func(int) (int, bool) { return 0, true })
}
