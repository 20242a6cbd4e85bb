//go:build !linux

package tcp

import (
	"errors"
	"fmt"
	"runtime"
)

// setCongestion: the congestion control is the system's here.
func setCongestion(uintptr, string) error { return errors.ErrUnsupported }

// checkCongestion refuses any name but the system's: this provider cannot
// set one on this system.
func checkCongestion(name string) error {
	if keepsSystem(name) {
		return nil
	}
	return fmt.Errorf("the congestion control of a socket cannot be set on %s", runtime.GOOS)
}

// systemCongestionName is "": nothing is set here.
func systemCongestionName() string { return "" }
