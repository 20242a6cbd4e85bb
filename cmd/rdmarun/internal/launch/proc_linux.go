//go:build linux

package launch

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/internal/affinity"
)

// startProcess starts cmd as the leader of a new process group, so that a
// signal for the rank reaches every process it starts, and with
// PDEATHSIG=KILL, so that it dies with rdmarun even if rdmarun is killed
// without a chance to stop it. A non-empty pin pins it to those CPUs from
// its first instruction: the child of a fork inherits the affinity of the
// forking thread, so this thread is locked, narrowed, used to fork, and
// restored.
func startProcess(cmd *exec.Cmd, pin []int) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	// PDEATHSIG fires when the forking *thread* ends. Go keeps its threads
	// for the life of the process unless a goroutine exits while locked to
	// one; locking here (and unlocking before return) keeps it that way.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if len(pin) == 0 {
		return cmd.Start()
	}
	if err := affinity.StartPinnedSet(cmd, pin); err != nil {
		return fmt.Errorf("binding the rank to CPUs %v: %w", pin, err)
	}
	return nil
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
