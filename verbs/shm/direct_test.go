//go:build linux

package shm

import (
	"os/exec"
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

// A CMA copy from a peer process that no longer exists (ESRCH) is the
// peer gone: the same RETRY_EXC_ERR a work request to it completes with,
// never ErrUnsupported, and the link is dead from then on. The link's pid
// is pointed at a process that has exited.
func TestReadPeerGone(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	connectPair(t, a, b)
	gone := exec.Command("true")
	require.NoError(t, gone.Run())
	l := a.qp.lnk.Load()
	l.path, l.pid = UserMemCMA, gone.Process.Pid
	for _, write := range []bool{false, true} {
		var err error
		if write {
			err = a.qp.WritePeer(0x1000, make([]byte, 8))
		} else {
			err = a.qp.ReadPeer(0x1000, make([]byte, 8))
		}
		require.ErrorIs(t, err, verbs.StatusRetryExcErr, "write %v", write)
		require.NotErrorIs(t, err, verbs.ErrUnsupported, "write %v", write)
		require.True(t, l.dead.Load(), "the link is dead after ESRCH")
	}
}
