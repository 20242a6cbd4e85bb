package testbin

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
)

// ownGroup makes cmd the leader of a new process group, so that its
// children (a launcher's ranks) can be killed with it.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// dieWithParent has the kernel kill cmd when this process dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// killGroup kills p's process group (p leads it; after p's exit, the
// group's id still names its members until they are gone).
func killGroup(p *os.Process) { syscall.Kill(-p.Pid, syscall.SIGKILL) }

// GroupMembers lists the live processes of process group pgid as "pid
// state cmdline", from /proc (zombies, already dead, are left out).
func GroupMembers(pgid int) []string {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []string
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // gone meanwhile
		}
		// pid (comm) state ppid pgrp ...; comm may hold spaces and
		// parentheses, so parse after its last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		fields := bytes.Fields(b[i+1:])
		if len(fields) < 3 || string(fields[0]) == "Z" {
			continue
		}
		if g, err := strconv.Atoi(string(fields[2])); err != nil || g != pgid {
			continue
		}
		dir := filepath.Dir(f)
		cmdline, _ := os.ReadFile(filepath.Join(dir, "cmdline"))
		cmdline = bytes.TrimRight(bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}), " ")
		out = append(out, fmt.Sprintf("%s %s %s", filepath.Base(dir), fields[0], cmdline))
	}
	return out
}
