//go:build !linux

package testbin

import (
	"os"
	"os/exec"
)

// Elsewhere only the command itself is killed at the deadline, and no
// process is listed.

func ownGroup(cmd *exec.Cmd) {}

func dieWithParent(cmd *exec.Cmd) {}

func killGroup(p *os.Process) { p.Kill() }

// GroupMembers is empty where /proc is not there to read.
func GroupMembers(pgid int) []string { return nil }
