package affinity

import (
	"fmt"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// CPUs lists the CPUs the calling thread may run on, in order.
func CPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("read affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// PinThread locks the calling goroutine to its OS thread and narrows the
// thread's affinity to cpu, for a fork or exec that follows. It returns
// the previous mask; RestoreThread undoes both.
func PinThread(cpu int) (unix.CPUSet, error) {
	runtime.LockOSThread()
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return old, fmt.Errorf("read affinity: %w", err)
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		runtime.UnlockOSThread()
		return old, fmt.Errorf("pin to CPU %d: %w", cpu, err)
	}
	return old, nil
}

// RestoreThread gives the thread pinned by PinThread its old mask back and
// unlocks the goroutine from it.
func RestoreThread(old unix.CPUSet) error {
	defer runtime.UnlockOSThread()
	if err := unix.SchedSetaffinity(0, &old); err != nil {
		return fmt.Errorf("restore affinity: %w", err)
	}
	return nil
}

// StartPinned starts cmd pinned to cpu from its first instruction; the
// caller's own affinity is left as it was.
func StartPinned(cmd *exec.Cmd, cpu int) error {
	old, err := PinThread(cpu)
	if err != nil {
		return err
	}
	err = cmd.Start()
	if rerr := RestoreThread(old); rerr != nil && err == nil {
		err = rerr
	}
	return err
}
