package verbstest

import (
	"os/exec"
	"syscall"
)

// setPeerSysProcAttr makes the kernel kill the peer if the test process dies
// first, so no peer outlives a crashed or killed test run.
func setPeerSysProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
