//go:build !linux

package verbstest

import "os/exec"

// setPeerSysProcAttr has no parent-death signal off Linux; the peer exits
// when its request pipe closes.
func setPeerSysProcAttr(*exec.Cmd) {}
