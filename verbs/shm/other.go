//go:build !linux

package shm

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/verbs"
)

// Device is a shared-memory device; on this platform there are none.
type Device struct{ verbs.Device }

// Open fails: the shm provider needs Linux (memfd, futex, abstract sockets).
func Open(ctx context.Context, o Options) (*Device, error) {
	return nil, &verbs.Error{Op: "Open", Provider: providerName, Index: -1,
		Err: fmt.Errorf("%w: the shm provider needs Linux", verbs.ErrUnavailable)}
}

func (provider) Open(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error) {
	return nil, &verbs.Error{Op: "Open", Provider: providerName, Index: -1,
		Err: fmt.Errorf("%w: the shm provider needs Linux", verbs.ErrUnavailable)}
}

// HostID fails on this platform.
func HostID() (string, error) {
	return "", fmt.Errorf("%w: the shm provider needs Linux", verbs.ErrUnavailable)
}
