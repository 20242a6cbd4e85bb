package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// allowedCPUs lists the CPUs this process may run on.
func allowedCPUs() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("-bind: read affinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// pinThread pins the calling OS thread (locked by the caller) to cpu and
// returns the mask to restore.
func pinThread(cpu int) (unix.CPUSet, error) {
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return old, fmt.Errorf("-bind: read affinity: %w", err)
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return old, fmt.Errorf("-bind: pin to CPU %d: %w", cpu, err)
	}
	return old, nil
}

// bindSelf re-executes this program pinned to cpu, as rdmarun --bind-to
// core starts a rank: the Go runtime of the new image sees one CPU and
// sizes GOMAXPROCS to it. P2PBENCH_BOUND tells the new image rank 1's CPU,
// peer. It returns only on error.
func bindSelf(cpu, peer int) error {
	runtime.LockOSThread()
	if _, err := pinThread(cpu); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, append(os.Environ(), fmt.Sprintf("P2PBENCH_BOUND=%d", peer)))
}

// startPinned starts cmd pinned to cpu (the child inherits the starting
// thread's mask), leaving this process's own binding as it was.
func startPinned(cmd *exec.Cmd, cpu int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	old, err := pinThread(cpu)
	if err != nil {
		return err
	}
	err = cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		err = fmt.Errorf("-bind: restore affinity: %w", rerr)
	}
	return err
}
