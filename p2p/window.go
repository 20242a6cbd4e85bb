package p2p

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/verbs"
)

// Notification is the 32-bit value a peer attached to a window write
// (WRITE_WITH_IMM), with the rank that wrote.
//
// Notifications are per endpoint, not per window: the immediate value is
// all the wire carries, so a receiver cannot tell which of several windows
// a write went to. They queue in arrival order per endpoint, and
// WaitNotify takes the oldest one from the given source. A write's data is
// in the window when its notification is taken. Values with bit 30 set
// are reserved: they are window signals (IwriteSignal), which are counted
// per window instead.
type Notification struct {
	Source int
	Value  uint32
}

// Window is memory every rank exposes for one-sided writes from its peers.
// Create one collectively (every rank calls NewWindow or AllocWindow, in
// the same order); ranks may pass different sizes. Write and WriteNotify
// may be called from several goroutines at once.
type Window struct {
	ep     *Endpoint
	seq    uint32
	buf    []byte
	mrs    map[*device]verbs.MR
	remote []winKey // per rank: where its window is, as this rank's link to it sees it
	direct [][]byte // per rank: the Direct mapping, made on first use (under ep.mu)
	// noDirect: per rank, Direct found no mapping; writes take the queue
	// pair. Set under ep.mu, never cleared, and read without it by
	// IwriteNow, which then skips the look under the lock.
	noDirect []atomic.Bool
	// fast: per rank, the Direct mapping once made, which IwriteNow
	// copies into without ep.mu while the endpoint is up, the peer not
	// gone and no window operation pending (writeFast); Close clears it.
	fast   []atomic.Pointer[[]byte]
	closed bool

	// A group window (NewGroupWindow) exists on the ranks of group only
	// and exchanges its keys on ch with tag; nil group means every rank.
	group  []int
	member []bool
	ch     *Channel
	tag    int
	// Signals (WriteSignal): this rank's signal slot, and the counts of
	// signals that arrived, per source and index (under ep.mu).
	slot uint32
	sigs map[sigKey]int
	// inl: the ranks written to inline since their last fence (Ifence).
	inl unfenced
}

type winKey struct {
	addr    uint64
	rkey    uint32
	len     int
	slot    uint32 // the target's signal slot
	atomics bool   // the target's memory takes remote atomics on this link
}

const winKeyLen = 24

// NewWindow exposes buf (which stays registered, and must not be let go,
// until Close) to every peer. It is a collective over all ranks.
func (ep *Endpoint) NewWindow(ctx context.Context, buf []byte) (*Window, error) {
	return ep.newWindow(ctx, buf, false)
}

// AllocWindow is NewWindow on n bytes of provider memory: with the shm
// provider, peers then write into it directly (one copy, no receiver CPU).
func (ep *Endpoint) AllocWindow(ctx context.Context, n int) (*Window, error) {
	if n < 0 {
		return nil, &Error{Op: "AllocWindow", Rank: ep.rank, Peer: NoPeer, Tag: NoTag,
			Err: fmt.Errorf("%w: negative window size %d", ErrInvalidArgument, n)}
	}
	return ep.newWindow(ctx, make([]byte, n), len(ep.devs) == 1)
}

func (ep *Endpoint) newWindow(ctx context.Context, buf []byte, alloc bool) (*Window, error) {
	return ep.newWindowWith(ctx, buf, alloc, nil)
}

// newWindowWith is newWindow that calls registered(w) once the memory is
// registered, before any peer can learn its key. With registered set, a
// window that cannot have provider memory gets the Go buffer instead.
func (ep *Endpoint) newWindowWith(ctx context.Context, buf []byte, alloc bool, registered func(*Window)) (*Window, error) {
	return ep.newWindowOn(ctx, buf, alloc, registered, nil, nil, 0)
}

// newWindowOn makes a window on the ranks of group (nil: every rank, keys
// exchanged on the window context with the window's sequence number as
// tag; else on ch with tag).
func (ep *Endpoint) newWindowOn(ctx context.Context, buf []byte, alloc bool, registered func(*Window), group []int, ch *Channel, tag int) (*Window, error) {
	ep.mu.Lock()
	if err := ep.checkLocked(); err != nil {
		ep.mu.Unlock()
		return nil, &Error{Op: "NewWindow", Rank: ep.rank, Peer: NoPeer, Tag: NoTag, Err: err}
	}
	w := &Window{ep: ep, buf: buf, mrs: map[*device]verbs.MR{}, remote: make([]winKey, ep.size), inl: unfenced{to: make([]bool, ep.size)}, group: group, ch: ch, tag: tag,
		noDirect: make([]atomic.Bool, ep.size), fast: make([]atomic.Pointer[[]byte], ep.size)}
	if group == nil {
		// Group windows leave the sequence alone: only their members make
		// them, and every rank must agree on the world windows' numbers.
		ep.windowSeq++
		w.seq = ep.windowSeq
		w.ch, w.tag = &Channel{ep: ep, id: ctxWindow}, int(w.seq&MaxTag)
	}
	w.member = make([]bool, ep.size)
	for r := range w.member {
		w.member[r] = group == nil
	}
	for _, r := range group {
		w.member[r] = true
	}
	if err := ep.takeSlotLocked(w); err != nil {
		ep.mu.Unlock()
		return nil, &Error{Op: "NewWindow", Rank: ep.rank, Peer: NoPeer, Tag: NoTag, Err: err}
	}
	ep.mu.Unlock()
	fail := func(err error) (*Window, error) {
		for _, mr := range w.mrs {
			_ = mr.Close()
		}
		ep.mu.Lock()
		ep.dropSlotLocked(w)
		ep.mu.Unlock()
		return nil, &Error{Op: "NewWindow", Rank: ep.rank, Peer: NoPeer, Tag: NoTag, Err: err}
	}
	for _, d := range ep.devs {
		var mr verbs.MR
		var err error
		access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
		if d.caps.Atomics != verbs.AtomicNone && (alloc || d.caps.UserMemAtomics) {
			access |= verbs.AccessRemoteAtomic
		}
		switch {
		case len(buf) == 0:
			continue
		case alloc:
			mr, err = d.pd.AllocMR(len(buf), access)
			if err == nil {
				w.buf = mr.Bytes()
				// Provider memory may be mapped lazily: map all of it now,
				// before any peer knows it, rather than a page at a time
				// at first use (see ntcopy.Touch: the rings' first lap).
				ntcopy.Touch(w.buf, true)
			} else if registered != nil {
				// The caller can do without provider memory (the rings):
				// register the Go buffer so that the collective exchange
				// of keys still completes on every rank.
				access &^= verbs.AccessRemoteAtomic
				if d.caps.UserMemAtomics {
					access |= verbs.AccessRemoteAtomic
				}
				mr, err = d.pd.RegMR(buf, access)
			}
		default:
			mr, err = d.pd.RegMR(buf, access)
		}
		if err != nil {
			return fail(fmt.Errorf("registering %d bytes: %w", len(buf), err))
		}
		w.mrs[d] = mr
	}
	if registered != nil {
		registered(w)
	}
	if uint64(len(w.buf)) > 1<<32-1 {
		return fail(fmt.Errorf("%w: a window of %d bytes is larger than 4 GiB", ErrInvalidArgument, len(w.buf)))
	}
	// Exchange keys: rank r gets from us the key of the device that
	// carries our link to r.
	c, tag := w.ch, w.tag
	keys := make([][]byte, ep.size)
	reqs := make([]*Request, 0, 2*ep.size)
	for r, p := range ep.peers {
		if p == nil || !w.member[r] {
			continue
		}
		k := make([]byte, winKeyLen)
		if mr := w.mrs[p.dev]; mr != nil {
			binary.LittleEndian.PutUint64(k, mr.Addr())
			binary.LittleEndian.PutUint32(k[8:], mr.RKey())
			if mr.SupportsAtomics() && mr.Access()&verbs.AccessRemoteAtomic != 0 {
				k[20] = 1
			}
		}
		binary.LittleEndian.PutUint32(k[12:], uint32(len(w.buf)))
		binary.LittleEndian.PutUint32(k[16:], w.slot)
		keys[r] = make([]byte, winKeyLen)
		rr, err := c.Irecv(r, tag, keys[r])
		if err != nil {
			return fail(err)
		}
		sr, err := c.Isend(r, tag, k)
		if err != nil {
			return fail(err)
		}
		reqs = append(reqs, rr, sr)
	}
	if err := WaitAll(ctx, reqs...); err != nil {
		return fail(err)
	}
	for r, k := range keys {
		if k == nil {
			continue
		}
		w.remote[r] = winKey{addr: binary.LittleEndian.Uint64(k), rkey: binary.LittleEndian.Uint32(k[8:]),
			len: int(binary.LittleEndian.Uint32(k[12:])), slot: binary.LittleEndian.Uint32(k[16:]), atomics: k[20] == 1}
	}
	w.remote[ep.rank] = winKey{len: len(w.buf), slot: w.slot}
	return w, nil
}

// Bytes is this rank's window memory.
func (w *Window) Bytes() []byte { return w.buf }

// Direct returns peer's window as memory this process loads from and
// stores to directly, or nil when it cannot: the link to peer must share
// memory (the shm provider) and the window must be provider memory
// (AllocWindow). For this rank it is Bytes(). No work request, completion
// or notification is involved: synchronise through atomic operations on
// words of the memory (see verbs.DirectAccess). The slice must not be used
// once the window or the endpoint is closed; a peer that dies leaves it
// mapped but no longer changing, so a wait on it must also watch Endpoint.Err.
func (w *Window) Direct(peer int) []byte {
	ep := w.ep
	if peer < 0 || peer >= ep.size {
		return nil
	}
	if peer == ep.rank {
		return w.buf
	}
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return w.directLocked(peer)
}

// directLocked is Direct for another rank; the caller holds ep.mu. A part
// found not mappable is remembered, so that writes do not ask the provider
// again each time.
func (w *Window) directLocked(peer int) []byte {
	ep := w.ep
	if w.closed || ep.closing {
		return nil
	}
	if w.direct == nil {
		w.direct = make([][]byte, ep.size)
	}
	if m := w.direct[peer]; m != nil || w.noDirect[peer].Load() {
		return m
	}
	p, rk := ep.peers[peer], w.remote[peer]
	da, ok := p.qp.(verbs.DirectAccess)
	if !ok || rk.rkey == 0 {
		w.noDirect[peer].Store(true)
		return nil
	}
	m, err := da.MapRemote(rk.addr, rk.rkey, rk.len, verbs.AccessRemoteRead|verbs.AccessRemoteWrite)
	if err != nil {
		w.noDirect[peer].Store(true)
		return nil
	}
	w.direct[peer] = m
	w.fast[peer].Store(&m)
	return m
}

// ReadPeer copies len(dst) bytes at address addr of peer's process into
// dst in one copy, when the link to peer can (shm between processes:
// verbs.PeerReader); otherwise the error wraps verbs.ErrUnsupported. peer
// must have published the address for this and keep the memory unchanged
// until the reader says it is done (the collectives' shared-memory
// algorithms do, through flags).
func (ep *Endpoint) ReadPeer(peer int, addr uint64, dst []byte) error {
	return ep.peerIO("ReadPeer", peer, addr, dst, false)
}

// WritePeer is ReadPeer's counterpart: it copies src to address addr of
// peer's process (verbs.PeerWriter), memory peer has published for this
// and leaves alone until the writer says it is done.
func (ep *Endpoint) WritePeer(peer int, addr uint64, src []byte) error {
	return ep.peerIO("WritePeer", peer, addr, src, true)
}

func (ep *Endpoint) peerIO(op string, peer int, addr uint64, b []byte, write bool) error {
	if peer < 0 || peer >= ep.size || peer == ep.rank || ep.peers[peer] == nil {
		return &Error{Op: op, Rank: ep.rank, Peer: peer, Tag: NoTag,
			Err: fmt.Errorf("%w: rank %d is not a peer of rank %d of %d", ErrInvalidRank, peer, ep.rank, ep.size)}
	}
	p := ep.peers[peer]
	var err error
	can, what := false, "read"
	if write {
		what = "write"
		var pw verbs.PeerWriter
		if pw, can = p.qp.(verbs.PeerWriter); can {
			err = pw.WritePeer(addr, b)
		}
	} else {
		var pr verbs.PeerReader
		if pr, can = p.qp.(verbs.PeerReader); can {
			err = pr.ReadPeer(addr, b)
		}
	}
	if !can {
		err = fmt.Errorf("%w: the %s link to rank %d cannot %s its memory", verbs.ErrUnsupported, p.dev.provider, peer, what)
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, verbs.StatusRetryExcErr) {
		// The peer's process is gone (process_vm_readv's ESRCH) or its
		// link is down: a lost peer, which the whole endpoint learns,
		// unless it had closed its endpoint on purpose. pollMu too, as on
		// every path that breaks a link: the poller reads p.broken under it.
		ep.pollMu.Lock()
		ep.mu.Lock()
		ep.linkErrorLocked(p, fmt.Errorf("link failed: %w", err))
		if p.departed {
			err = &PeerClosedError{Rank: peer}
		} else if fe := ep.failErr; fe != nil && !errors.Is(fe, ErrClosed) {
			err = fe // names the rank lost first, maybe another one
		} else {
			err = &PeerLostError{Rank: peer, Reporter: ep.rank, Cause: err}
		}
		ep.mu.Unlock()
		ep.pollMu.Unlock()
	}
	return &Error{Op: op, Rank: ep.rank, Peer: peer, Tag: NoTag, Err: err}
}

// Len is the size of rank's window.
func (w *Window) Len(rank int) int {
	if rank < 0 || rank >= len(w.remote) {
		return 0
	}
	return w.remote[rank].len
}

// Iwrite starts writing src into peer's window at offset off. With notify
// set, the write carries value as a notification that the peer takes with
// WaitNotify once the data is in place. The request completes when the
// data has been placed in the peer's memory (RC semantics); src must not
// change until then. Writing to this rank's own window is a copy.
func (w *Window) Iwrite(peer, off int, src []byte, notify bool, value uint32) (*Request, error) {
	if notify && value&signalBit != 0 {
		return nil, &Error{Op: "Write", Rank: w.ep.rank, Peer: peer, Tag: NoTag,
			Err: fmt.Errorf("%w: notification value %#x has bit 30 set, which window signals reserve", ErrInvalidArgument, value)}
	}
	return w.iwrite(peer, off, src, notify, value, false, 0)
}

// IwriteNow is Iwrite without a notification, except that a write which
// is complete when it returns (a copy into the peer's window mapped in
// this process, see writeDirect) gives no request (nil, and no error):
// there is nothing to wait for or release.
func (w *Window) IwriteNow(peer, off int, src []byte) (*Request, error) {
	// A copy into a mapped window first, with only the checks it needs
	// (a member, a peer, off not negative; the mapping bounds the rest):
	// this is a Put over shm, whose whole cost is this software. Anything
	// else, errors included, takes iwrite and its full checks.
	ep := w.ep
	if w.writeFast(peer, off, src) {
		return nil, nil
	}
	if n := len(src); n > 0 && n <= directWriteMax && off >= 0 && peer >= 0 && peer < ep.size && peer != ep.rank && w.member[peer] && !w.noDirect[peer].Load() {
		if p := ep.peers[peer]; p != nil {
			_, c, err := w.writeDirect(p, off, src, false)
			if err == nil && c == n {
				return nil, nil
			}
			if err == nil && c > 0 {
				// The pieces copied are in place; the rest takes the
				// queue pair (a write queued meanwhile must not be
				// overtaken).
				return w.iwrite(peer, off+c, src[c:], false, 0, true, c)
			}
		}
	}
	return w.iwrite(peer, off, src, false, 0, true, 0)
}

// target checks an access of n bytes at off in peer's part of the window
// (a member, the window open, the bytes inside; verb names the access in
// the error: "writing" gives "writing 3 bytes", and "" "an 8-byte
// atomic"; the text is made only for an error, as formatting it on every
// write cost an allocation) and returns where that part is.
func (w *Window) target(peer, off, n int, verb string) (winKey, error) {
	if err := w.checkPeer(peer); err != nil {
		return winKey{}, err
	}
	if w.closed {
		return winKey{}, fmt.Errorf("window %w", ErrClosed)
	}
	rk := w.remote[peer]
	if off < 0 || off > rk.len || n > rk.len-off {
		what := fmt.Sprintf("an %d-byte atomic", n)
		if verb != "" {
			what = fmt.Sprintf("%s %d bytes", verb, n)
		}
		return winKey{}, fmt.Errorf("%w: %s at offset %d overruns rank %d's %d-byte window", ErrInvalidArgument, what, off, peer, rk.len)
	}
	return rk, nil
}

func (w *Window) iwrite(peer, off int, src []byte, notify bool, value uint32, bare bool, copied int) (*Request, error) {
	ep := w.ep
	bad := func(err error) (*Request, error) {
		return nil, &Error{Op: "Write", Rank: ep.rank, Peer: peer, Tag: NoTag, Err: err}
	}
	rk, err := w.target(peer, off, len(src), "writing")
	if err != nil {
		return bad(err)
	}
	count := copied + len(src)
	// IwriteNow (bare) has tried the direct copy already.
	if !bare && peer != ep.rank && !notify && len(src) > 0 && len(src) <= directWriteMax && !w.noDirect[peer].Load() {
		r, c, err := w.writeDirect(ep.peers[peer], off, src, true)
		if err != nil {
			return bad(err)
		}
		if c == len(src) {
			return r, nil
		}
		// What was copied is in place; the rest takes the queue pair.
		off, src = off+c, src[c:]
	}
	if p := ep.peers[peer]; bare && peer != ep.rank && len(src) > 0 && p.batcher != nil && (len(src) <= p.inline || p.runs != nil && len(src) <= runWriteMax) {
		// IwriteNow's small writes go inline, or into a run, without a
		// request, where the doorbell is a system call (window_inline.go).
		if ok, err := w.writeInline(p, rk.addr+uint64(off), rk.rkey, src); err != nil {
			return bad(err)
		} else if ok {
			return nil, nil
		}
	}
	r := ep.newWinReq()
	r.ep, r.op, r.peer, r.pattern, r.buf, r.notify32 = ep, opWrite, peer, envelope{tag: NoTag}, src, notify
	r.status = Status{Source: ep.rank, Count: count}
	if peer == ep.rank {
		ntcopy.Plain(w.buf[off:], src)
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if err := ep.checkLocked(); err != nil {
			return bad(err)
		}
		if notify {
			ep.noteLocked(ep.rank, value)
		}
		ep.completeLocked(r, nil)
		return r, nil
	}
	p := ep.peers[peer]
	r.rts = inbound{addr: rk.addr + uint64(off), rkey: rk.rkey, size: len(src), id: uint64(value)}
	if len(src) > 0 {
		if err := w.localBuf(p, r, src, "source"); err != nil {
			return bad(err)
		}
	}
	if err := ep.startWindowOp(p, r, bare && !notify); err != nil {
		return bad(err)
	}
	return r, nil
}

// directWriteMax is the largest write that goes straight into a peer's
// window mapped in this process (Direct) instead of through the queue
// pair: a copy that completes at once, without a work request, its
// completion or the poll that finds it, which made a small Put and Flush
// over shm many times MPI_Put's. The provider's copy of larger writes
// bypasses the caches (non-temporal stores), which took a Put and Flush
// of 128 KiB–512 KiB 5–14 times as long as this plain copy, 1 MiB twice,
// and 2–8 MiB 1.5–1.6 times MPI_Put's (a cached copy, as glibc's memcpy
// makes up to a large part of the last-level cache). Beyond this the data
// outgrows what caches keep, and the provider's streaming copy does as
// well.
const directWriteMax = 16 << 20

// directPiece bounds the copy made under one hold of the endpoint's lock
// (about 10 µs): a larger direct write takes the lock once per piece.
const directPiece = 512 << 10

// writeDirect writes src at off of p's part of the window with a plain
// copy when this process maps that part (Direct: the provider shares the
// peer's window memory), up to directPiece bytes per hold of the
// endpoint's lock, and returns how many bytes it copied: all of src, and
// then, if req, the completed request (a recycled one: Release gives it
// back), or fewer, when the rest must take the queue pair: no mapping, a
// link that is down or closing, or window operations still queued or
// posted (to any peer: their order must hold, and one map lookup is
// cheaper than a count per peer), which a copy now would overtake.
func (w *Window) writeDirect(p *peer, off int, src []byte, req bool) (*Request, int, error) {
	ep := w.ep
	for c := 0; ; {
		k := min(len(src)-c, directPiece)
		ep.mu.Lock()
		done, err := w.copyDirectLocked(p, off+c, src[c:c+k])
		if err != nil || !done {
			ep.mu.Unlock()
			return nil, c, err
		}
		if c += k; c == len(src) {
			// The last piece: the request completes under the same hold.
			var r *Request
			if req {
				r = ep.newReqLocked()
				r.op, r.peer, r.pattern, r.buf = opWrite, p.rank, envelope{tag: NoTag}, src
				r.status = Status{Source: ep.rank, Count: len(src)}
				ep.completeLocked(r, nil)
			}
			ep.mu.Unlock()
			return r, c, nil
		}
		ep.mu.Unlock()
		if betweenPieces != nil {
			betweenPieces()
		}
	}
}

// betweenPieces, when set (tests), runs between two pieces of a direct
// write, with the endpoint's lock free, as another goroutine's operation
// might.
var betweenPieces func()

// copyDirectLocked is writeDirect's copy (see there): false, having done
// nothing, when the write must take the queue pair; true with the
// endpoint's error when it has failed. The caller holds ep.mu.
func (w *Window) copyDirectLocked(p *peer, off int, src []byte) (bool, error) {
	ep := w.ep
	m := w.directLocked(p.rank)
	if off+len(src) > len(m) { // also no mapping (nil)
		return false, nil
	}
	if err := ep.checkLocked(); err != nil {
		return true, err
	}
	if w.closed || p.broken || p.departed || len(p.queue) > 0 || len(ep.writes) > 0 {
		return false, nil
	}
	ntcopy.Plain(m[off:], src)
	p.stats.WriteSent.add(len(src))
	return true, nil
}

// localBuf makes b, the local side of window operation r to p, reachable
// by the device: through the window's own registration when b lies inside
// the window, else through the registration cache. what names b in the
// error.
func (w *Window) localBuf(p *peer, r *Request, b []byte, what string) error {
	if mr := w.mrs[p.dev]; mr != nil && addrOf(b) >= addrOf(w.buf) && addrOf(b)+uintptr(len(b)) <= addrOf(w.buf)+uintptr(len(w.buf)) {
		r.winMR = mr
		return nil
	}
	reg, err := p.dev.cache.get(b)
	if err != nil {
		return fmt.Errorf("registering the %s buffer: %w", what, err)
	}
	r.reg, r.dev = reg, p.dev
	return nil
}

// startWindowOp hands window operation r (its target and local buffer
// set) to p's send queue, or completes it at once when it moves no bytes
// and notifies nobody. On a failed endpoint it releases r's registration
// and returns the failure.
func (ep *Endpoint) startWindowOp(p *peer, r *Request, lazy bool) error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	err := ep.checkLocked()
	if err == nil && p.departed {
		// Its endpoint, and the window with it, is gone: a write there
		// must not look done (over shm the provider could still reach
		// the memory), as a send to it does not.
		err = &PeerClosedError{Rank: p.rank}
	}
	if err != nil {
		if r.reg != nil {
			p.dev.cache.put(r.reg)
		}
		return err
	}
	if len(r.buf) == 0 && !r.notify32 && !r.fence {
		ep.completeLocked(r, nil)
		return nil
	}
	ep.opSeq++
	r.readID = ep.opSeq
	ep.addWriteLocked(r.readID, r)
	r.item = outItem{write: true, req: r}
	if !lazy || !ep.deferPostsLocked(p) {
		return p.send(ep, &r.item)
	}
	ep.deferring = true
	err = p.send(ep, &r.item)
	ep.deferring = false
	if ep.deferred >= deferMaxPosts {
		ep.releasePostsLocked()
	}
	return err
}

func (ep *Endpoint) postWriteLocked(p *peer, r *Request) error {
	op := verbs.OpRDMAWrite
	switch {
	case r.op == opWinRead:
		op = verbs.OpRDMARead
	case r.op == opWinAtomic:
		op = r.atomic
	case r.notify32:
		op = verbs.OpRDMAWriteWithImm
	}
	p.swr[0] = verbs.SendWR{ID: wrID(wrWrite, p.rank, r.readID), Opcode: op, Flags: verbs.SendSignaled,
		RemoteAddr: r.rts.addr, RKey: r.rts.rkey, Imm: uint32(r.rts.id), CompareAdd: r.cmpAdd, Swap: r.swap}
	if len(r.buf) > 0 {
		switch {
		case r.winMR != nil:
			p.sge[0] = verbs.SGE{Addr: r.winMR.Addr() + uint64(addrOf(r.buf)-addrOf(r.winMR.Bytes())), Length: uint32(len(r.buf)), LKey: r.winMR.LKey()}
		default:
			p.sge[0] = verbs.SGE{Addr: r.reg.addr(r.buf), Length: uint32(len(r.buf)), LKey: r.reg.mr.LKey()}
		}
		p.swr[0].SGL = p.sge[:]
	}
	ep.holdPosts(p)
	if err := p.runErr; err != nil && r.fence {
		p.runErr = nil
		return err // the writes it was to fence were not posted
	}
	if err := p.qp.PostSend(p.swr[:]...); err != nil {
		return err
	}
	if r.fence {
		// Signaled, it completes after every unsignaled request before
		// it: without this, their entries stayed taken until the next
		// signaled inline one, which a run of larger writes never posts.
		r.covers, p.unsig = p.unsig, 0
	}
	if r.notify32 {
		p.credits--
	}
	p.sqOut++ // not p.sent: a write is no frame the peer's liveness sees
	return nil
}

// Iread starts reading len(dst) bytes at offset off of peer's window into
// dst (RDMA READ: the peer's CPU takes no part). The request completes
// when dst holds the data; dst must not be touched until then. A read
// outside the window the peer published fails here, naming the peer, the
// offset and the window's size, and the provider checks the key and the
// bounds again on the wire. Reading this rank's own window is a copy.
// Reads use a window write's path (send queue, completion, link failure).
func (w *Window) Iread(peer, off int, dst []byte) (*Request, error) {
	ep := w.ep
	bad := func(err error) (*Request, error) {
		return nil, &Error{Op: "Read", Rank: ep.rank, Peer: peer, Tag: NoTag, Err: err}
	}
	rk, err := w.target(peer, off, len(dst), "reading")
	if err != nil {
		return bad(err)
	}
	r := ep.newWinReq()
	r.ep, r.op, r.peer, r.pattern, r.buf = ep, opWinRead, peer, envelope{tag: NoTag}, dst
	r.status = Status{Source: peer, Count: len(dst)}
	if peer == ep.rank || len(dst) == 0 {
		if peer == ep.rank {
			ntcopy.Plain(dst, w.buf[off:])
		}
		ep.mu.Lock()
		defer ep.mu.Unlock()
		if err := ep.checkLocked(); err != nil {
			return bad(err)
		}
		ep.completeLocked(r, nil)
		return r, nil
	}
	p := ep.peers[peer]
	r.rts = inbound{addr: rk.addr + uint64(off), rkey: rk.rkey, size: len(dst)}
	if err := w.localBuf(p, r, dst, "destination"); err != nil {
		return bad(err)
	}
	if err := ep.startWindowOp(p, r, false); err != nil {
		return bad(err)
	}
	return r, nil
}

// Write writes src into peer's window at off and waits until it is placed.
// When ctx ends while the write still queues (for credits or send-queue
// room) it is canceled; once posted it completes on its own, src in use
// until then, and the error says it is still in progress.
func (w *Window) Write(ctx context.Context, peer, off int, src []byte) error {
	r, err := w.Iwrite(peer, off, src, false, 0)
	if err != nil {
		return err
	}
	_, err = r.Wait(ctx)
	return err
}

// WriteNotify writes src into peer's window at off with notification value,
// and waits until it is placed.
func (w *Window) WriteNotify(ctx context.Context, peer, off int, src []byte, value uint32) error {
	r, err := w.Iwrite(peer, off, src, true, value)
	if err != nil {
		return err
	}
	_, err = r.Wait(ctx)
	return err
}

// WaitNotify is Endpoint.WaitNotify (notifications are per endpoint).
func (w *Window) WaitNotify(ctx context.Context, src int) (Notification, error) {
	return w.ep.WaitNotify(ctx, src)
}

// Close deregisters the window. It is a collective: every rank calls it,
// and it returns once every rank has stopped writing into every window
// (each rank's writes complete before its close message is sent).
func (w *Window) Close(ctx context.Context) error {
	ep := w.ep
	if w.closed {
		return nil
	}
	for i := range w.fast {
		w.fast[i].Store(nil)
	}
	w.closed = true
	c, tag := w.ch, w.tag
	var reqs []*Request
	var err error
	for r, p := range ep.peers {
		if p == nil || !w.member[r] {
			continue
		}
		var rr, sr *Request
		if rr, err = c.Irecv(r, tag, nil); err != nil {
			break
		}
		if sr, err = c.Isend(r, tag, nil); err != nil {
			break
		}
		reqs = append(reqs, rr, sr)
	}
	if err == nil {
		err = WaitAll(ctx, reqs...)
	}
	for _, mr := range w.mrs {
		_ = mr.Close()
	}
	ep.mu.Lock()
	ep.dropSlotLocked(w)
	ep.mu.Unlock()
	return err
}

// PollNotify takes the oldest notification from src (or AnySource), if any.
func (ep *Endpoint) PollNotify(src int) (Notification, bool, error) {
	ep.progress()
	ep.mu.Lock()
	defer ep.mu.Unlock()
	n, ok := ep.takeNoteLocked(src)
	if ok {
		return n, true, nil
	}
	if err := ep.checkLocked(); err != nil {
		return Notification{}, false, &Error{Op: "WaitNotify", Rank: ep.rank, Peer: src, Tag: NoTag, Err: err}
	}
	return Notification{}, false, nil
}

func (ep *Endpoint) takeNoteLocked(src int) (Notification, bool) {
	for i, n := range ep.notes {
		if src == AnySource || n.Source == src {
			ep.notes = append(ep.notes[:i], ep.notes[i+1:]...)
			return n, true
		}
	}
	return Notification{}, false
}

// WaitNotify waits for the oldest notification from src (or AnySource).
// When ctx ends first, the error names src as not arrived.
func (ep *Endpoint) WaitNotify(ctx context.Context, src int) (Notification, error) {
	if src < AnySource || src >= ep.size {
		return Notification{}, &Error{Op: "WaitNotify", Rank: ep.rank, Peer: src, Tag: NoTag,
			Err: fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, src, ep.size)}
	}
	var got Notification
	var gerr error
	take := func() bool {
		n, ok, err := ep.PollNotify(src)
		got, gerr = n, err
		return ok || err != nil
	}
	ch := make(chan struct{}, 1)
	for {
		if ep.poll(ctx, take) {
			return got, gerr
		}
		ep.mu.Lock()
		ep.arrivals = append(ep.arrivals, ch)
		ep.mu.Unlock()
		if take() {
			return got, gerr
		}
		ep.handOff()
		select {
		case <-ch:
		case <-ctx.Done():
			de := &DeadlineError{Any: src == AnySource, What: "no notification", Cause: ctx.Err()}
			if src >= 0 {
				de.Ranks = []int{src}
			}
			return Notification{}, &Error{Op: "WaitNotify", Rank: ep.rank, Peer: src, Tag: NoTag, Err: de}
		}
	}
}

// writeFast is IwriteNow's copy into peer's mapped part of the window
// without ep.mu: it makes the copy and reports true only where
// writeDirect would have made it too (a mapping made before, src inside
// it and at most directPiece bytes, the endpoint up, the peer not gone, no
// window operation queued or posted), reading those conditions from
// atomics. The lock's two atomic operations were a third of a small Put
// over shm, and a window of small Puts ran 1.5-1.8 times as fast without
// them. Closing the window or the endpoint while a Put runs is the
// caller's error, as it is with MPI_Put and MPI_Win_free.
func (w *Window) writeFast(peer, off int, src []byte) bool {
	ep, n := w.ep, len(src)
	if n == 0 || n > directPiece || off < 0 || peer < 0 || peer >= len(w.fast) {
		return false
	}
	m := w.fast[peer].Load()
	if m == nil || off > len(*m)-n || ep.down.Load() || ep.nwrites.Load() != 0 {
		return false
	}
	p := ep.peers[peer]
	if p.gone.Load() {
		return false
	}
	p.countFastWrite(n)
	ntcopy.Plain((*m)[off:], src)
	return true
}
