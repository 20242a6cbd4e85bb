//go:build !linux

package main

import (
	"errors"
	"os/exec"
)

var errNoBind = errors.New("-bind needs Linux")

func allowedCPUs() ([]int, error)              { return nil, errNoBind }
func bindSelf(int, int) error                  { return errNoBind }
func startPinned(cmd *exec.Cmd, cpu int) error { return errNoBind }
