package tcp

import (
	"bufio"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// readBufSize is the read buffer of a connection. A waiter handles a frame
// that fits it without a further syscall; a larger one costs an SIOCINQ,
// an SO_RCVLOWAT round and the reset (see awaitQueued). 160 KiB held
// p2p's largest eager frame over tcp when that was 64 KiB and headers,
// with room for the frames around it: an 8-byte-to-64-KiB ping-pong at 64
// KiB went from about 115 to 65 µs per half round trip against 64 KiB.
// Since eager frames reach 256 KiB, 320 KiB was tried and not kept: a
// larger frame read through the buffer costs a copy more than one whose
// body goes from the socket into place (2 hosts, 256 KiB: bcast 1.05,
// allreduce 1.09 of the time).
const readBufSize = 160 << 10

// pendingConn is an authenticated incoming connection whose QP has not
// reached RTR yet.
type pendingConn struct {
	c     net.Conn
	br    *bufio.Reader
	req   connectReq
	timer *time.Timer
}

func (pc *pendingConn) drop() {
	if pc.timer != nil {
		pc.timer.Stop()
	}
	_ = pc.c.Close()
}

func (t *transport) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			if t.ctx.Err() != nil {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			t.log.Warn("tcp: accept failed", "device", t.dev.Name(), "err", err)
			select {
			case <-t.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		t.mu.Lock()
		if t.closed {
			t.mu.Unlock()
			_ = c.Close()
			return
		}
		t.wg.Add(1)
		t.mu.Unlock()
		go t.serveConn(c)
	}
}

// serveConn authenticates an incoming connection and hands it to its QP.
// Nothing the client sends is acted on before it has proved the token; a
// client that fails, sends garbage or stays silent past HandshakeTimeout is
// dropped and logged, and the device goes on serving others.
func (t *transport) serveConn(c net.Conn) {
	defer t.wg.Done()
	if !t.track(c) {
		_ = c.Close()
		return
	}
	defer t.untrack(c)
	setNoDelay(c)
	_ = c.SetDeadline(time.Now().Add(t.opts.HandshakeTimeout))
	br := bufio.NewReaderSize(c, readBufSize)
	req, err := t.serverHandshake(c, br)
	if err != nil {
		t.logDrop(c, err)
		_ = c.Close()
		return
	}
	reject := func(st byte) {
		_, _ = c.Write([]byte{st})
		t.logDrop(c, fmt.Errorf("connect to qp %#x from qp %#x refused: %s", req.dstQP, req.srcQP, statusText(st)))
		_ = c.Close()
	}
	if req.dstDev != t.id {
		reject(statusStale)
		return
	}
	if req.srcQP&abortBit != 0 {
		req.srcQP &^= abortBit
		t.mu.Lock()
		q := t.waiting[req.dstQP]
		if q != nil {
			ra, _ := decodeAddrPayload(q.Remote().Payload)
			if q.Remote().QPNum != req.srcQP || ra.dev != req.srcDev {
				q = nil
			} else {
				delete(t.waiting, req.dstQP)
			}
		}
		t.mu.Unlock()
		_, _ = c.Write([]byte{statusOK})
		_ = c.Close()
		if q != nil {
			q.FailConnect(fmt.Errorf("tcp: peer qp %#x went away before connecting", req.srcQP))
		}
		return
	}
	if t.dev.QP(req.dstQP) == nil {
		reject(statusNoQP)
		return
	}
	pc := &pendingConn{c: c, br: br, req: req}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = c.Close()
		return
	}
	if q := t.waiting[req.dstQP]; q != nil {
		r := q.Remote()
		ra, _ := decodeAddrPayload(r.Payload)
		if r.QPNum != req.srcQP || ra.dev != req.srcDev {
			t.mu.Unlock()
			reject(statusMismatch)
			return
		}
		delete(t.waiting, req.dstQP)
		t.mu.Unlock()
		t.accept(pc, q)
		return
	}
	old := t.pending[req.dstQP]
	t.pending[req.dstQP] = pc
	pc.timer = time.AfterFunc(t.opts.ConnectTimeout, func() {
		t.mu.Lock()
		if t.pending[req.dstQP] == pc {
			delete(t.pending, req.dstQP)
		}
		t.mu.Unlock()
		pc.drop()
	})
	t.mu.Unlock()
	if old != nil {
		old.drop()
	}
}

func (t *transport) serverHandshake(c net.Conn, br *bufio.Reader) (connectReq, error) {
	var req connectReq
	hello := make([]byte, len(helloMagic)+nonceLen)
	if _, err := io.ReadFull(br, hello); err != nil {
		return req, fmt.Errorf("%w: reading hello: %v", verbs.ErrAuth, err)
	}
	if string(hello[:len(helloMagic)]) != helloMagic {
		return req, fmt.Errorf("%w: bad hello magic %q", verbs.ErrAuth, hello[:len(helloMagic)])
	}
	nonceC := hello[len(helloMagic):]
	nonceS := make([]byte, nonceLen)
	_, _ = rand.Read(nonceS)
	out := append([]byte(helloMagic), nonceS...)
	out = append(out, proof(t.opts.Token, "rdmago-tcp server", nonceC, nonceS)...)
	if _, err := c.Write(out); err != nil {
		return req, fmt.Errorf("%w: writing challenge: %v", verbs.ErrAuth, err)
	}
	in := make([]byte, connectLen+macLen)
	if _, err := io.ReadFull(br, in); err != nil {
		return req, fmt.Errorf("%w: reading proof: %v", verbs.ErrAuth, err)
	}
	if !hmac.Equal(in[connectLen:], proof(t.opts.Token, "rdmago-tcp client", nonceS, nonceC, in[:connectLen])) {
		return req, fmt.Errorf("%w: client proof does not match the job token", verbs.ErrAuth)
	}
	if err := readPad(br); err != nil {
		return req, err
	}
	return decodeConnect(in[:connectLen]), nil
}

// accept completes an incoming connection for q.
func (t *transport) accept(pc *pendingConn, q *softrc.QP) {
	if pc.timer != nil {
		pc.timer.Stop()
	}
	_ = pc.c.SetDeadline(time.Time{})
	if _, err := pc.c.Write(appendPad([]byte{statusOK}, pc.c)); err != nil {
		t.logDrop(pc.c, err)
		_ = pc.c.Close()
		return
	}
	t.startLink(q, pc.c, pc.br, pc.req.srcQP)
}

// dial connects q to its peer, retrying while the peer's listener refuses,
// until the QP stops waiting or ConnectTimeout passes (the core then fails
// the QP with RETRY_EXC_ERR).
func (t *transport) dial(q *softrc.QP, ra addrPayload, remoteQP uint32) {
	defer t.wg.Done()
	deadline := time.Now().Add(t.opts.ConnectTimeout)
	req := connectReq{srcDev: t.id, srcQP: q.Num(), dstDev: ra.dev, dstQP: remoteQP}
	for time.Now().Before(deadline) {
		if !q.Waiting() {
			// Closed, reset or failed before it connected: tell the peer,
			// whose QP would otherwise wait out its connect timeout.
			t.abort(ra, req)
			return
		}
		ctx, cancel := context.WithDeadline(t.ctx, deadline)
		d := net.Dialer{Control: t.dialControl(ra)}
		c, err := d.DialContext(ctx, "tcp", ra.host)
		cancel()
		if err == nil && !t.track(c) {
			_ = c.Close()
			return
		}
		if err == nil {
			defer t.untrack(c)
			var br *bufio.Reader
			var st byte
			br, st, err = t.clientHandshake(c, deadline, req)
			switch {
			case err == nil && st == statusOK:
				t.startLink(q, c, br, remoteQP)
				return
			case err == nil:
				_ = c.Close()
				q.FailConnect(fmt.Errorf("tcp: %s refused qp %#x: %s", ra.host, remoteQP, statusText(st)))
				return
			case errors.Is(err, verbs.ErrAuth):
				_ = c.Close()
				q.FailConnect(fmt.Errorf("tcp: connecting to %s: %w", ra.host, err))
				return
			}
			_ = c.Close()
		}
		if errors.Is(err, syscall.ECONNREFUSED) {
			// A device listens from Open on, before any of its QP addresses
			// exist: nothing listening means the peer device is gone, or
			// the address does not lead to it.
			q.FailConnect(fmt.Errorf("tcp: connecting to %s: %w%s", ra.host, err, loopbackHint(ra.host)))
			return
		}
		t.log.Debug("tcp: dial failed, retrying", "device", t.dev.Name(), "peer", ra.host, "err", err)
		select {
		case <-t.ctx.Done():
			return
		case <-time.After(t.opts.DialRetry):
		}
	}
}

// abort tells the acceptor, best effort, that the dialing QP is gone.
func (t *transport) abort(ra addrPayload, req connectReq) {
	// Not bound to t.ctx: a device closing is exactly when peers should hear.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ra.host)
	if err != nil {
		return
	}
	req.srcQP |= abortBit
	_, _, _ = t.clientHandshake(c, time.Now().Add(time.Second), req)
	_ = c.Close()
}

func (t *transport) clientHandshake(c net.Conn, deadline time.Time, req connectReq) (*bufio.Reader, byte, error) {
	setNoDelay(c)
	_ = c.SetDeadline(deadline)
	br := bufio.NewReaderSize(c, readBufSize)
	nonceC := make([]byte, nonceLen)
	_, _ = rand.Read(nonceC)
	if _, err := c.Write(append([]byte(helloMagic), nonceC...)); err != nil {
		return nil, 0, err
	}
	in := make([]byte, len(helloMagic)+nonceLen+macLen)
	if _, err := io.ReadFull(br, in); err != nil {
		return nil, 0, fmt.Errorf("reading challenge: %w", err)
	}
	if string(in[:len(helloMagic)]) != helloMagic {
		return nil, 0, fmt.Errorf("%w: server sent bad magic %q", verbs.ErrAuth, in[:len(helloMagic)])
	}
	nonceS := in[len(helloMagic) : len(helloMagic)+nonceLen]
	if !hmac.Equal(in[len(helloMagic)+nonceLen:], proof(t.opts.Token, "rdmago-tcp server", nonceC, nonceS)) {
		return nil, 0, fmt.Errorf("%w: server proof does not match the job token", verbs.ErrAuth)
	}
	cr := req.encode()
	if _, err := c.Write(appendPad(append(cr, proof(t.opts.Token, "rdmago-tcp client", nonceS, nonceC, cr)...), c)); err != nil {
		return nil, 0, err
	}
	st, err := br.ReadByte()
	if err != nil {
		return nil, 0, fmt.Errorf("reading accept status: %w", err)
	}
	if st == statusOK && req.srcQP&abortBit == 0 {
		if err := readPad(br); err != nil {
			return nil, 0, err
		}
	}
	_ = c.SetDeadline(time.Time{})
	return br, st, nil
}

// maxPad bounds the pad a handshake step ends with (appendPad).
const maxPad = 64 << 10

// appendPad appends the pad that ends the dialer's connect request and the
// acceptor's "accepted": a length (4 bytes) and that many zero bytes, one
// full segment of c's path. Linux sizes the segments it acknowledges at once
// (more than one "full frame" unacknowledged) by the largest it has seen;
// on a fresh connection that is 536 bytes, so two small messages in a row
// (a 384-byte broadcast and a barrier) each cost an extra ACK packet, about
// 1 µs on loopback, until some message happens to be larger. One full
// segment at the start makes the receiver's estimate the path's.
func appendPad(b []byte, c net.Conn) []byte {
	n := min(segmentSize(c), maxPad)
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	return append(b, make([]byte, n)...)
}

// readPad reads and drops the pad appendPad wrote.
func readPad(br *bufio.Reader) error {
	var l [4]byte
	if _, err := io.ReadFull(br, l[:]); err != nil {
		return fmt.Errorf("%w: reading handshake pad: %v", softrc.ErrProtocol, err)
	}
	n := binary.BigEndian.Uint32(l[:])
	if n > maxPad {
		return fmt.Errorf("%w: handshake pad of %d bytes, at most %d", softrc.ErrProtocol, n, maxPad)
	}
	if _, err := br.Discard(int(n)); err != nil {
		return fmt.Errorf("%w: reading handshake pad: %v", softrc.ErrProtocol, err)
	}
	return nil
}

func setNoDelay(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetNoDelay(true)
	}
}

// congest gives q's connection c the congestion control of
// Options.LocalCongestion if it stays within this kernel (sameHost, or a
// peer device whose address names this kernel), else of
// Options.Congestion, the system's default for "system" or empty.
func (t *transport) congest(c net.Conn, q *softrc.QP) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	ra, _ := decodeAddrPayload(q.Remote().Payload) // CheckRemote passed
	cc := t.congestionFor(tc.LocalAddr(), tc.RemoteAddr(), ra.kernel)
	if keepsSystem(cc) {
		cc = t.sysCongestion
	}
	// A no-op where the socket started with it (dialControl, the
	// listener), as most do.
	if rc, err := tc.SyscallConn(); err == nil {
		setCongestionOn(rc, cc)
	}
}

// setCongestionOn gives the socket behind rc congestion control name,
// unless name keeps the system's (the socket keeps what it has);
// one the kernel refuses leaves it as it was (Open checked the names it
// was given).
func setCongestionOn(rc syscall.RawConn, name string) {
	if !keepsSystem(name) {
		_ = rc.Control(func(fd uintptr) { _ = setCongestion(fd, name) })
	}
}

// dialControl gives a socket about to dial the device at ra the
// congestion control congest will find for the connection, as far as the
// peer's address tells before the connection has a local address, so that
// it starts with it rather than switching (see Open's listener).
func (t *transport) dialControl(ra addrPayload) func(_, _ string, rc syscall.RawConn) error {
	return func(_, _ string, rc syscall.RawConn) error {
		var remote net.Addr
		if ap, err := netip.ParseAddrPort(ra.host); err == nil {
			remote = net.TCPAddrFromAddrPort(ap)
		}
		setCongestionOn(rc, t.congestionFor(nil, remote, ra.kernel))
		return nil
	}
}

// congestionFor is the congestion control of a connection from local to
// remote whose peer device runs on kernel (from its QP address).
func (t *transport) congestionFor(local, remote net.Addr, kernel string) string {
	if sameHost(local, remote) || t.kernel != "" && kernel == t.kernel {
		return t.opts.LocalCongestion
	}
	return t.opts.Congestion
}

// defaultLocalCongestion is Options.LocalCongestion's default: every
// kernel that can set one allows reno without privileges.
const defaultLocalCongestion = "reno"

// systemCongestion, as Options.LocalCongestion or Congestion, keeps the
// system's default congestion control.
const systemCongestion = "system"

// keepsSystem reports whether name, as Options.LocalCongestion or
// Congestion, leaves the system's default: empty or systemCongestion.
func keepsSystem(name string) bool { return name == "" || name == systemCongestion }

// sameHost reports whether a connection from local to remote stays within
// this host's network stack: to a loopback address, or to the address it
// comes from.
func sameHost(local, remote net.Addr) bool {
	l, lok := local.(*net.TCPAddr)
	r, rok := remote.(*net.TCPAddr)
	return rok && (r.IP.IsLoopback() || lok && r.IP.Equal(l.IP))
}

// loopbackHint explains a refused loopback address: a peer advertises one
// only when it believes it shares this host, and a peer in another network
// namespace (or container) that does has no listener on this loopback.
func loopbackHint(hostPort string) string {
	h, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		return ""
	}
	if ip, err := netip.ParseAddr(h); err == nil && ip.IsLoopback() {
		return " (the peer advertised a loopback address, which reaches it only from its own host and network namespace)"
	}
	return ""
}
