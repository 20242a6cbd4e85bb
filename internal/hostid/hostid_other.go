//go:build !linux

package hostid

import "fmt"

func kernel() (string, error) {
	return "", fmt.Errorf("%w: only Linux exposes a boot id", ErrUnavailable)
}

func identity() (string, error) {
	return "", fmt.Errorf("%w: only Linux exposes a boot id and network namespace", ErrUnavailable)
}
