//go:build !linux

package affinity

import "os/exec"

// CPUs reports ErrUnsupported.
func CPUs() ([]int, error) { return nil, ErrUnsupported }

// StartPinned reports ErrUnsupported.
func StartPinned(*exec.Cmd, int) error { return ErrUnsupported }
