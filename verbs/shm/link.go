//go:build linux

package shm

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/internal/racesync"
)

// Connection set-up. A queue pair moving to RTR dials the peer device's
// abstract Unix socket (named in the peer's QP address) and runs this
// handshake; the connection then stays open for the life of the link:
// its end-of-file is how either side learns, within milliseconds, that
// the other died (even by SIGKILL), closed the QP or disconnected.
//
//	server → client  hello   {"RSHM", version, nonceS[16], devID, hostID}
//	client → server  connect {nonceC[16], macC[32], devID, pid, hostID, qpnC, qpnS}
//	server → client  accept  {status, macS[32], pid, devID, memSize, segOff, probeVA, probeCookie}
//	                          + the server's memfd by SCM_RIGHTS when status is OK
//
// macC = HMAC-SHA256(token, "c" ‖ nonceS ‖ nonceC ‖ qpnS) and
// macS = HMAC-SHA256(token, "s" ‖ nonceC ‖ nonceS): each side proves it
// holds the job secret without sending it. Before any of it, each side
// checks the other's SO_PEERCRED: same uid, and the pid the address names.
// Frames are a 4-byte big-endian length and a type byte.
const (
	msgHello     = 1
	msgConnect   = 2
	msgAccept    = 3
	msgCopyWrite = 10
	msgCopyWrAck = 11
	msgCopyRead  = 12
	msgCopyRdAck = 13

	acceptOK        = 0
	acceptAuth      = 1
	acceptNoQP      = 2
	acceptOtherHost = 3
	acceptClosed    = 4

	copyChunk = 1 << 20
	maxFrame  = copyChunk + 64
)

// peerMap is a peer device's memfd mapped into this process, shared by
// every link to that device.
type peerMap struct {
	devID uint64
	mem   []byte
	refs  int
}

func (p *peerMap) unmap() {
	if p.mem != nil {
		unmap(p.mem)
		p.mem = nil
	}
}

// link is a queue pair's connection to its peer queue pair.
type link struct {
	q        *QP
	conn     *net.UnixConn
	peer     *peerMap
	mem      []byte // the peer device's memory
	seg      []byte // the peer QP's segment
	depth    uint64
	dsz      uint64
	cqeOff   uint64
	headC    uint64 // cached peer rqHead
	peerNSGE int
	peerQPN  uint32
	peerPD   uint32
	pid      int
	sock     string   // the peer device's abstract socket name
	db       doorbell // the peer's recv CQ doorbell
	path     UserMemPath
	local    *Device    // the peer device, when it lives in this process
	descs    [16]mrDesc // recently resolved descriptors (under the QP lock)

	dead     atomic.Bool
	done     chan struct{}
	resp     chan []byte
	shutOnce sync.Once
}

func (l *link) hdr(off uint64) *uint32 { return word32(l.seg, off) }

func (l *link) shutdown() {
	l.shutOnce.Do(func() {
		l.dead.Store(true)
		if l.conn != nil {
			l.conn.Close()
		}
	})
}

// release unmaps the peer's memory when no other link uses it. The QP's
// lock is held, so no request of this QP is touching that memory.
func (l *link) release() {
	if l.peer == nil {
		return
	}
	d := l.q.d
	d.mu.Lock()
	l.peer.refs--
	if l.peer.refs == 0 {
		l.peer.unmap()
		delete(d.peers, l.peer.devID)
	}
	d.mu.Unlock()
	l.peer, l.mem, l.seg = nil, nil, nil
}

// claim takes the peer's next posted receive, or reports RNR. It returns
// the receive's index and completion slot.
func (l *link) claim() (uint64, []byte, verbs.Status, outcome) {
	cw := word64(l.seg, qsClaim)
	for {
		c := atomic.LoadUint64(cw)
		if c&claimClosed != 0 {
			return 0, nil, verbs.StatusRetryExcErr, outDone
		}
		if c >= l.headC {
			l.headC = atomic.LoadUint64(word64(l.seg, qsHead))
			if c >= l.headC {
				return 0, nil, 0, outRNR
			}
		}
		if atomic.CompareAndSwapUint64(cw, c, c+1) {
			racesync.Acquire() // the owner released its buffers when it posted
			off := l.cqeOff + (c&(l.depth-1))*rcSize
			return c, l.seg[off : off+rcSize : off+rcSize], verbs.StatusSuccess, outDone
		}
	}
}

// publish completes a claimed receive: the fields, then seq (release),
// then the peer's doorbell if it sleeps.
func (l *link) publish(e []byte, idx uint64, st verbs.Status, op verbs.WCOpcode, n, imm uint32, flags verbs.WCFlags) {
	e[rcInline] = 0
	l.publishFields(e, idx, st, op, n, imm, flags)
}

// publishInline completes a claimed receive whose n bytes of SEND data the
// caller put in the completion itself (at rcData, see layout.go).
func (l *link) publishInline(e []byte, idx uint64, n, imm uint32, flags verbs.WCFlags) {
	e[rcInline] = 1
	l.publishFields(e, idx, verbs.StatusSuccess, verbs.WCRecv, n, imm, flags)
}

func (l *link) publishFields(e []byte, idx uint64, st verbs.Status, op verbs.WCOpcode, n, imm uint32, flags verbs.WCFlags) {
	binary.LittleEndian.PutUint32(e[rcByteLen:], n)
	binary.LittleEndian.PutUint32(e[rcImm:], imm)
	e[rcStatus] = byte(st)
	e[rcOpcode] = byte(op)
	e[rcFlags] = byte(flags)
	racesync.Release()
	atomic.StoreUint32(word32(e, rcSeq), uint32(idx+1))
	l.db.ring()
}

// setPeerErr moves the peer QP to ERR after a request of ours broke its
// rules: no more receives may be claimed, and it learns on its next look.
func (l *link) setPeerErr() {
	cw := word64(l.seg, qsClaim)
	for {
		c := atomic.LoadUint64(cw)
		if c&claimClosed != 0 || atomic.CompareAndSwapUint64(cw, c, c|claimClosed) {
			break
		}
	}
	atomic.StoreUint32(l.hdr(qsRemoteErr), 1)
	l.db.kick()
}

// resolve checks a key and range against the peer's region table.
func (l *link) resolve(key uint32, addr, n uint64, need verbs.Access) (rspan, verbs.Status) {
	// A key names one registration (its generation changes on reuse), so a
	// cached descriptor is good while the slot still holds the same key.
	desc := &l.descs[key&15]
	ok := desc.key == key && key != 0 && atomic.LoadUint32(word32(l.mem, uint64(mrOff)+uint64(key&0xffff)*mrdSize+mrdKey)) == key
	if !ok {
		*desc, ok = readDesc(l.mem, key)
	}
	if !ok || desc.pd != l.peerPD || desc.access&need != need || !desc.contains(addr, n) {
		return rspan{}, verbs.StatusRemAccessErr
	}
	sp := rspan{key: key, addr: addr, n: n, kind: desc.kind}
	switch {
	case desc.kind == kindProvider:
		o := desc.off + (addr - desc.addr)
		if o < heapOff || o+n > uint64(len(l.mem)) || o+n < o {
			return rspan{}, verbs.StatusRemAccessErr
		}
		sp.direct = l.mem[o : o+n : o+n]
	case l.path == UserMemDirect && l.local != nil:
		m := l.local.localMR(key)
		if m == nil || !m.contains(addr, n) {
			return rspan{}, verbs.StatusRemAccessErr
		}
		sp.direct = m.slice(addr, n)
	}
	return sp, verbs.StatusSuccess
}

// ---- address payload ----

// The shm payload of a QP address (inside the verbs envelope):
//
//	version u8 (1) · len u8 + host id · device id u64 · pid u32 · uid u32 ·
//	len u8 + abstract socket name
type addrPayload struct {
	host  string
	devID uint64
	pid   int
	uid   int
	sock  string
}

func (q *QP) encodeAddress() ([]byte, error) {
	d := q.d
	p := []byte{1, byte(len(d.hostID))}
	p = append(p, d.hostID...)
	p = binary.BigEndian.AppendUint64(p, d.devID)
	p = binary.BigEndian.AppendUint32(p, uint32(d.pid))
	p = binary.BigEndian.AppendUint32(p, uint32(d.uid))
	p = append(p, byte(len(d.sockName)))
	p = append(p, d.sockName...)
	return verbs.QPAddress{Provider: providerName, QPNum: q.qpn, PSN: q.psn, Payload: p}.Encode()
}

func decodePayload(b []byte) (addrPayload, error) {
	bad := fmt.Errorf("%w: malformed shm address payload (%d bytes)", verbs.ErrInvalidArgument, len(b))
	var p addrPayload
	if len(b) < 2 || b[0] != 1 {
		return p, bad
	}
	n := int(b[1])
	b = b[2:]
	if len(b) < n+17 {
		return p, bad
	}
	p.host = string(b[:n])
	b = b[n:]
	p.devID = binary.BigEndian.Uint64(b)
	p.pid = int(binary.BigEndian.Uint32(b[8:]))
	p.uid = int(binary.BigEndian.Uint32(b[12:]))
	n = int(b[16])
	b = b[17:]
	if len(b) != n || n == 0 {
		return p, bad
	}
	p.sock = string(b)
	return p, nil
}

// AddressHostID returns the same-host identity inside an shm queue-pair
// address, to compare with HostID() before choosing shm for a peer.
func AddressHostID(addr []byte) (string, error) {
	a, err := verbs.DecodeAddressFor(providerName, addr)
	if err != nil {
		return "", err
	}
	p, err := decodePayload(a.Payload)
	if err != nil {
		return "", err
	}
	return p.host, nil
}

// ---- client side ----

// connect links q to the peer QP whose address is remote. Errors that mean
// "this can never work" (another host, a failed authentication, a malformed
// address) are returned; a peer that is simply gone gives a dead link, so
// the QP reaches RTR and its work fails with RETRY_EXC_ERR, as on RC.
func (q *QP) connect(remote []byte) (*link, error) {
	d := q.d
	a, err := verbs.DecodeAddressFor(providerName, remote)
	if err != nil {
		return nil, err
	}
	p, err := decodePayload(a.Payload)
	if err != nil {
		return nil, err
	}
	if p.host != d.hostID {
		return nil, fmt.Errorf("%w: %w: this device is %q, the peer QP %#x is on %q", verbs.ErrInvalidArgument, ErrNotSameHost, d.hostID, a.QPNum, p.host)
	}
	if p.uid != d.uid {
		return nil, fmt.Errorf("%w: the peer QP %#x belongs to uid %d, this process runs as uid %d", verbs.ErrAuth, a.QPNum, p.uid, d.uid)
	}
	l := &link{q: q, peerQPN: a.QPNum, pid: p.pid, sock: p.sock, done: make(chan struct{}), resp: make(chan []byte, 1)}
	timeout := d.opts.ConnectTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var dl net.Dialer
	c, err := dl.DialContext(ctx, "unix", "@"+p.sock)
	if err != nil {
		d.log.Info("shm: peer device unreachable; its work will fail with RETRY_EXC_ERR", "qp", q.qpn, "peer", a.QPNum, "err", err)
		l.dead.Store(true)
		close(l.done)
		return l, nil
	}
	conn := c.(*net.UnixConn)
	fail := func(err error) (*link, error) { conn.Close(); return nil, err }
	conn.SetDeadline(time.Now().Add(timeout))
	cred, err := peerCred(conn)
	if err != nil {
		return fail(fmt.Errorf("%w: reading the peer's credentials: %v", verbs.ErrAuth, err))
	}
	if int(cred.Uid) != d.uid || int(cred.Pid) != p.pid {
		return fail(fmt.Errorf("%w: the socket of QP %#x is held by pid %d uid %d, expected pid %d uid %d", verbs.ErrAuth, a.QPNum, cred.Pid, cred.Uid, p.pid, d.uid))
	}
	hello, _, err := readFrame(conn, false)
	if err != nil || len(hello) < 1+4+1+16+8+1 || hello[0] != msgHello || string(hello[1:5]) != "RSHM" || hello[5] != 1 {
		return fail(fmt.Errorf("%w: bad hello from the peer device of QP %#x (%v)", verbs.ErrAuth, a.QPNum, err))
	}
	nonceS := hello[6:22]
	if binary.BigEndian.Uint64(hello[22:]) != p.devID {
		return fail(fmt.Errorf("%w: the socket of QP %#x belongs to another device", verbs.ErrAuth, a.QPNum))
	}
	var nonceC [16]byte
	rand.Read(nonceC[:])
	msg := []byte{msgConnect}
	msg = append(msg, nonceC[:]...)
	msg = append(msg, mac(d.opts.Token, 'c', nonceS, nonceC[:], a.QPNum)...)
	msg = binary.BigEndian.AppendUint64(msg, d.devID)
	msg = binary.BigEndian.AppendUint32(msg, uint32(d.pid))
	msg = append(msg, byte(len(d.hostID)))
	msg = append(msg, d.hostID...)
	msg = binary.BigEndian.AppendUint32(msg, q.qpn)
	msg = binary.BigEndian.AppendUint32(msg, a.QPNum)
	if err := writeFrame(conn, msg, nil); err != nil {
		l.dead.Store(true)
		close(l.done)
		conn.Close()
		return l, nil
	}
	rep, fds, err := readFrame(conn, true)
	closeFDs := func() {
		for _, fd := range fds {
			closeFD(fd)
		}
	}
	if err != nil {
		closeFDs()
		l.dead.Store(true)
		close(l.done)
		conn.Close()
		return l, nil
	}
	if len(rep) < 2 || rep[0] != msgAccept {
		closeFDs()
		return fail(fmt.Errorf("%w: malformed accept from the peer of QP %#x", verbs.ErrAuth, a.QPNum))
	}
	switch rep[1] {
	case acceptOK:
	case acceptAuth:
		closeFDs()
		return fail(fmt.Errorf("%w: the peer device of QP %#x refused our job token", verbs.ErrAuth, a.QPNum))
	case acceptOtherHost:
		closeFDs()
		return fail(fmt.Errorf("%w: %w (the peer's check)", verbs.ErrInvalidArgument, ErrNotSameHost))
	default: // no such QP, or closing: as if the peer were gone
		closeFDs()
		conn.Close()
		l.dead.Store(true)
		close(l.done)
		return l, nil
	}
	if len(rep) != 2+32+4+8+8+8+8+8 || len(fds) != 1 {
		closeFDs()
		return fail(fmt.Errorf("%w: malformed accept from the peer of QP %#x", verbs.ErrAuth, a.QPNum))
	}
	if !hmac.Equal(rep[2:34], mac(d.opts.Token, 's', nonceC[:], nonceS, 0)) {
		closeFDs()
		return fail(fmt.Errorf("%w: the peer device of QP %#x does not hold our job token", verbs.ErrAuth, a.QPNum))
	}
	r := rep[34:]
	memSize := binary.BigEndian.Uint64(r[12:])
	segOff := binary.BigEndian.Uint64(r[20:])
	probeVA := binary.BigEndian.Uint64(r[28:])
	cookie := binary.BigEndian.Uint64(r[36:])
	pm, err := d.acquirePeer(p.devID, fds[0], memSize)
	if err != nil {
		return fail(err)
	}
	l.peer, l.mem = pm, pm.mem
	if err := l.attachSegment(segOff, a.QPNum); err != nil {
		l.release()
		return fail(err)
	}
	l.conn = conn
	if err := q.choosePath(l, probeVA, cookie, p.devID); err != nil {
		l.release()
		return fail(err)
	}
	conn.SetDeadline(time.Time{})
	l.touchPosted()
	d.log.Info("shm: queue pair connected", "device", d.name, "qp", q.qpn, "peer_qp", a.QPNum, "peer_pid", p.pid, "usermem", l.path)
	d.wg.Add(1)
	go l.readLoop()
	return l, nil
}

// touchPosted maps into this process the pages of the receives the peer
// has posted so far (p2p posts its eager buffers before it hands out its
// address), which our SENDs will write: at their first access each page
// would cost as much as the copy of a whole message (see ntcopy.Touch).
// Receives posted later at new addresses, and those past the device's
// PrefaultBytes, are mapped at their first use.
func (l *link) touchPosted() {
	c := atomic.LoadUint64(word64(l.seg, qsClaim)) &^ claimClosed
	h := atomic.LoadUint64(word64(l.seg, qsHead))
	for i := c; i < h && i-c < l.depth; i++ {
		rd := l.desc(i)
		for j := range l.descSGEs(rd) {
			addr, n, key := descSGE(rd, j)
			if sp, st := l.resolve(key, addr, uint64(n), verbs.AccessLocalWrite); st == verbs.StatusSuccess && sp.kind == kindProvider {
				if !l.q.d.touch.Take(len(sp.direct)) {
					return
				}
				ntcopy.Touch(sp.direct, true)
			}
		}
	}
}

// desc is the descriptor of the peer's receive i (see QP.desc).
func (l *link) desc(i uint64) []byte {
	off := qsEntries + (i&(l.depth-1))*l.dsz
	return l.seg[off : off+l.dsz : off+l.dsz]
}

// descSGEs is how many SGEs the peer's receive descriptor rd has, at most
// the peer's limit.
func (l *link) descSGEs(rd []byte) int {
	return min(int(binary.LittleEndian.Uint32(rd[rdNSGE:])), l.peerNSGE)
}

// descSGE reads SGE j of receive descriptor rd.
func descSGE(rd []byte, j int) (addr uint64, n, key uint32) {
	o := rdSGEs + j*sgeSize
	return binary.LittleEndian.Uint64(rd[o:]), binary.LittleEndian.Uint32(rd[o+8:]), binary.LittleEndian.Uint32(rd[o+12:])
}

// attachSegment checks the peer's QP segment header and reads its shape.
func (l *link) attachSegment(off uint64, qpn uint32) error {
	bad := func(why string) error {
		return fmt.Errorf("%w: the peer's segment for QP %#x is invalid: %s", verbs.ErrAuth, qpn, why)
	}
	if off < heapOff || off+qsEntries > uint64(len(l.mem)) || off%4096 != 0 {
		return bad("offset out of range")
	}
	h := l.mem[off:]
	if binary.LittleEndian.Uint32(h[qsQPN:]) != qpn || binary.LittleEndian.Uint64(h[qsMagic:]) != segMagic^uint64(qpn) {
		return bad("wrong QP number or magic")
	}
	depth := uint64(binary.LittleEndian.Uint32(h[qsDepth:]))
	nsge := uint64(binary.LittleEndian.Uint32(h[qsNSGE:]))
	dsz := uint64(binary.LittleEndian.Uint32(h[qsEntrySize:]))
	cqi := binary.LittleEndian.Uint32(h[qsRecvCQ:])
	if depth == 0 || depth > 1<<20 || depth&(depth-1) != 0 || nsge == 0 || nsge > maxSGE || dsz != uint64(descSizeFor(int(nsge))) || cqi >= maxCQ {
		return bad("bad ring shape")
	}
	end := off + segSize(depth, dsz)
	if end > uint64(len(l.mem)) {
		return bad("ring beyond the heap")
	}
	l.seg = l.mem[off:end:end]
	l.depth, l.dsz, l.cqeOff, l.peerNSGE = depth, dsz, cqeOffset(depth, dsz), int(nsge)
	l.peerPD = binary.LittleEndian.Uint32(h[qsPD:])
	l.db = l.q.d.doorbellAt(l.mem, cqi, l.sock)
	return nil
}

// choosePath decides how this link reaches the peer's registered Go memory.
func (q *QP) choosePath(l *link, probeVA, cookie, devID uint64) error {
	d := q.d
	if l.pid == d.pid {
		if v, ok := devices.Load(devID); ok {
			l.local = v.(*Device)
		}
	}
	policy := d.opts.UserMem
	if policy == UserMemCopy {
		l.path = UserMemCopy
		return nil
	}
	if policy == UserMemAuto && l.local != nil {
		l.path = UserMemDirect
		return nil
	}
	var b [8]byte
	err := cmaCopy(l.pid, [][]byte{b[:]}, probeVA, false)
	if err == nil && binary.NativeEndian.Uint64(b[:]) == cookie {
		l.path = UserMemCMA
		d.collapseRegistered()
		return nil
	}
	if err == nil {
		err = errors.New("probe read the wrong value")
	}
	if policy == UserMemCMA {
		return fmt.Errorf("%w: Options.UserMem is cma but process_vm_readv of pid %d fails: %v", verbs.ErrUnavailable, l.pid, err)
	}
	d.log.Info("shm: cross-memory attach not permitted; registered memory of this peer is reached by copy", "peer_pid", l.pid, "err", err)
	l.path = UserMemCopy
	return nil
}

func (l *link) readLoop() {
	d := l.q.d
	defer d.wg.Done()
	for {
		b, _, err := readFrame(l.conn, false)
		if err != nil {
			break
		}
		if len(b) > 0 && (b[0] == msgCopyWrAck || b[0] == msgCopyRdAck) {
			select {
			case l.resp <- b:
			default:
			}
		}
	}
	l.dead.Store(true)
	close(l.done)
	l.q.linkLost(l)
}

// copyIO moves bytes to or from the peer's registered Go memory through
// the peer's device (the copy path), in chunks of at most 1 MiB.
func (l *link) copyIO(sp rspan, local [][]byte, write bool) verbs.Status {
	buf := make([]byte, 0, 1+4+8+4+min(sp.n, copyChunk))
	for off := uint64(0); off < sp.n; {
		k := min(sp.n-off, copyChunk)
		buf = buf[:0]
		if write {
			buf = append(buf, msgCopyWrite)
		} else {
			buf = append(buf, msgCopyRead)
		}
		buf = binary.BigEndian.AppendUint32(buf, sp.key)
		buf = binary.BigEndian.AppendUint64(buf, sp.addr+off)
		buf = binary.BigEndian.AppendUint32(buf, uint32(k))
		if write {
			buf = appendRange(buf, local, off, k)
		}
		if err := writeFrame(l.conn, buf, nil); err != nil {
			return verbs.StatusRetryExcErr
		}
		var r []byte
		select {
		case r = <-l.resp:
		case <-l.done:
			return verbs.StatusRetryExcErr
		}
		if len(r) < 2 || verbs.Status(r[1]) != verbs.StatusSuccess {
			if len(r) < 2 {
				return verbs.StatusRemOpErr
			}
			return verbs.Status(r[1])
		}
		if !write {
			if uint64(len(r)-2) != k {
				return verbs.StatusRemOpErr
			}
			putRange(local, off, r[2:])
		}
		off += k
	}
	return verbs.StatusSuccess
}

// appendRange appends bytes [off, off+n) of the concatenation of parts.
func appendRange(dst []byte, parts [][]byte, off, n uint64) []byte {
	for _, p := range parts {
		if n == 0 {
			break
		}
		if off >= uint64(len(p)) {
			off -= uint64(len(p))
			continue
		}
		k := min(uint64(len(p))-off, n)
		dst = append(dst, p[off:off+k]...)
		off, n = 0, n-k
	}
	return dst
}

// putRange copies src to offset off of the concatenation of parts.
func putRange(parts [][]byte, off uint64, src []byte) {
	for _, p := range parts {
		if len(src) == 0 {
			return
		}
		if off >= uint64(len(p)) {
			off -= uint64(len(p))
			continue
		}
		n := copy(p[off:], src)
		src, off = src[n:], 0
	}
}

// ---- server side ----

func (d *Device) acceptLoop() {
	defer d.wg.Done()
	for {
		c, err := d.ln.AcceptUnix()
		if err != nil {
			return
		}
		d.wg.Add(1)
		go d.serve(c)
	}
}

// serve runs the handshake for one dialing QP, then answers its copy-path
// requests until it hangs up.
func (d *Device) serve(c *net.UnixConn) {
	defer d.wg.Done()
	defer c.Close()
	// Registered at once, so Device.Close can hang up on a handshake in
	// progress instead of waiting for its deadline.
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return
	}
	d.accepted[c] = nil
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.accepted, c)
		d.mu.Unlock()
	}()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	cred, err := peerCred(c)
	if err != nil || int(cred.Uid) != d.uid {
		d.log.Warn("shm: refused a connection from another user", "uid", credUID(cred), "err", err)
		return
	}
	var nonceS [16]byte
	rand.Read(nonceS[:])
	hello := []byte{msgHello, 'R', 'S', 'H', 'M', 1}
	hello = append(hello, nonceS[:]...)
	hello = binary.BigEndian.AppendUint64(hello, d.devID)
	hello = append(hello, byte(len(d.hostID)))
	hello = append(hello, d.hostID...)
	if writeFrame(c, hello, nil) != nil {
		return
	}
	m, _, err := readFrame(c, false)
	if err != nil || len(m) < 1+16+32+8+4+1 || m[0] != msgConnect {
		d.log.Warn("shm: malformed connect; dropped", "pid", cred.Pid, "err", err)
		return
	}
	nonceC := m[1:17]
	macC := m[17:49]
	pid := int(binary.BigEndian.Uint32(m[57:]))
	hn := int(m[61])
	if len(m) != 62+hn+8 {
		d.log.Warn("shm: malformed connect; dropped", "pid", cred.Pid)
		return
	}
	host := string(m[62 : 62+hn])
	qpnS := binary.BigEndian.Uint32(m[62+hn+4:])
	reply := func(status byte) { writeFrame(c, []byte{msgAccept, status}, nil) }
	if !hmac.Equal(macC, mac(d.opts.Token, 'c', nonceS[:], nonceC, qpnS)) || pid != int(cred.Pid) {
		d.log.Warn("shm: refused a peer without our job token", "pid", cred.Pid)
		reply(acceptAuth)
		return
	}
	if host != d.hostID {
		reply(acceptOtherHost)
		return
	}
	d.mu.Lock()
	q := d.qps[qpnS]
	if d.closed || q == nil {
		d.mu.Unlock()
		reply(acceptNoQP)
		return
	}
	if _, ok := d.accepted[c]; !ok { // closed meanwhile
		d.mu.Unlock()
		return
	}
	d.accepted[c] = q
	d.mu.Unlock()
	rep := []byte{msgAccept, acceptOK}
	rep = append(rep, mac(d.opts.Token, 's', nonceC, nonceS[:], 0)...)
	rep = binary.BigEndian.AppendUint32(rep, uint32(d.pid))
	rep = binary.BigEndian.AppendUint64(rep, d.devID)
	rep = binary.BigEndian.AppendUint64(rep, uint64(d.memSize))
	rep = binary.BigEndian.AppendUint64(rep, q.segOff)
	rep = binary.BigEndian.AppendUint64(rep, uint64(d.probeAddr()))
	rep = binary.BigEndian.AppendUint64(rep, probeCookie)
	if writeFrame(c, rep, []int{d.fd}) != nil {
		return
	}
	c.SetDeadline(time.Time{})
	for {
		m, _, err := readFrame(c, false)
		if err != nil {
			return
		}
		var out []byte
		switch {
		case len(m) >= 17 && m[0] == msgCopyWrite:
			out = d.serveCopy(q, m, true)
		case len(m) == 17 && m[0] == msgCopyRead:
			out = d.serveCopy(q, m, false)
		default:
			d.log.Warn("shm: malformed request from a peer; link dropped", "qp", q.qpn, "pid", pid)
			return
		}
		if writeFrame(c, out, nil) != nil {
			return
		}
	}
}

// serveCopy performs a copy-path request against a local region, with the
// same checks the initiator made (never trust the peer).
func (d *Device) serveCopy(q *QP, m []byte, write bool) []byte {
	key := binary.BigEndian.Uint32(m[1:])
	addr := binary.BigEndian.Uint64(m[5:])
	n := uint64(binary.BigEndian.Uint32(m[13:]))
	ack := byte(msgCopyRdAck)
	if write {
		ack = msgCopyWrAck
	}
	r := d.localMR(key)
	ok := r != nil && r.pd == q.pd && r.contains(addr, n)
	if write {
		ok = ok && uint64(len(m)-17) == n && r.access&(verbs.AccessRemoteWrite|verbs.AccessLocalWrite) != 0
	} else {
		ok = ok && r.access&verbs.AccessRemoteRead != 0
	}
	if !ok {
		return []byte{ack, byte(verbs.StatusRemAccessErr)}
	}
	racesync.Acquire()
	defer racesync.Release()
	if write {
		copy(r.slice(addr, n), m[17:])
		return []byte{ack, 0}
	}
	return append([]byte{ack, 0}, r.slice(addr, n)...)
}

// closeAccepted hangs up on the peers connected to q.
func (d *Device) closeAccepted(q *QP) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for c, x := range d.accepted {
		if x == q {
			c.Close()
			delete(d.accepted, c)
		}
	}
}

// acquirePeer maps a peer device's memfd once per peer device.
func (d *Device) acquirePeer(devID uint64, fd int, size uint64) (*peerMap, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if p := d.peers[devID]; p != nil {
		closeFD(fd)
		p.refs++
		return p, nil
	}
	defer closeFD(fd) // the mapping keeps the memory alive
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || uint64(st.Size) != size || size < heapOff || !sealed(fd) {
		return nil, fmt.Errorf("%w: the peer's memory descriptor is not what it announced", verbs.ErrAuth)
	}
	mem, err := mapShared(fd, int64(size))
	if err != nil {
		return nil, fmt.Errorf("%w: mapping the peer's memory: %v", verbs.ErrUnavailable, err)
	}
	if binary.LittleEndian.Uint64(mem[hdrMagic:]) != segMagic || binary.LittleEndian.Uint64(mem[hdrDevID:]) != devID {
		unmap(mem)
		return nil, fmt.Errorf("%w: the peer's memory has the wrong header", verbs.ErrAuth)
	}
	p := &peerMap{devID: devID, mem: mem, refs: 1}
	d.peers[devID] = p
	return p, nil
}

// probe is a word whose address peers read with process_vm_readv to learn
// whether cross-memory attach works between us.
var (
	probeWord   = new(uint64)
	probeCookie uint64
)

func init() {
	var b [8]byte
	rand.Read(b[:])
	probeCookie = binary.NativeEndian.Uint64(b[:]) | 1
	atomic.StoreUint64(probeWord, probeCookie)
}

func (d *Device) probeAddr() uintptr { return uintptrOf(probeWord) }

func mac(token []byte, who byte, a, b []byte, qpn uint32) []byte {
	h := hmac.New(sha256.New, token)
	h.Write([]byte{who})
	h.Write(a)
	h.Write(b)
	var q [4]byte
	binary.BigEndian.PutUint32(q[:], qpn)
	h.Write(q[:])
	return h.Sum(nil)
}

func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	err = rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if err == nil {
		err = cerr
	}
	return cred, err
}

func credUID(c *unix.Ucred) int {
	if c == nil {
		return -1
	}
	return int(c.Uid)
}

func writeFrame(c *net.UnixConn, body []byte, fds []int) error {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(body)))
	if len(fds) > 0 {
		msg := append(hdr[:], body...)
		_, _, err := c.WriteMsgUnix(msg, unix.UnixRights(fds...), nil)
		return err
	}
	bufs := net.Buffers{hdr[:], body}
	_, err := bufs.WriteTo(c)
	return err
}

// readFrame reads one frame; with wantFDs it also collects descriptors
// passed with it.
func readFrame(c *net.UnixConn, wantFDs bool) ([]byte, []int, error) {
	var hdr [4]byte
	var fds []int
	if wantFDs {
		oob := make([]byte, unix.CmsgSpace(4*4))
		n, oobn, _, _, err := c.ReadMsgUnix(hdr[:], oob)
		if err != nil {
			return nil, nil, err
		}
		if oobn > 0 {
			if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil {
				for _, m := range msgs {
					if f, err := unix.ParseUnixRights(&m); err == nil {
						fds = append(fds, f...)
					}
				}
			}
		}
		if n < 4 {
			if _, err := io.ReadFull(c, hdr[n:]); err != nil {
				return nil, fds, err
			}
		}
	} else if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > maxFrame {
		return nil, fds, fmt.Errorf("frame of %d bytes", n)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, fds, err
	}
	return b, fds, nil
}

func closeFD(fd int) { unix.Close(fd) }
func unmap(b []byte) { unix.Munmap(b) }
