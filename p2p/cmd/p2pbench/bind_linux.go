package main

import (
	"fmt"
	"os"
	"syscall"

	"github.com/rdmago/rdmago/internal/affinity"
)

// bindSelf re-executes this program pinned to cpu, as rdmarun --bind-to
// core starts a rank: the Go runtime of the new image sees one CPU and
// sizes GOMAXPROCS to it. P2PBENCH_BOUND tells the new image rank 1's CPU,
// peer. It returns only on error.
func bindSelf(cpu, peer int) error {
	if _, err := affinity.PinThread(cpu); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	return syscall.Exec(exe, os.Args, append(os.Environ(), fmt.Sprintf("P2PBENCH_BOUND=%d", peer)))
}
