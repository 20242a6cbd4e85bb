//go:build linux && cgo && rdma

package ibv_test

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/stacks"
	"github.com/rdmago/rdmago/verbs"
)

type pair struct {
	dev      verbs.Device
	pd       verbs.PD
	cqA, cqB verbs.CQ
	a, b     verbs.QP
	mrA, mrB verbs.MR
}

// newPair connects two queue pairs on one device (rxe loops the traffic
// back through its own RoCE stack), each with its own CQ and a 64 KiB
// provider-memory region.
func newPair(t testing.TB, capA verbs.QPCap) *pair {
	t.Helper()
	p := &pair{dev: openDev(t)}
	var err error
	p.pd, err = p.dev.AllocPD()
	require.NoError(t, err)
	p.cqA, err = p.dev.CreateCQ(1024)
	require.NoError(t, err)
	p.cqB, err = p.dev.CreateCQ(1024)
	require.NoError(t, err)
	acc := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	p.mrA, err = p.pd.AllocMR(64<<10, acc)
	require.NoError(t, err)
	p.mrB, err = p.pd.AllocMR(64<<10, acc)
	require.NoError(t, err)
	p.a, err = p.pd.CreateQP(verbs.QPInitAttr{SendCQ: p.cqA, RecvCQ: p.cqA, Cap: capA})
	require.NoError(t, err)
	p.b, err = p.pd.CreateQP(verbs.QPInitAttr{SendCQ: p.cqB, RecvCQ: p.cqB, Cap: capA})
	require.NoError(t, err)
	o := verbs.DefaultConnectOptions()
	o.Timeout, o.RetryCnt = 12, 3
	require.NoError(t, verbs.Connect(p.a, p.b.Address(), o))
	require.NoError(t, verbs.Connect(p.b, p.a.Address(), o))
	return p
}

func defaultCap() verbs.QPCap {
	return verbs.QPCap{MaxSendWR: 128, MaxRecvWR: 128, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}
}

// collect waits for n completions on cq.
func collect(t testing.TB, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out []verbs.WC
	buf := make([]verbs.WC, 16)
	for len(out) < n {
		require.NoError(t, cq.Wait(ctx), "waiting for completion %d of %d", len(out)+1, n)
		k := cq.Poll(buf)
		out = append(out, buf[:k]...)
	}
	return out
}

func TestSendRecvImmBatches(t *testing.T) {
	p := newPair(t, defaultCap())
	// 100 receives in one call: several cgo batches.
	recvs := make([]verbs.RecvWR, 100)
	for i := range recvs {
		recvs[i] = verbs.RecvWR{ID: uint64(1000 + i), SGL: []verbs.SGE{verbs.SGEOf(p.mrB, i*64, 64)}}
	}
	require.NoError(t, p.b.PostRecv(recvs...))
	sends := make([]verbs.SendWR, 100)
	for i := range sends {
		copy(p.mrA.Bytes()[i*64:], bytes.Repeat([]byte{byte(i)}, 32))
		sends[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSendWithImm, Flags: verbs.SendSignaled,
			Imm: 0xdeadbe00 + uint32(i), SGL: []verbs.SGE{verbs.SGEOf(p.mrA, i*64, 32)}}
	}
	require.NoError(t, p.a.PostSend(sends...))
	for i, wc := range collect(t, p.cqA, 100) {
		require.NoError(t, wc.Err())
		assert.Equal(t, uint64(i), wc.ID)
		assert.Equal(t, verbs.WCSend, wc.Opcode)
	}
	for i, wc := range collect(t, p.cqB, 100) {
		require.NoError(t, wc.Err())
		assert.Equal(t, uint64(1000+i), wc.ID)
		assert.Equal(t, verbs.WCRecv, wc.Opcode)
		assert.Equal(t, uint32(32), wc.ByteLen)
		assert.Equal(t, verbs.WCWithImm, wc.Flags&verbs.WCWithImm)
		assert.Equal(t, 0xdeadbe00+uint32(i), wc.Imm)
		assert.Equal(t, p.b.Num(), wc.QPNum)
		assert.Equal(t, bytes.Repeat([]byte{byte(i)}, 32), p.mrB.Bytes()[i*64:i*64+32])
	}
}

func TestInlineAndGoMemory(t *testing.T) {
	p := newPair(t, defaultCap())
	goBuf := make([]byte, 4096)
	gmr, err := p.pd.RegMR(goBuf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	assert.Equal(t, verbs.MemUser, gmr.Kind())
	// Inline write into Go memory registered on the other side.
	msg := []byte("inline into pinned Go memory")
	require.NoError(t, p.a.PostSend(verbs.SendWR{ID: 7, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
		Inline: msg, RemoteAddr: gmr.Addr() + 100, RKey: gmr.RKey()}))
	wc := collect(t, p.cqA, 1)[0]
	require.NoError(t, wc.Err())
	assert.Equal(t, verbs.WCRDMAWrite, wc.Opcode)
	assert.Equal(t, msg, goBuf[100:100+len(msg)])
	// The region stays valid while the collector runs: garbage around it,
	// collections, and the only reference to the slice being the MR's.
	for i := range 5 {
		_ = make([]byte, 1<<20)
		runtime.GC()
		copy(p.mrA.Bytes(), bytes.Repeat([]byte{byte(i)}, 512))
		require.NoError(t, p.a.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, 512)}, RemoteAddr: gmr.Addr() + 1024, RKey: gmr.RKey()}))
		require.NoError(t, collect(t, p.cqA, 1)[0].Err())
		assert.Equal(t, bytes.Repeat([]byte{byte(i)}, 512), gmr.Bytes()[1024:1536])
	}
	// Read it back into provider memory.
	require.NoError(t, p.a.PostSend(verbs.SendWR{ID: 8, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, len(msg))}, RemoteAddr: gmr.Addr() + 100, RKey: gmr.RKey()}))
	wc = collect(t, p.cqA, 1)[0]
	require.NoError(t, wc.Err())
	assert.Equal(t, verbs.WCRDMARead, wc.Opcode)
	assert.Equal(t, msg, p.mrA.Bytes()[:len(msg)])
	require.NoError(t, gmr.Close())
	assert.ErrorIs(t, gmr.Close(), verbs.ErrClosed)
}

func TestPostTimeErrors(t *testing.T) {
	p := newPair(t, defaultCap())
	good := verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, 8)},
		RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey(), Flags: verbs.SendSignaled}
	bad := good
	bad.SGL = []verbs.SGE{{Addr: p.mrA.Addr(), Length: 8, LKey: p.mrA.LKey() ^ 0x5a5a00}}
	err := p.a.PostSend(good, bad, good)
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, 1, ve.Index)
	assert.ErrorIs(t, err, verbs.ErrBadKey)
	outside := good
	outside.SGL = []verbs.SGE{verbs.SGEOf(p.mrA, 64<<10-4, 8)}
	assert.ErrorIs(t, p.a.PostSend(outside), verbs.ErrBadKey)
	collect(t, p.cqA, 1) // the first good one was posted
}

func TestCloseFlushes(t *testing.T) {
	p := newPair(t, defaultCap())
	for i := range 5 {
		require.NoError(t, p.b.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{verbs.SGEOf(p.mrB, 0, 64)}}))
	}
	require.NoError(t, p.b.Close())
	wcs := collect(t, p.cqB, 5)
	for i, wc := range wcs {
		assert.Equal(t, uint64(i), wc.ID)
		assert.Equal(t, verbs.StatusWRFlushErr, wc.Status)
		assert.Equal(t, verbs.WCRecv, wc.Opcode)
	}
	assert.Zero(t, p.cqB.Poll(make([]verbs.WC, 4)), "no completion beyond the flushed ones")
	// The peer is gone: a's send fails with RETRY_EXC_ERR, then later work flushes.
	require.NoError(t, p.a.PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, 8)}},
		verbs.SendWR{ID: 2, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, 8)}, Flags: verbs.SendSignaled}))
	wcs = collect(t, p.cqA, 2)
	assert.Equal(t, verbs.StatusRetryExcErr, wcs[0].Status)
	assert.Equal(t, uint64(1), wcs[0].ID, "an error completes an unsignaled request too")
	assert.Equal(t, verbs.StatusWRFlushErr, wcs[1].Status)
	assert.Equal(t, verbs.QPErr, p.a.State())
}

func TestWaitCancel(t *testing.T) {
	p := newPair(t, defaultCap())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	assert.ErrorIs(t, p.cqA.Wait(ctx), context.DeadlineExceeded)
	// A waiter parked in the poller is woken by a completion.
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		done <- p.cqB.Wait(ctx)
	}()
	awaitParked(t, "TestWaitCancel")
	require.NoError(t, p.b.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(p.mrB, 0, 64)}}))
	require.NoError(t, p.a.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, 8)}}))
	require.NoError(t, <-done)
	// Close wakes a waiter with ErrClosed.
	cq, err := p.dev.CreateCQ(4)
	require.NoError(t, err)
	go func() { done <- cq.Wait(context.Background()) }()
	awaitParked(t, "TestWaitCancel")
	require.NoError(t, cq.Close())
	assert.ErrorIs(t, <-done, verbs.ErrClosed)
}

// awaitParked waits until one goroutine started by the test named test is
// parked in a CQ's Wait (blocked in its select, not still arming the CQ),
// so that what the test does next finds a sleeping waiter.
func awaitParked(t *testing.T, test string) {
	t.Helper()
	require.Eventually(t, func() bool {
		parked := 0
		for _, g := range stacks.All() {
			if strings.Contains(g.Stack, test) && strings.Contains(g.Stack, "ibv.(*cq).Wait") && g.State == "select" {
				parked++
			}
		}
		return parked == 1
	}, 10*time.Second, time.Millisecond, "no CQ waiter parked")
}

func TestCQOverrun(t *testing.T) {
	p := newPair(t, defaultCap())
	small, err := p.dev.CreateCQ(4)
	require.NoError(t, err)
	qp, err := p.pd.CreateQP(verbs.QPInitAttr{SendCQ: small, RecvCQ: small, Cap: defaultCap()})
	require.NoError(t, err)
	peer, err := p.pd.CreateQP(verbs.QPInitAttr{SendCQ: p.cqB, RecvCQ: p.cqB, Cap: defaultCap()})
	require.NoError(t, err)
	o := verbs.DefaultConnectOptions()
	require.NoError(t, verbs.Connect(qp, peer.Address(), o))
	require.NoError(t, verbs.Connect(peer, qp.Address(), o))
	// Far more signaled completions than the CQ holds, none polled: the
	// device reports CQ_ERR and Wait says so instead of sleeping.
	for i := range 64 {
		require.NoError(t, qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(p.mrA, 0, 8)}, RemoteAddr: p.mrB.Addr(), RKey: p.mrB.RKey()}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Wait returns at once while polled-out completions are buffered; poll
	// it until the device's CQ_ERR event has come.
	var werr error
	require.Eventually(t, func() bool { werr = small.Wait(ctx); return werr != nil }, 20*time.Second, 20*time.Millisecond,
		"the overrun was never reported")
	require.ErrorIs(t, werr, verbs.ErrQueueFull)
	assert.ErrorContains(t, werr, "overrun")
	require.NoError(t, qp.Close())
	require.NoError(t, peer.Close())
	require.NoError(t, small.Close())
}
