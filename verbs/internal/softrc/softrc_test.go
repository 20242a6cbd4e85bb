package softrc_test

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
	"github.com/rdmago/rdmago/verbs/loop"
)

// The engine is tested through the loop provider, its thinnest transport.

const allRemote = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

type end struct {
	dev verbs.Device
	pd  verbs.PD
	scq verbs.CQ
	rcq verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

type cfg struct {
	mrAccess verbs.Access
	qpCap    verbs.QPCap
	sigAll   bool
}

func newEnd(t *testing.T, c cfg) *end {
	t.Helper()
	dev, err := loop.Open(context.Background(), loop.Options{ConnectTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	e := &end{dev: dev}
	e.pd, err = dev.AllocPD()
	require.NoError(t, err)
	e.scq, err = dev.CreateCQ(64)
	require.NoError(t, err)
	e.rcq, err = dev.CreateCQ(64)
	require.NoError(t, err)
	if c.qpCap.MaxSendWR == 0 {
		c.qpCap = verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}
	}
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: c.qpCap, SigAll: c.sigAll})
	require.NoError(t, err)
	if c.mrAccess == 0 {
		c.mrAccess = allRemote
	}
	e.mr, err = e.pd.AllocMR(4096, c.mrAccess)
	require.NoError(t, err)
	return e
}

func opts() verbs.ConnectOptions {
	o := verbs.DefaultConnectOptions()
	o.MinRNRTimer = 1
	return o
}

func pair(t *testing.T, ca, cb cfg, oa, ob verbs.ConnectOptions) (*end, *end) {
	a, b := newEnd(t, ca), newEnd(t, cb)
	require.NoError(t, verbs.Connect(a.qp, b.qp.Address(), oa))
	require.NoError(t, verbs.Connect(b.qp, a.qp.Address(), ob))
	return a, b
}

func wait(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0]
		}
		require.NoError(t, cq.Wait(ctx))
	}
}

func requireEmpty(t *testing.T, cq verbs.CQ) {
	t.Helper()
	var wc [1]verbs.WC
	require.Zero(t, cq.Poll(wc[:]), "unexpected completion %+v", wc[0])
}

// TestResponderChecks: every responder check and the status each side sees.
func TestResponderChecks(t *testing.T) {
	type tc struct {
		name     string
		qpAccess verbs.Access // the responder QP's inbound access flags
		mrAccess verbs.Access // the target region's access
		destRd   uint8        // responder's max_dest_rd_atomic
		op       verbs.Opcode
		rkey     func(b *end) uint32
		addr     func(b *end) uint64
		length   int
		recv     *verbs.RecvWR // posted at the responder first
		want     verbs.Status  // requester
		wantRecv verbs.Status  // responder's receive completion, when recv is set
		respErr  bool          // the responder QP ends in ERR
	}
	rk := func(b *end) uint32 { return b.mr.RKey() }
	base := func(b *end) uint64 { return b.mr.Addr() }
	small := &verbs.RecvWR{ID: 77}
	for _, c := range []tc{
		{name: "write ok", op: verbs.OpRDMAWrite, rkey: rk, addr: base, length: 64, want: verbs.StatusSuccess},
		{name: "write qp lacks RemoteWrite", qpAccess: verbs.AccessRemoteRead, op: verbs.OpRDMAWrite, rkey: rk, addr: base, length: 64, want: verbs.StatusRemInvReqErr, respErr: true},
		{name: "read qp lacks RemoteRead", qpAccess: verbs.AccessRemoteWrite, op: verbs.OpRDMARead, rkey: rk, addr: base, length: 64, want: verbs.StatusRemInvReqErr, respErr: true},
		{name: "atomic qp lacks RemoteAtomic", qpAccess: verbs.AccessRemoteWrite | verbs.AccessRemoteRead, op: verbs.OpAtomicFetchAdd, rkey: rk, addr: base, length: 8, want: verbs.StatusRemInvReqErr, respErr: true},
		{name: "read with max_dest_rd_atomic 0", destRd: 0, op: verbs.OpRDMARead, rkey: rk, addr: base, length: 64, want: verbs.StatusRemInvReqErr, respErr: true},
		{name: "bad rkey", op: verbs.OpRDMAWrite, rkey: func(b *end) uint32 { return b.mr.RKey() + 1 }, addr: base, length: 64, want: verbs.StatusRemAccessErr, respErr: true},
		{name: "below region", op: verbs.OpRDMAWrite, rkey: rk, addr: func(b *end) uint64 { return b.mr.Addr() - 8 }, length: 64, want: verbs.StatusRemAccessErr, respErr: true},
		{name: "past region end", op: verbs.OpRDMARead, rkey: rk, addr: func(b *end) uint64 { return b.mr.Addr() + 4096 - 32 }, length: 64, want: verbs.StatusRemAccessErr, respErr: true},
		{name: "region lacks RemoteWrite", mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteRead, op: verbs.OpRDMAWrite, rkey: rk, addr: base, length: 64, want: verbs.StatusRemAccessErr, respErr: true},
		{name: "region lacks RemoteRead", mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteWrite, op: verbs.OpRDMARead, rkey: rk, addr: base, length: 64, want: verbs.StatusRemAccessErr, respErr: true},
		{name: "region lacks RemoteAtomic", mrAccess: verbs.AccessLocalWrite | verbs.AccessRemoteWrite, op: verbs.OpAtomicCmpAndSwp, rkey: rk, addr: base, length: 8, want: verbs.StatusRemAccessErr, respErr: true},
		{name: "zero-length write checks no rkey", op: verbs.OpRDMAWrite, rkey: func(*end) uint32 { return 12345 }, addr: base, length: 0, want: verbs.StatusSuccess},
		{name: "zero-length read checks no rkey", op: verbs.OpRDMARead, rkey: func(*end) uint32 { return 12345 }, addr: base, length: 0, want: verbs.StatusSuccess},
		{name: "write imm bad rkey", op: verbs.OpRDMAWriteWithImm, rkey: func(b *end) uint32 { return b.mr.RKey() ^ 0xff }, addr: base, length: 8, recv: small, want: verbs.StatusRemAccessErr, wantRecv: verbs.StatusLocAccessErr, respErr: true},
		{name: "send into small recv", op: verbs.OpSend, length: 64, recv: &verbs.RecvWR{ID: 78}, want: verbs.StatusRemInvReqErr, wantRecv: verbs.StatusLocLenErr, respErr: true},
		{name: "send ok", op: verbs.OpSend, length: 0, recv: &verbs.RecvWR{ID: 79}, want: verbs.StatusSuccess, wantRecv: verbs.StatusSuccess},
	} {
		t.Run(c.name, func(t *testing.T) {
			ob := opts()
			if c.qpAccess != 0 {
				ob.Access = c.qpAccess
			}
			ob.MaxDestRdAtomic = c.destRd
			if c.destRd == 0 && c.name != "read with max_dest_rd_atomic 0" {
				ob.MaxDestRdAtomic = 1
			}
			a, b := pair(t, cfg{}, cfg{mrAccess: c.mrAccess}, opts(), ob)
			if c.recv != nil {
				require.NoError(t, b.qp.PostRecv(*c.recv))
			}
			wr := verbs.SendWR{ID: 1, Opcode: c.op, Flags: verbs.SendSignaled}
			if c.length > 0 {
				wr.SGL = []verbs.SGE{verbs.SGEOf(a.mr, 0, c.length)}
			}
			if c.rkey != nil {
				wr.RKey, wr.RemoteAddr = c.rkey(b), c.addr(b)
			}
			require.NoError(t, a.qp.PostSend(wr, verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
			wc := wait(t, a.scq)
			require.Equal(t, uint64(1), wc.ID)
			require.Equal(t, c.want, wc.Status, "requester status")
			if c.want != verbs.StatusSuccess {
				// The unsignaled request behind the failure is flushed, with a completion.
				wc = wait(t, a.scq)
				assert.Equal(t, verbs.WC{ID: 2, Status: verbs.StatusWRFlushErr, QPNum: a.qp.Num()}, wc)
				assert.Equal(t, verbs.QPErr, a.qp.State())
			}
			if c.recv != nil {
				rwc := wait(t, b.rcq)
				assert.Equal(t, c.recv.ID, rwc.ID)
				assert.Equal(t, c.wantRecv, rwc.Status, "responder receive status")
			}
			if c.respErr {
				assert.Equal(t, verbs.QPErr, b.qp.State(), "responder QP")
			} else {
				assert.Equal(t, verbs.QPRTS, b.qp.State(), "responder QP")
			}
		})
	}
}

func TestPostTimeErrors(t *testing.T) {
	e := newEnd(t, cfg{qpCap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 16}})
	other := newEnd(t, cfg{})
	ro, err := e.pd.AllocMR(64, verbs.AccessRemoteRead)
	require.NoError(t, err)
	w := verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8)}}
	// Wrong state first.
	err = e.qp.PostSend(w)
	require.ErrorIs(t, err, verbs.ErrInvalidState)
	require.ErrorIs(t, e.qp.PostRecv(verbs.RecvWR{}), verbs.ErrInvalidState)
	peer := newEnd(t, cfg{})
	require.NoError(t, verbs.Connect(e.qp, peer.qp.Address(), opts()))
	require.NoError(t, verbs.Connect(peer.qp, e.qp.Address(), opts()))
	w.RemoteAddr, w.RKey = peer.mr.Addr(), peer.mr.RKey()

	for _, c := range []struct {
		name string
		wr   verbs.SendWR
		want error
	}{
		{"lkey of another PD", verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(other.mr, 0, 8)}}, verbs.ErrBadKey},
		{"unknown lkey", verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{{Addr: e.mr.Addr(), Length: 8, LKey: e.mr.LKey() + 1}}}, verbs.ErrBadKey},
		{"past region", verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 4090, 8)}}, verbs.ErrBadKey},
		{"read into region without LocalWrite", verbs.SendWR{Opcode: verbs.OpRDMARead, SGL: []verbs.SGE{verbs.SGEOf(ro, 0, 8)}}, verbs.ErrBadKey},
		{"too many SGEs", verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8), verbs.SGEOf(e.mr, 8, 8)}}, verbs.ErrInvalidArgument},
		{"inline too long", verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendInline, Inline: make([]byte, 17)}, verbs.ErrInvalidArgument},
		{"misaligned atomic", verbs.SendWR{Opcode: verbs.OpAtomicFetchAdd, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8)}, RemoteAddr: 3}, verbs.ErrInvalidArgument},
	} {
		err := e.qp.PostSend(w, c.wr, w)
		require.ErrorIs(t, err, c.want, c.name)
		var ve *verbs.Error
		require.True(t, errors.As(err, &ve), c.name)
		assert.Equal(t, 1, ve.Index, c.name)
		// The first request went out; collect it so slots stay free.
		w2 := w
		w2.Flags = verbs.SendSignaled
		require.NoError(t, e.qp.PostSend(w2))
		wait(t, e.scq)
	}
	// Unsignaled requests hold their slots until a signaled completion.
	require.NoError(t, e.qp.PostSend(w, w, w, w))
	err = e.qp.PostSend(w)
	require.ErrorIs(t, err, verbs.ErrQueueFull)
	require.ErrorIs(t, e.qp.PostRecv(verbs.RecvWR{}, verbs.RecvWR{}, verbs.RecvWR{}), verbs.ErrQueueFull)
}

func TestUnsignaledRetiredBySignaled(t *testing.T) {
	a, _ := pair(t, cfg{qpCap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}, cfg{}, opts(), opts())
	peerWR := func(sig bool) verbs.SendWR {
		w := verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 0)}}
		if sig {
			w.Flags = verbs.SendSignaled
		}
		return w
	}
	for range 3 {
		require.NoError(t, a.qp.PostSend(peerWR(false), peerWR(false), peerWR(false), peerWR(true)))
		wc := wait(t, a.scq)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		requireEmpty(t, a.scq)
	}
}

func TestSigAll(t *testing.T) {
	a, b := pair(t, cfg{sigAll: true}, cfg{}, opts(), opts())
	w := verbs.SendWR{ID: 5, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	require.NoError(t, a.qp.PostSend(w))
	wc := wait(t, a.scq)
	assert.Equal(t, verbs.WC{ID: 5, Opcode: verbs.WCRDMAWrite, ByteLen: 8, QPNum: a.qp.Num()}, wc)
}

// TestFlushOnErr: Modify to ERR flushes stalled sends and posted receives, in
// posting order; later posts are flushed too.
func TestFlushOnErr(t *testing.T) {
	a, _ := pair(t, cfg{}, cfg{}, opts(), opts())
	send := verbs.SendWR{Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}}
	for i := range 3 {
		send.ID = uint64(i + 1)
		require.NoError(t, a.qp.PostSend(send)) // stalls on RNR, rnr_retry 7
	}
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 10}, verbs.RecvWR{ID: 11}))
	require.NoError(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState))
	for i := range 3 {
		assert.Equal(t, verbs.WC{ID: uint64(i + 1), Status: verbs.StatusWRFlushErr, QPNum: a.qp.Num()}, wait(t, a.scq))
	}
	assert.Equal(t, uint64(10), wait(t, a.rcq).ID)
	assert.Equal(t, uint64(11), wait(t, a.rcq).ID)
	send.ID = 4
	require.NoError(t, a.qp.PostSend(send))
	assert.Equal(t, verbs.StatusWRFlushErr, wait(t, a.scq).Status)
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 12}))
	assert.Equal(t, verbs.StatusWRFlushErr, wait(t, a.rcq).Status)
	// RESET empties everything without completions, and the QP can start over.
	require.NoError(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPReset}, verbs.AttrState))
	require.Equal(t, verbs.QPReset, a.qp.State())
}

// TestRegionClosedAfterPost: a request whose local region is deregistered
// before it executes completes with LOC_PROT_ERR, and the memory stays valid
// until the engine lets go of it.
func TestRegionClosedAfterPost(t *testing.T) {
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	mr, err := a.pd.AllocMR(1<<20, verbs.AccessLocalWrite)
	require.NoError(t, err)
	// Stall a SEND on RNR so the WRITE behind it waits.
	require.NoError(t, a.qp.PostSend(
		verbs.SendWR{ID: 1, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}},
		verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(mr, 0, 1<<20)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	require.NoError(t, mr.Close())
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 8)}}))
	wc := wait(t, a.scq)
	require.Equal(t, uint64(2), wc.ID)
	require.Equal(t, verbs.StatusLocProtErr, wc.Status)
}

func TestKeysRandomAndUnique(t *testing.T) {
	e := newEnd(t, cfg{})
	seen := map[uint32]bool{}
	var prev uint32
	sequential := 0
	for range 200 {
		mr, err := e.pd.AllocMR(64, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		require.NoError(t, err)
		require.NotZero(t, mr.RKey())
		require.False(t, seen[mr.RKey()], "rkey %#x reused", mr.RKey())
		seen[mr.RKey()] = true
		if mr.RKey() == prev+1 {
			sequential++
		}
		prev = mr.RKey()
	}
	assert.Less(t, sequential, 3, "rkeys look sequential")
}

// TestUserMemoryAtomics: atomics work on caller memory registered with RegMR.
func TestUserMemoryAtomics(t *testing.T) {
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	assert.True(t, b.dev.Caps().UserMemAtomics)
	buf := make([]byte, 64)
	umr, err := b.pd.RegMR(buf, allRemote)
	require.NoError(t, err)
	assert.Equal(t, verbs.MemUser, umr.Kind())
	assert.True(t, umr.SupportsAtomics())
	off := (8 - int(umr.Addr()%8)) % 8
	binary.NativeEndian.PutUint64(buf[off:], 5)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpAtomicCmpAndSwp, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: umr.Addr() + uint64(off), RKey: umr.RKey(), CompareAdd: 5, Swap: 9}))
	require.Equal(t, verbs.StatusSuccess, wait(t, a.scq).Status)
	assert.Equal(t, uint64(5), binary.NativeEndian.Uint64(a.mr.Bytes()))
	assert.Equal(t, uint64(9), binary.NativeEndian.Uint64(buf[off:]))
	require.NoError(t, umr.Close())
}

func TestCloseSemantics(t *testing.T) {
	e := newEnd(t, cfg{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	waitErr := make(chan error, 1)
	go func() { waitErr <- e.rcq.Wait(ctx) }()
	require.ErrorIs(t, e.pd.Close(), verbs.ErrInUse)
	require.NoError(t, e.dev.Close())
	require.ErrorIs(t, <-waitErr, verbs.ErrClosed)
	require.ErrorIs(t, e.qp.Close(), verbs.ErrClosed)
	require.ErrorIs(t, e.dev.Close(), verbs.ErrClosed)
	_, err := e.dev.AllocPD()
	require.ErrorIs(t, err, verbs.ErrClosed)
}

func TestModifyFailureChangesNothing(t *testing.T) {
	e := newEnd(t, cfg{})
	require.NoError(t, e.qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: allRemote &^ verbs.AccessLocalWrite},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPRTR, Remote: []byte("garbage"), PathMTU: verbs.MTU1024},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	require.ErrorIs(t, err, verbs.ErrInvalidArgument)
	require.Equal(t, verbs.QPInit, e.qp.State())
	// Skipping RTR is refused.
	err = e.qp.Modify(&verbs.QPAttr{State: verbs.QPRTS}, verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	require.ErrorIs(t, err, verbs.ErrInvalidState)
	require.Equal(t, verbs.QPInit, e.qp.State())
}

// TestHoldPostsBatchesKicks: sends posted while their QP's posts are held
// (verbs.PostBatcher) reach the transport only at the last ReleasePosts,
// together (one kick owed per post until then); nested holds count, and
// the sends then complete as usual.
func TestHoldPostsBatchesKicks(t *testing.T) {
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	for i := range 4 {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(100 + i), SGL: []verbs.SGE{verbs.SGEOf(b.mr, i*8, 8)}}))
	}
	pb, ok := a.qp.(verbs.PostBatcher)
	require.True(t, ok, "the engine's QPs hold posts")
	pb.HoldPosts()
	pb.HoldPosts()
	for i := range 3 {
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.OpSend, Flags: verbs.SendInline | verbs.SendSignaled,
			Inline: []byte{byte(i), 1, 2, 3, 4, 5, 6, 7}}))
	}
	require.Equal(t, 3, softrc.OwedKicks(a.qp), "held posts kicked the link")
	pb.ReleasePosts()
	require.Equal(t, 3, softrc.OwedKicks(a.qp), "an inner release let held posts go")
	pb.ReleasePosts()
	require.Zero(t, softrc.OwedKicks(a.qp), "the last release kept posts back")
	for i := range 3 {
		wc := wait(t, a.scq)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint64(i), wc.ID)
		wc = wait(t, b.rcq)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint64(100+i), wc.ID)
		require.Equal(t, byte(i), b.mr.Bytes()[i*8])
	}
	// Without a hold, a post kicks at once.
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.OpSend, Flags: verbs.SendInline | verbs.SendSignaled, Inline: []byte{9}}))
	require.Zero(t, softrc.OwedKicks(a.qp))
	require.Equal(t, uint64(103), wait(t, b.rcq).ID)
}

// A request whose lent tail is gone (written, then wanted again after an
// RNR: verbs.LentPairPoster) completes with LOC_LEN_ERR when its turn to
// be sent comes, rather than sending what the caller's buffer holds now.
// A link that cannot write in the posting goroutine (loop's) refuses lent
// pairs: nothing is posted.
func TestLentPairGone(t *testing.T) {
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	lp, ok := a.qp.(verbs.LentPairPoster)
	require.True(t, ok)
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 64)}}))
	wr := verbs.SendWR{ID: 7, Opcode: verbs.OpSend, Flags: verbs.SendInline | verbs.SendSignaled, Inline: []byte("hd")}
	posted, err := lp.PostSendLentPair(wr, []byte("tail"))
	require.NoError(t, err)
	require.False(t, posted, "loop's link does not write in the posting goroutine")

	q := a.qp.(*softrc.QP)
	q.HoldPosts()
	require.NoError(t, q.PostLentPair(wr, []byte("tail")))
	q.ForgetLentTails()
	q.ReleasePosts()
	assert.Equal(t, verbs.StatusLocLenErr, wait(t, a.scq).Status)
	requireEmpty(t, b.rcq)
}

// TestWriteAfterTargetRegionClosed: the responder remembers the region the
// last WRITE named; once that region is deregistered, the next WRITE with
// its rkey must fail with a remote access error, not land in the old
// memory.
func TestWriteAfterTargetRegionClosed(t *testing.T) {
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	mem := make([]byte, 64) // user memory: readable after the region's Close
	target, err := b.pd.RegMR(mem, allRemote)
	require.NoError(t, err)
	write := func(id uint64) verbs.WC {
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: target.Addr(), RKey: target.RKey()}))
		return wait(t, a.scq)
	}
	copy(a.mr.Bytes()[:8], "abcdefgh")
	require.Equal(t, verbs.StatusSuccess, write(1).Status)
	require.Equal(t, "abcdefgh", string(mem[:8]))
	require.NoError(t, target.Close())
	copy(a.mr.Bytes()[:8], "ijklmnop")
	wc := write(2)
	require.Equal(t, verbs.StatusRemAccessErr, wc.Status)
	assert.Equal(t, "abcdefgh", string(mem[:8]), "a WRITE landed in a deregistered region")
	assert.Equal(t, verbs.QPErr, b.qp.State(), "responder QP")
}
