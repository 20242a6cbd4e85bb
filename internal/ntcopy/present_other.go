//go:build !linux

package ntcopy

import "errors"

// Present is not available off Linux.
func Present(b []byte) ([]bool, error) {
	return nil, errors.New("ntcopy.Present needs /proc/self/pagemap")
}
