//go:build linux

package launch

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"
)

// startProcess starts cmd as the leader of a new process group, so that a
// signal for the rank reaches every process it starts, and with
// PDEATHSIG=KILL, so that it dies with rdmarun even if rdmarun is killed
// without a chance to stop it. cpu >= 0 pins it to that CPU from its first
// instruction: the child of a fork inherits the affinity of the forking
// thread, so this thread is locked, narrowed, used to fork, and restored.
func startProcess(cmd *exec.Cmd, cpu int) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// PDEATHSIG fires when the forking *thread* ends. Go keeps its threads
	// for the life of the process unless a goroutine exits while locked to
	// one; locking here (and unlocking before return) keeps it that way.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if cpu < 0 {
		return cmd.Start()
	}
	var old, one unix.CPUSet
	if err := unix.SchedGetaffinity(0, &old); err != nil {
		return fmt.Errorf("--bind-to core: read affinity: %w", err)
	}
	one.Set(cpu)
	if err := unix.SchedSetaffinity(0, &one); err != nil {
		return fmt.Errorf("--bind-to core: pin to CPU %d: %w", cpu, err)
	}
	err := cmd.Start()
	if rerr := unix.SchedSetaffinity(0, &old); rerr != nil && err == nil {
		err = fmt.Errorf("--bind-to core: restore affinity: %w", rerr)
	}
	return err
}

// allowedCPUs lists the CPUs rdmarun may run on, in order.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil
	}
	var cpus []int
	for c := 0; c < len(set)*64 && len(cpus) < set.Count(); c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus
}

// waitExited blocks until process pid has exited, without reaping it: the
// zombie keeps its pid, and so its process group id, from being reused
// while rdmarun still signals the group.
func waitExited(pid int) error {
	for {
		var info unix.Siginfo
		err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if err == unix.EINTR {
			continue
		}
		return err
	}
}

// killGroup sends sig to process group pgid; a group that is gone is not
// an error.
func killGroup(pgid int, sig syscall.Signal) {
	if pgid <= 1 {
		return
	}
	_ = unix.Kill(-pgid, sig)
}

func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}
