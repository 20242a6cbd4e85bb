//go:build !linux

package launch

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
)

var errUnsupported = errors.New("rdmarun runs ranks on Linux only")

func startProcess(cmd *exec.Cmd, pin []int) error { return errUnsupported }
func waitExited(pid int) error                    { return errUnsupported }
func killGroup(pgid int, sig syscall.Signal)      {}
func signalName(sig syscall.Signal) string        { return fmt.Sprintf("signal %d", int(sig)) }
