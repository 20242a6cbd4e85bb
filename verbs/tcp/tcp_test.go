package tcp

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

type side struct {
	dev verbs.Device
	pd  verbs.PD
	cq  verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

func testOptions() Options {
	o := Options{Token: []byte("secret"), ConnectTimeout: 5 * time.Second, DialRetry: time.Millisecond}
	if testing.Verbose() {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

func openDev(t *testing.T, o Options) verbs.Device {
	t.Helper()
	dev, err := Open(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	return dev
}

func newSideOn(t *testing.T, dev verbs.Device) *side {
	t.Helper()
	s := &side{dev: dev}
	var err error
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

func newSide(t *testing.T) *side { return newSideOn(t, openDev(t, testOptions())) }

func connectPair(t *testing.T, a, b *side, o verbs.ConnectOptions) {
	t.Helper()
	require.NoError(t, verbs.Connect(a.qp, b.qp.Address(), o))
	require.NoError(t, verbs.Connect(b.qp, a.qp.Address(), o))
}

func connected(t *testing.T, o verbs.ConnectOptions) (*side, *side) {
	a, b := newSide(t), newSide(t)
	connectPair(t, a, b, o)
	return a, b
}

func shortConnect() verbs.ConnectOptions {
	o := verbs.DefaultConnectOptions()
	o.Timeout = 10 // ~4 ms
	o.RetryCnt = 2
	o.MinRNRTimer = 1
	return o
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
		require.NoError(t, cq.Wait(ctx), "waiting for a completion")
	}
}

func writeWR(id uint64, from, to *side, n int) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(from.mr, 0, n)}, RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}
}

func sendWR(id uint64, from *side) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(from.mr, 0, 8)}}
}

// requireWorks checks that a and b, connected, move data both ways.
func requireWorks(t *testing.T, a, b *side) {
	t.Helper()
	copy(a.mr.Bytes(), "ping")
	require.NoError(t, a.qp.PostSend(writeWR(1, a, b, 4)))
	require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
	require.Equal(t, "ping", string(b.mr.Bytes()[:4]))
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 100, 8)}}))
	require.NoError(t, b.qp.PostSend(sendWR(2, b)))
	require.Equal(t, verbs.StatusSuccess, wait(t, b.cq).Status)
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint64(9), wc.ID)
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
}

func TestRegistryOpen(t *testing.T) {
	dev, err := verbs.Open(context.Background(), Name, verbs.DeviceOptions{Token: []byte("x"), Listen: "127.0.0.1:0", Advertise: "localhost"})
	require.NoError(t, err)
	defer dev.Close()
	assert.Equal(t, Name, dev.Provider())
	assert.Contains(t, dev.Name(), "localhost:")
}

func TestBadListen(t *testing.T) {
	_, err := Open(context.Background(), Options{Listen: "256.0.0.1:0"})
	require.ErrorIs(t, err, verbs.ErrUnavailable)
}

// TestAuthFailures: a client with the wrong token, one sending garbage and
// one that stays silent are each dropped and logged, and the device goes on
// serving a client that knows the token.
func TestAuthFailures(t *testing.T) {
	var logs testbin.Buffer
	o := testOptions()
	o.HandshakeTimeout = 100 * time.Millisecond
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	devA := openDev(t, o)
	a := newSideOn(t, devA)
	host := devA.(interface{ Name() string }).Name()[len("tcp:"):]

	t.Run("wrong token", func(t *testing.T) {
		wo := testOptions()
		wo.Token = []byte("not the secret")
		wo.ConnectTimeout = 300 * time.Millisecond
		b := newSideOn(t, openDev(t, wo))
		a2 := newSideOn(t, devA)
		o := shortConnect()
		connectPair(t, a2, b, o)
		// Whichever end dialed, the wrong token fails both: the dialer's QP
		// at once, the acceptor's after the connect timeout (here the
		// requester's posted work, on b).
		require.NoError(t, b.qp.PostSend(sendWR(1, b)))
		wc := wait(t, b.cq)
		require.Equal(t, verbs.StatusRetryExcErr, wc.Status)
	})
	t.Run("garbage", func(t *testing.T) {
		c, err := net.Dial("tcp", host)
		require.NoError(t, err)
		defer c.Close()
		_, _ = c.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n" + string(make([]byte, 100))))
		requireClosed(t, c)
	})
	t.Run("silent", func(t *testing.T) {
		c, err := net.Dial("tcp", host)
		require.NoError(t, err)
		defer c.Close()
		requireClosed(t, c)
	})
	t.Run("half handshake", func(t *testing.T) {
		c, err := net.Dial("tcp", host)
		require.NoError(t, err)
		defer c.Close()
		_, err = c.Write(append([]byte(helloMagic), make([]byte, nonceLen)...))
		require.NoError(t, err)
		// Read the challenge, answer with a forged proof.
		_, err = io.ReadFull(c, make([]byte, len(helloMagic)+nonceLen+macLen))
		require.NoError(t, err)
		_, _ = c.Write(make([]byte, connectLen+macLen))
		requireClosed(t, c)
	})
	t.Run("still serving", func(t *testing.T) {
		b := newSide(t)
		connectPair(t, a, b, verbs.DefaultConnectOptions())
		requireWorks(t, a, b)
	})
	out := logs.String()
	assert.Contains(t, out, "dropped connection")
	assert.Contains(t, out, "does not match the job token")
	assert.Contains(t, out, "bad hello magic")
}

// requireClosed waits until the device closes c (reading gives an error).
func requireClosed(t *testing.T, c net.Conn) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, 256)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue
		}
		var ne net.Error
		require.False(t, errors.As(err, &ne) && ne.Timeout(), "device did not drop the connection: %v", err)
		return
	}
}

// fakePeer authenticates to dev as the peer of q and returns the raw
// connection, so tests can send arbitrary frames after the handshake.
func fakePeer(t *testing.T, dev verbs.Device, q verbs.QP, token []byte) net.Conn {
	t.Helper()
	qa, err := verbs.DecodeAddress(q.Address())
	require.NoError(t, err)
	ap, err := decodeAddrPayload(qa.Payload)
	require.NoError(t, err)
	// The end whose address sorts first dials: "0.0.0.0:1" sorts before
	// "127.0.0.1:…", so the fake peer is the dialer and q's device accepts.
	const fakeDev, fakeQP = 0x1234, 0x42
	fake, err := verbs.QPAddress{Provider: Name, QPNum: fakeQP, PSN: 0,
		Payload: addrPayload{dev: fakeDev, host: "0.0.0.0:1"}.encode()}.Encode()
	require.NoError(t, err)
	o := verbs.DefaultConnectOptions()
	o.Timeout = 8
	o.RetryCnt = 1
	require.NoError(t, verbs.Connect(q, fake, o))
	c, err := net.Dial("tcp", ap.host)
	require.NoError(t, err)
	tr := &transport{opts: Options{Token: token}}
	_, st, err := tr.clientHandshake(c, time.Now().Add(5*time.Second), connectReq{srcDev: fakeDev, srcQP: fakeQP, dstDev: ap.dev, dstQP: q.Num()})
	require.NoError(t, err)
	require.Equal(t, statusOK, st)
	return c
}

// TestMalformedFrames: after a correct handshake, a malformed frame closes
// that connection with an error (the QP's work fails with RETRY_EXC_ERR),
// never a panic, and the device goes on serving others.
func TestMalformedFrames(t *testing.T) {
	hdr := func(mut func(b []byte)) []byte {
		b := make([]byte, HeaderLen)
		b[0] = byte(3) // WRITE
		mut(b)
		return b
	}
	// run is a WRITE_RUN to qpn announcing n bytes and imm writes, then body.
	run := func(qpn, n, imm uint32, body []byte) []byte {
		return append(hdr(func(b []byte) {
			b[0] = byte(softrc.FrameWriteRun)
			binary.BigEndian.PutUint32(b[4:], qpn)
			binary.BigEndian.PutUint32(b[12:], n)
			binary.BigEndian.PutUint32(b[28:], imm)
		}), body...)
	}
	for _, tc := range []struct {
		name  string
		frame func(qpn uint32) []byte
	}{
		{"unknown op", func(qpn uint32) []byte {
			return hdr(func(b []byte) { b[0] = 99; binary.BigEndian.PutUint32(b[4:], qpn) })
		}},
		{"unknown flags", func(qpn uint32) []byte {
			return hdr(func(b []byte) { b[1] = 0x80; binary.BigEndian.PutUint32(b[4:], qpn) })
		}},
		{"served flag on a write", func(qpn uint32) []byte {
			// FlagServed belongs to READ requests only.
			return hdr(func(b []byte) { b[1] = softrc.FlagServed; binary.BigEndian.PutUint32(b[4:], qpn) })
		}},
		{"wrong qp", func(qpn uint32) []byte { return hdr(func(b []byte) { binary.BigEndian.PutUint32(b[4:], qpn+1) }) }},
		{"huge length", func(qpn uint32) []byte {
			return hdr(func(b []byte) { binary.BigEndian.PutUint32(b[4:], qpn); binary.BigEndian.PutUint32(b[12:], 0xffffffff) })
		}},
		{"truncated payload", func(qpn uint32) []byte {
			// A WRITE announcing 100 bytes, sequenced wrong so it is dropped
			// and skipped, then the connection ends mid-payload.
			return append(hdr(func(b []byte) {
				binary.BigEndian.PutUint32(b[4:], qpn)
				binary.BigEndian.PutUint32(b[8:], 5)
				binary.BigEndian.PutUint32(b[12:], 100)
			}), 1, 2, 3)
		}},
		{"syndrome on ack", func(qpn uint32) []byte {
			return hdr(func(b []byte) { b[0] = 16; b[2] = 1; binary.BigEndian.PutUint32(b[4:], qpn) })
		}},
		{"write run of no writes", func(qpn uint32) []byte { return run(qpn, 0, 0, nil) }},
		{"write run shorter than its descriptors", func(qpn uint32) []byte { return run(qpn, 16, 2, nil) }},
		{"write run whose lengths overrun it", func(qpn uint32) []byte {
			// In sequence (the QP's first request: PSN 0), so the
			// responder reads its descriptors: one write of 100 bytes in
			// a body of 16+8.
			d := make([]byte, 24)
			binary.BigEndian.PutUint32(d[12:], 100)
			return run(qpn, 24, 1, d)
		}},
		{"write run whose lengths fall short", func(qpn uint32) []byte {
			// Two zero-length writes (no rkey to check) in a body of 32+8.
			return run(qpn, 40, 2, make([]byte, 40))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testbin.Buffer
			o := testOptions()
			o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			dev := openDev(t, o)
			a := newSideOn(t, dev)
			c := fakePeer(t, dev, a.qp, o.Token)
			defer c.Close()
			_, err := c.Write(tc.frame(a.qp.Num()))
			require.NoError(t, err)
			if tc.name == "truncated payload" {
				require.NoError(t, c.(*net.TCPConn).CloseWrite())
			}
			requireClosed(t, c)
			// The QP lost its link: its work fails with RETRY_EXC_ERR.
			require.NoError(t, a.qp.PostSend(sendWR(1, a)))
			require.Equal(t, verbs.StatusRetryExcErr, wait(t, a.cq).Status)
			require.Equal(t, verbs.QPErr, a.qp.State())
			// The device still serves a good pair.
			x, y := newSideOn(t, dev), newSide(t)
			connectPair(t, x, y, verbs.DefaultConnectOptions())
			requireWorks(t, x, y)
		})
	}
}

// TestPeerLost: when the peer's device goes away, outstanding work fails
// with RETRY_EXC_ERR and the rest is flushed.
func TestPeerLost(t *testing.T) {
	a, b := connected(t, shortConnect())
	requireWorks(t, a, b)
	// Stall two SENDs on RNR (b has no receive; rnr_retry 7 waits forever).
	require.NoError(t, a.qp.PostSend(sendWR(11, a), sendWR(12, a)))
	require.NoError(t, b.dev.Close())
	require.Equal(t, verbs.StatusRetryExcErr, wait(t, a.cq).Status)
	require.Equal(t, verbs.StatusWRFlushErr, wait(t, a.cq).Status)
	require.Equal(t, verbs.QPErr, a.qp.State())
}

// TestSilentPeer: a peer whose QP is in ERR drops requests silently; the
// requester fails with RETRY_EXC_ERR after timeout × (retry_cnt+1).
func TestSilentPeer(t *testing.T) {
	o := testOptions()
	o.MinAckTimeout = -1 // honour the QP's ~4 ms × 3 exactly
	// On a loaded machine a peer may miss even the first ACK by 12 ms; a
	// pair whose first WRITE failed so is replaced, a few times at most.
	var a, b *side
	for try := 1; ; try++ {
		a, b = newSideOn(t, openDev(t, o)), newSide(t)
		connectPair(t, a, b, shortConnect())
		require.NoError(t, a.qp.PostSend(writeWR(1, a, b, 4)))
		st := wait(t, a.cq).Status
		if st == verbs.StatusSuccess {
			break
		}
		require.Equal(t, verbs.StatusRetryExcErr, st)
		require.Less(t, try, 5, "every pair's first WRITE timed out")
	}
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState))
	require.NoError(t, a.qp.PostSend(writeWR(5, a, b, 8), writeWR(6, a, b, 8)))
	require.Equal(t, verbs.StatusRetryExcErr, wait(t, a.cq).Status)
	require.Equal(t, verbs.StatusWRFlushErr, wait(t, a.cq).Status)
}

// TestSilentPeerDefaultFloor: by default a silent peer fails a QP whose own
// ACK timeout is milliseconds (~4 ms × 3) only after MinAckTimeout's
// default floor, which must outlast the stalls of a loaded machine (see
// defaultMinAckTimeout), and then it does fail.
func TestSilentPeerDefaultFloor(t *testing.T) {
	t.Parallel()
	a, b := newSide(t), newSide(t) // testOptions leaves MinAckTimeout zero
	connectPair(t, a, b, shortConnect())
	requireWorks(t, a, b)
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState))
	start := time.Now()
	require.NoError(t, a.qp.PostSend(writeWR(5, a, b, 8)))
	require.Equal(t, verbs.StatusRetryExcErr, wait(t, a.cq).Status)
	require.GreaterOrEqual(t, time.Since(start), 4*time.Second, "failed before the default floor")
}

// TestRNRRetryExceeded: SEND with no receive and rnr_retry 2 fails with
// RNR_RETRY_EXC_ERR after three RNR NAKs (10 µs timer).
func TestRNRRetryExceeded(t *testing.T) {
	o := shortConnect()
	o.RNRRetry = 2
	a, b := connected(t, o)
	requireWorks(t, a, b)
	require.NoError(t, a.qp.PostSend(sendWR(21, a), writeWR(22, a, b, 8)))
	require.Equal(t, verbs.StatusRNRRetryExcErr, wait(t, a.cq).Status)
	require.Equal(t, verbs.StatusWRFlushErr, wait(t, a.cq).Status)
}

// TestRNRLateReceive: with rnr_retry 7 a SEND waits until a receive is posted.
func TestRNRLateReceive(t *testing.T) {
	a, b := connected(t, shortConnect())
	require.NoError(t, a.qp.PostSend(sendWR(31, a)))
	time.Sleep(20 * time.Millisecond) // let it meet a few RNR NAKs
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 32, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 8)}}))
	require.Equal(t, verbs.StatusSuccess, wait(t, b.cq).Status)
	require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
}

// TestConnectTimeout: a peer that never reaches RTR fails posted work with
// RETRY_EXC_ERR after ConnectTimeout.
func TestConnectTimeout(t *testing.T) {
	o := testOptions()
	o.ConnectTimeout = 50 * time.Millisecond
	a := newSideOn(t, openDev(t, o))
	b := newSideOn(t, openDev(t, o))
	require.NoError(t, verbs.Connect(a.qp, b.qp.Address(), shortConnect()))
	require.NoError(t, a.qp.PostSend(sendWR(41, a)))
	require.Equal(t, verbs.StatusRetryExcErr, wait(t, a.cq).Status)
}

// TestPeerUnreachable: nothing listens at the peer's address.
func TestPeerUnreachable(t *testing.T) {
	o := testOptions()
	o.ConnectTimeout = time.Minute // the refusal, not the timeout, must fail it
	a := newSideOn(t, openDev(t, o))
	// 127.0.0.2 (loopback) sorts after a's 127.0.0.1, so a dials; the port
	// was just freed, so the dial is refused.
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	require.NoError(t, err)
	host := ln.Addr().String()
	require.NoError(t, ln.Close())
	fake, err := verbs.QPAddress{Provider: Name, QPNum: 7, Payload: addrPayload{dev: 1, host: host}.encode()}.Encode()
	require.NoError(t, err)
	require.NoError(t, verbs.Connect(a.qp, fake, shortConnect()))
	require.NoError(t, a.qp.PostSend(sendWR(51, a)))
	require.Equal(t, verbs.StatusRetryExcErr, wait(t, a.cq).Status)
}

func TestDisconnect(t *testing.T) {
	a, b := connected(t, shortConnect())
	requireWorks(t, a, b)
	require.NoError(t, a.qp.(verbs.Disconnector).Disconnect())
	require.NoError(t, b.qp.PostSend(sendWR(61, b)))
	require.Equal(t, verbs.StatusRetryExcErr, wait(t, b.cq).Status)
	require.NoError(t, a.qp.PostSend(sendWR(62, a)))
	require.Equal(t, verbs.StatusRetryExcErr, wait(t, a.cq).Status)
}

func TestBadRemoteAddress(t *testing.T) {
	a := newSide(t)
	require.NoError(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	for _, p := range [][]byte{nil, {3, 0, 0, 0, 0, 0, 0, 0, 0, 'x'}, {2, 0, 0, 0, 0, 0, 0, 0, 1, 9, 'k'}, addrPayload{dev: 1, host: "no-port"}.encode()} {
		addr, err := verbs.QPAddress{Provider: Name, QPNum: 1, Payload: p}.Encode()
		require.NoError(t, err)
		err = a.qp.Modify(&verbs.QPAttr{State: verbs.QPRTR, Remote: addr, PathMTU: verbs.MTU1024},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		require.Equal(t, verbs.QPInit, a.qp.State())
	}
}

// TestNoGoroutineLeak: a device with connected, busy and half-connected QPs
// leaves no goroutine behind after Close.
func TestNoGoroutineLeak(t *testing.T) {
	before := runtime.NumGoroutine()
	func() {
		o := testOptions()
		da, err := Open(context.Background(), o)
		require.NoError(t, err)
		db, err := Open(context.Background(), o)
		require.NoError(t, err)
		a, b := newSideOn(t, da), newSideOn(t, db)
		connectPair(t, a, b, shortConnect())
		requireWorks(t, a, b)
		require.NoError(t, a.qp.PostSend(sendWR(1, a))) // stalls on RNR
		half := newSideOn(t, da)
		other := newSideOn(t, db)
		require.NoError(t, verbs.Connect(half.qp, other.qp.Address(), shortConnect()))
		silent, err := net.Dial("tcp", da.Name()[len("tcp:"):])
		require.NoError(t, err)
		defer silent.Close()
		require.NoError(t, da.Close())
		require.NoError(t, db.Close())
	}()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// TestCloseRegionsMidTransfer: regions closed (unmapped) while a large WRITE
// and READ use them do not crash the process: the memory stays mapped until
// the transfer lets go of it, and the work completes with a status.
func TestCloseRegionsMidTransfer(t *testing.T) {
	const n = 16 << 20
	for _, delay := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond, 10 * time.Millisecond} {
		a, b := connected(t, shortConnect())
		src, err := a.pd.AllocMR(n, verbs.AccessLocalWrite)
		require.NoError(t, err)
		dst, err := b.pd.AllocMR(n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
		require.NoError(t, err)
		require.NoError(t, a.qp.PostSend(
			verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(src, 0, n)},
				RemoteAddr: dst.Addr(), RKey: dst.RKey()},
			verbs.SendWR{ID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(src, 0, n)},
				RemoteAddr: dst.Addr(), RKey: dst.RKey()}))
		time.Sleep(delay)
		require.NoError(t, dst.Close())
		require.NoError(t, src.Close())
		for range 2 {
			wc := wait(t, a.cq)
			t.Logf("delay %v: wr %d: %v", delay, wc.ID, wc.Status)
		}
		require.NoError(t, b.dev.Close())
	}
}

// TestSlowAcksKeepTheQP: a peer that answers every request, each well
// within the ACK timeout but all of them together over several timeouts,
// is not declared lost: every response restarts the timer (it measures a
// stall, however coarsely), and all the requests complete.
func TestSlowAcksKeepTheQP(t *testing.T) {
	const n, gap = 12, 25 * time.Millisecond
	o := testOptions()
	o.MinAckTimeout = 100 * time.Millisecond // fakePeer's QP timeout is ~2 ms: this is the timeout
	a, _, c := fakeTargetWith(t, o, 64, 0)
	for i := range n {
		require.NoError(t, a.qp.PostSend(writeWR(uint64(i), a, a, 8)))
	}
	require.NoError(t, c.SetDeadline(time.Now().Add(20*time.Second)))
	seqs := make([]uint32, n)
	for i := range n {
		seqs[i] = readFrame(t, c).Seq
	}
	start := time.Now()
	for i := range n {
		time.Sleep(gap) // the pace of the answers is what this test is about
		ack := make([]byte, HeaderLen)
		EncodeHeader(ack, &softrc.Header{Op: softrc.FrameAck, QPN: a.qp.Num(), Seq: seqs[i]})
		_, err := c.Write(ack)
		require.NoError(t, err)
		wc := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status, "WRITE %d, %v after the first answer", i, time.Since(start))
		require.Equal(t, uint64(i), wc.ID)
	}
	require.Equal(t, verbs.QPRTS, a.qp.State())
}

// readFrame reads one frame, header and payload, from a fake peer's end
// and returns its header.
func readFrame(t *testing.T, c net.Conn) softrc.Header {
	t.Helper()
	hb := make([]byte, HeaderLen)
	_, err := io.ReadFull(c, hb)
	require.NoError(t, err)
	h, err := DecodeHeader(hb, 1<<20)
	require.NoError(t, err)
	_, err = io.ReadFull(c, make([]byte, h.PayloadLen()))
	require.NoError(t, err)
	return h
}
