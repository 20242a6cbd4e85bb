package loop

import (
	"context"
	"encoding/binary"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

type side struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

func newSide(t *testing.T) *side {
	t.Helper()
	ctx := context.Background()
	dev, err := Open(ctx, Options{ConnectTimeout: 2 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	s := &side{dev: dev}
	s.pd, err = dev.AllocPD()
	require.NoError(t, err)
	s.cq, err = dev.CreateCQ(64)
	require.NoError(t, err)
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
	require.NoError(t, err)
	s.mr, err = s.pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic)
	require.NoError(t, err)
	return s
}

func connected(t *testing.T, o verbs.ConnectOptions) (*side, *side) {
	a, b := newSide(t), newSide(t)
	require.NoError(t, verbs.Connect(a.qp, b.qp.Address(), o))
	require.NoError(t, verbs.Connect(b.qp, a.qp.Address(), o))
	return a, b
}

func wait(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		require.NoError(t, cq.Wait(ctx))
	}
}

func TestSmoke(t *testing.T) {
	a, b := connected(t, verbs.DefaultConnectOptions())
	copy(a.mr.Bytes(), "hello")
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 5)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}))
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	assert.Equal(t, "hello", string(b.mr.Bytes()[100:105]))

	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 7}))
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWriteWithImm,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 5)}, RemoteAddr: b.mr.Addr() + 200, RKey: b.mr.RKey(), Imm: 0xdeadbeef}))
	wc = wait(t, b.cq)
	assert.Equal(t, verbs.WC{ID: 7, Opcode: verbs.WCRecvRDMAWithImm, ByteLen: 5, Imm: 0xdeadbeef, Flags: verbs.WCWithImm,
		QPNum: b.qp.Num(), SrcQP: a.qp.Num()}, wc)

	binary.NativeEndian.PutUint64(b.mr.Bytes()[8:], 40)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.OpAtomicFetchAdd, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 16, 8)}, RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 2}))
	wc = wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status, "%v", wc)
	assert.Equal(t, uint64(40), binary.NativeEndian.Uint64(a.mr.Bytes()[16:]))
	assert.Equal(t, uint64(42), binary.NativeEndian.Uint64(b.mr.Bytes()[8:]))

	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 1000, 5)}, RemoteAddr: b.mr.Addr() + 100, RKey: b.mr.RKey()}))
	wc = wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	assert.Equal(t, "hello", string(a.mr.Bytes()[1000:1005]))

	// Bad rkey: REM_ACCESS_ERR, both QPs in ERR, later work flushed.
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 5, Opcode: verbs.OpRDMAWrite,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 5)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() ^ 1}))
	wc = wait(t, a.cq)
	assert.Equal(t, verbs.StatusRemAccessErr, wc.Status)
	assert.Equal(t, verbs.QPErr, a.qp.State())
	assert.Equal(t, verbs.QPErr, b.qp.State())
}

func TestRegistryOpen(t *testing.T) {
	dev, err := verbs.Open(context.Background(), Name, verbs.DeviceOptions{})
	require.NoError(t, err)
	defer dev.Close()
	assert.Equal(t, Name, dev.Provider())
}

// TestConnectTimeout: a peer that never reaches RTR fails posted work with
// RETRY_EXC_ERR after ConnectTimeout.
func TestConnectTimeout(t *testing.T) {
	b := newSide(t)
	dev, err := Open(context.Background(), Options{ConnectTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(8)
	require.NoError(t, err)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, verbs.Connect(qp, b.qp.Address(), verbs.DefaultConnectOptions()))
	require.NoError(t, qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend}))
	wc := wait(t, cq)
	assert.Equal(t, verbs.StatusRetryExcErr, wc.Status)
}

// TestDeviceAddressGone: a QP address naming a closed device can never
// connect; posted work fails with RETRY_EXC_ERR.
func TestDeviceAddressGone(t *testing.T) {
	b := newSide(t)
	addr := b.qp.Address()
	require.NoError(t, b.dev.Close())
	dev, err := Open(context.Background(), Options{ConnectTimeout: 20 * time.Millisecond})
	require.NoError(t, err)
	defer dev.Close()
	pd, _ := dev.AllocPD()
	cq, _ := dev.CreateCQ(8)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
	require.NoError(t, err)
	require.NoError(t, verbs.Connect(qp, addr, verbs.DefaultConnectOptions()))
	require.NoError(t, qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend}))
	assert.Equal(t, verbs.StatusRetryExcErr, wait(t, cq).Status)
}
