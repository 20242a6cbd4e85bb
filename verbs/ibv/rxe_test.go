//go:build linux && cgo && rdma

package ibv_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/ibv"
)

// inVM reports whether the test runs inside rxe-vm, where a missing device
// is a failure, not a reason to skip.
func inVM() bool { return os.Getenv("RXE_VM") != "" }

// openDev opens the RDMA device the environment offers (rxe0 in the VM, the
// first device elsewhere), or skips when there is none outside the VM.
func openDev(t testing.TB) verbs.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d, err := verbs.Open(ctx, "ibv", verbs.DeviceOptions{Name: os.Getenv("RXE_VM_DEV")})
	if errors.Is(err, verbs.ErrUnavailable) && !inVM() {
		t.Skipf("no RDMA device here (%v); run inside rxe-vm", err)
	}
	require.NoError(t, err)
	t.Cleanup(func() {
		if err := d.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("device close: %v", err)
		}
	})
	return d
}

func TestDeviceSelection(t *testing.T) {
	d := openDev(t)
	info := d.(ibv.DeviceInfo)
	c := d.Caps()
	t.Logf("%s port %d %v gid %v caps %+v", d.Name(), info.Port(), info.LinkLayer(), info.GID(), c)
	assert.Equal(t, "ibv", d.Provider())
	assert.GreaterOrEqual(t, info.Port(), 1)
	assert.Positive(t, c.MaxQPWR)
	assert.Positive(t, c.MaxSGE)
	assert.Positive(t, c.MaxCQE)
	assert.Positive(t, c.MaxMsgSize)
	if want := os.Getenv("RXE_VM_GID_INDEX"); want != "" {
		// rxe-vm found the RoCE v2 GID of the VM's IPv4 address through
		// sysfs; our table query must agree.
		n, err := strconv.Atoi(want)
		require.NoError(t, err)
		assert.Equal(t, n, info.GID().Index, "auto-detected GID index")
		assert.Equal(t, ibv.GIDTypeRoCEv2, info.GID().Type)
		assert.Equal(t, ibv.LinkEthernet, info.LinkLayer())
	}

	ctx := context.Background()
	_, err := verbs.Open(ctx, "ibv", verbs.DeviceOptions{Name: "no-such-device0"})
	assert.ErrorIs(t, err, verbs.ErrUnavailable)
	assert.ErrorContains(t, err, "no-such-device0")
	_, err = ibv.Open(ctx, verbs.DeviceOptions{Name: d.Name()}, ibv.Options{GID: ibv.GIDIndex(4000)})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)
	assert.ErrorContains(t, err, "GID index 4000")
	_, err = ibv.Open(ctx, verbs.DeviceOptions{Name: d.Name() + ":9"}, ibv.Options{})
	assert.ErrorIs(t, err, verbs.ErrInvalidArgument)

	// Explicit selection of what auto found opens the same thing.
	d2, err := ibv.Open(ctx, verbs.DeviceOptions{Name: d.Name()}, ibv.Options{Port: info.Port(), GID: ibv.GIDIndex(info.GID().Index)})
	require.NoError(t, err)
	assert.Equal(t, info.GID(), d2.(ibv.DeviceInfo).GID())
	require.NoError(t, d2.Close())
}
