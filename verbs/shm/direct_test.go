//go:build linux

package shm

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// MapRemote gives the peer's provider memory for plain loads and stores:
// a store through the mapping is in the peer's MR, and the peer's atomic
// store is seen by an atomic load here. Keys, bounds, access rights and
// the kind of memory are checked like a one-sided operation's.
func TestMapRemote(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	_, err := a.qp.MapRemote(b.mr.Addr(), b.mr.RKey(), 64, verbs.AccessRemoteRead)
	require.ErrorIs(t, err, verbs.ErrInvalidState, "before connecting")
	connectPair(t, a, b)

	m, err := a.qp.MapRemote(b.mr.Addr()+64, b.mr.RKey(), 128, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	require.Len(t, m, 128)
	copy(m, "through the mapping")
	require.Equal(t, "through the mapping", string(b.mr.Bytes()[64:64+19]))

	flag := (*uint64)(unsafe.Pointer(&b.mr.Bytes()[0]))
	atomic.StoreUint64(flag, 42)
	whole, err := a.qp.MapRemote(b.mr.Addr(), b.mr.RKey(), 8, verbs.AccessRemoteRead)
	require.NoError(t, err)
	require.Equal(t, uint64(42), atomic.LoadUint64((*uint64)(unsafe.Pointer(&whole[0]))))

	for _, c := range []struct {
		name string
		addr uint64
		rkey uint32
		n    int
		want error
	}{
		{"wrong rkey", b.mr.Addr(), b.mr.RKey() ^ 0x100, 8, verbs.ErrInvalidArgument},
		{"past the end", b.mr.Addr() + 64<<10 - 4, b.mr.RKey(), 8, verbs.ErrInvalidArgument},
		{"negative length", b.mr.Addr(), b.mr.RKey(), -1, verbs.ErrInvalidArgument},
		{"registered Go memory", b.umr.Addr(), b.umr.RKey(), 8, verbs.ErrUnsupported},
	} {
		_, err := a.qp.MapRemote(c.addr, c.rkey, c.n, verbs.AccessRemoteRead)
		require.ErrorIs(t, err, c.want, c.name)
	}
}

// ReadPeer and WritePeer reach another process's memory with
// process_vm_readv/writev; two devices of one process are linked directly,
// so they refuse (the collectives then use their slots), and before
// connecting they fail.
// (comm's TestSharedMemoryPeerLoss reads across processes.)
func TestReadPeerInProcess(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	require.ErrorIs(t, a.qp.ReadPeer(0, make([]byte, 8)), verbs.ErrInvalidState)
	require.ErrorIs(t, a.qp.WritePeer(0, make([]byte, 8)), verbs.ErrInvalidState)
	connectPair(t, a, b)
	if a.qp.UserMemPath() == UserMemCMA {
		t.Skip("the link uses CMA in-process")
	}
	require.ErrorIs(t, a.qp.ReadPeer(0, make([]byte, 8)), verbs.ErrUnsupported)
	require.ErrorIs(t, a.qp.WritePeer(0, make([]byte, 8)), verbs.ErrUnsupported)
}
