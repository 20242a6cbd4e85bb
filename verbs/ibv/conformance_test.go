//go:build linux && cgo && rdma

package ibv_test

import (
	"context"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/verbstest"
)

// rxeSkips are the suite cases whose expectations Linux 6.1's rdma_rxe (the
// rxe-vm kernel) does not meet, with what it does instead. Only applied
// on rxe devices.
var rxeSkips = map[string]string{
	"Errors/RecvTooSmall": "rdma_rxe on Linux 6.1 treats a SEND larger than the receive as a malformed WQE " +
		"(rxe_resp.c: copy_data fails with -EINVAL, not -ENOSPC): NAK remote-op-error, so the requester " +
		"completes with REM_OP_ERR and the responder with LOC_QP_OP_ERR, where IBTA hardware and later rxe " +
		"give REM_INV_REQ_ERR and LOC_LEN_ERR / REM_INV_REQ_ERR",
}

func TestConformance(t *testing.T) {
	var skip map[string]string
	large := 0
	if os.Getenv("RDMAGO_VERBSTEST_PEER") == "" {
		d := openDev(t) // skip (outside the VM) or fail early with the reason
		if strings.HasPrefix(d.Name(), "rxe") {
			skip = rxeSkips
		}
		// The large-message case uses 64 MiB unless the device's largest
		// message is smaller (rxe: 8 MiB); test at the device's limit then.
		if m := d.Caps().MaxMsgSize; m < 64<<20 {
			large = int(m)
		}
	}
	// RDMAGO_IBV_TEST_DEVICES="rxe1,rxe2" (rxe-vm --pair: two devices on
	// the two ends of a veth pair, like two hosts) makes successive Opens
	// alternate between the devices, so that the suite's cross-device pairs
	// really cross the wire.
	names := []string{os.Getenv("RXE_VM_DEV")}
	if l := os.Getenv("RDMAGO_IBV_TEST_DEVICES"); l != "" {
		names = strings.Split(l, ",")
	}
	var opened atomic.Int64
	verbstest.Run(t, verbstest.Options{
		Open: func(ctx context.Context) (verbs.Device, error) {
			name := names[int(opened.Add(1)-1)%len(names)]
			return verbs.Open(ctx, "ibv", verbs.DeviceOptions{Name: name})
		},
		TwoProcess: true,
		LargeSize:  large,
		Skip:       skip,
	})
}
