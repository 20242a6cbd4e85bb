package affinity

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

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
func StartPinned(cmd *exec.Cmd, cpu int) error { return StartPinnedSet(cmd, []int{cpu}) }

// StartPinnedSet starts cmd pinned to the CPUs in set (a socket's, say)
// from its first instruction; the caller's own affinity is left as it was.
func StartPinnedSet(cmd *exec.Cmd, set []int) error {
	old, err := pinThreadSet(set)
	if err != nil {
		return err
	}
	err = cmd.Start()
	if rerr := RestoreThread(old); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// pinThreadSet is PinThread for a set of CPUs.
func pinThreadSet(set []int) (unix.CPUSet, error) {
	runtime.LockOSThread()
	var old, mask unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		runtime.UnlockOSThread()
		return old, fmt.Errorf("read affinity: %w", err)
	}
	for _, c := range set {
		mask.Set(c)
	}
	if err := unix.SchedSetaffinity(0, &mask); err != nil {
		runtime.UnlockOSThread()
		return old, fmt.Errorf("pin to CPUs %v: %w", set, err)
	}
	return old, nil
}

// Sockets groups cpus by the physical package (socket) each belongs to,
// as sysfs reports it, in the order of each package's first CPU. A CPU
// whose package cannot be read counts as package 0.
func Sockets(cpus []int) [][]int {
	return groupByPackage(cpus, func(cpu int) (int, bool) {
		b, err := os.ReadFile(fmt.Sprintf("/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu))
		if err != nil {
			return 0, false
		}
		id, err := strconv.Atoi(strings.TrimSpace(string(b)))
		return id, err == nil
	})
}
