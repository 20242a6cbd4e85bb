//go:build !(linux && cgo && rdma)

package ibv

import (
	"context"
	"fmt"

	"github.com/rdmago/rdmago/verbs"
)

// Available reports whether this build has the real provider (the rdma
// build tag on linux with cgo). Devices may still be absent.
const Available = false

func open(context.Context, selector, verbs.DeviceOptions) (verbs.Device, error) {
	return nil, errorf("Open", 0, fmt.Errorf("%w: built without the rdma build tag (go build -tags rdma, on linux with cgo and libibverbs-dev)", verbs.ErrUnavailable))
}

func errorf(op string, qpn uint32, err error) *verbs.Error {
	return &verbs.Error{Op: op, Provider: ProviderName, QPNum: qpn, Index: -1, Err: err}
}
