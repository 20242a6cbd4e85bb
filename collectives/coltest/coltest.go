package coltest

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/p2p"
)

// Sentinel causes of the fake's errors: the p2p layer's own values, so
// that the collectives see from the fake what they see from p2p.
var (
	// ErrPeerLost: a rank of the world was killed (Kill or FailAfter).
	// Every pending and later operation on every rank fails with a
	// *PeerLostError wrapping it, as the p2p layer promises.
	ErrPeerLost = p2p.ErrPeerLost
	// ErrTruncated: a message was larger than the receive buffer.
	ErrTruncated = p2p.ErrTruncated
	// ErrInvalid: bad arguments (peer out of range, negative tag, ...).
	ErrInvalid = p2p.ErrInvalidArgument
	// ErrCanceled: a receive was canceled before it matched.
	ErrCanceled = p2p.ErrCanceled
)

// PeerLostError names the lost rank.
type PeerLostError struct{ Rank int }

func (e *PeerLostError) Error() string { return fmt.Sprintf("rank %d lost", e.Rank) }
func (e *PeerLostError) Unwrap() error { return ErrPeerLost }

// Options shape a World.
type Options struct {
	// Hosts gives each rank's host index; when set, groups implement
	// collectives.Topology. Its length must be the rank count.
	Hosts []int
	// OneSided makes groups implement collectives.OneSided.
	OneSided bool
	// Latency and Bandwidth, when Latency > 0, make groups implement
	// collectives.LinkInfo. Inter* apply between different hosts (default:
	// the same as intra).
	Latency, InterLatency     time.Duration
	Bandwidth, InterBandwidth float64
	// FailAfter kills rank FailRank once it has sent FailAfter messages
	// (0 disables). It simulates a peer dying in the middle of a collective.
	FailRank, FailAfter int
	// Shared makes groups implement collectives.SharedMemoryGroup, with a
	// region of collectives.SharedRegionSize(SharedSlot) bytes per rank in
	// this process's memory (it cannot be combined with the other
	// capabilities). SharedSlot 0 means 8 KiB, small so that tests cross
	// rounds.
	Shared     bool
	SharedSlot int
	// SharedPolicy, when not nil, is the shared region's WaitPolicy
	// (default: yield to the other goroutines and never sleep).
	SharedPolicy *shmsync.Policy
	// PeerWriteErr, when not nil, is what the shared region's WritePeer
	// returns (a failing process_vm_writev); PeerReadErr likewise for
	// ReadPeer (process_vm_readv).
	PeerWriteErr error
	PeerReadErr  error
	// Crowded is what the shared region's Crowded reports (ranks that
	// outnumber their CPUs).
	Crowded bool
	// SingleCopyMin is what Shared groups report as
	// collectives.SingleCopy's measured crossover (0: none).
	SingleCopyMin int
	// Crowding, when > 0 with Hosts and Latency, makes groups implement
	// collectives.Crowding, reporting it (ranks per CPU on the most
	// crowded host).
	Crowding float64
	// FoldLimit is what the groups' FoldLimit reports (0: no limit).
	FoldLimit int
	// RefuseNow makes the groups' SendNow (collectives.NowSender) send
	// nothing and report false, as a transport whose link is backed up
	// does, so that the Engine sends with Isend instead.
	RefuseNow bool
	// SyncSends makes a send complete only once a receive has taken its
	// message, as a rendezvous send does (and SendNow refuse, as with
	// RefuseNow): a sender that waits for a receiver that has not
	// arrived then waits too.
	SyncSends bool
}

// World is N ranks connected by in-memory mailboxes. Messages are copied at
// Isend (an eager protocol), so sends complete at once (unless
// Options.SyncSends); receives match per
// (source, tag) in FIFO order.
type World struct {
	n     int
	opts  Options
	boxes []*mailbox

	mu    sync.Mutex
	lost  error // *PeerLostError once a rank died
	sent  []int
	wins  map[int][]*window // exposure index → window per rank
	wexp  []int             // per rank: number of Expose calls so far
	wcond *sync.Cond

	shared [][]byte      // Options.Shared: per rank, its region
	failed chan struct{} // closed by Kill
	down   atomic.Bool   // set by Kill before it closes failed (FailFlag)

	folds    atomic.Int64 // fold receives posted (IrecvFold)
	parts    atomic.Int64 // parts receives posted (IrecvParts)
	sends    atomic.Int64 // parts sends (IsendParts, or SendNow with a head)
	nows     atomic.Int64 // messages sent by SendNow
	nowParts atomic.Int64 // of those, parts sends (with a head)
}

// Folds is how many fold receives (collectives.FoldReceiver) the world's
// ranks have posted.
func (w *World) Folds() int64 { return w.folds.Load() }

// Parts is how many parts receives (collectives.PartsReceiver) the world's
// ranks have posted.
func (w *World) Parts() int64 { return w.parts.Load() }

// PartsSent is how many parts sends the world's ranks have made: with
// IsendParts (collectives.PartsSender), or with SendNow with a head.
func (w *World) PartsSent() int64 { return w.sends.Load() }

// NowPartsSent is how many of the parts sends went by SendNow.
func (w *World) NowPartsSent() int64 { return w.nowParts.Load() }

// NowSent is how many messages the world's ranks have sent with SendNow
// (collectives.NowSender).
func (w *World) NowSent() int64 { return w.nows.Load() }

// NewWorld makes a world of n ranks.
func NewWorld(n int, opts Options) *World {
	w := &World{n: n, opts: opts, sent: make([]int, n), wins: map[int][]*window{}, wexp: make([]int, n)}
	w.wcond = sync.NewCond(&w.mu)
	w.failed = make(chan struct{})
	if opts.Shared {
		for range n {
			size := collectives.SharedRegionSize(cmp.Or(opts.SharedSlot, 8<<10))
			words := make([]uint64, (size+7)/8)
			w.shared = append(w.shared, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(words))), size))
		}
	}
	for i := 0; i < n; i++ {
		w.boxes = append(w.boxes, &mailbox{w: w, queues: map[key]*queue{}, anyRecvs: map[int][]*request{}})
	}
	return w
}

// Group returns rank's view of the world. What it implements depends on
// Options: always collectives.Group; OneSided, Topology, LinkInfo when
// configured.
func (w *World) Group(rank int) collectives.Group {
	g := &group{w: w, rank: rank}
	hasTopo, hasLink := w.opts.Hosts != nil, w.opts.Latency > 0
	switch {
	case w.opts.Shared:
		return struct {
			*group
			*shared
		}{g, &shared{g}}
	case w.opts.OneSided && hasTopo && hasLink:
		return struct {
			*group
			*oneSided
			*topo
			*link
		}{g, &oneSided{g}, &topo{g}, &link{g}}
	case w.opts.OneSided && hasTopo:
		return struct {
			*group
			*oneSided
			*topo
		}{g, &oneSided{g}, &topo{g}}
	case w.opts.OneSided && hasLink:
		return struct {
			*group
			*oneSided
			*link
		}{g, &oneSided{g}, &link{g}}
	case hasTopo && hasLink && w.opts.Crowding > 0:
		return struct {
			*group
			*topo
			*link
			*crowding
		}{g, &topo{g}, &link{g}, &crowding{g}}
	case hasTopo && hasLink:
		return struct {
			*group
			*topo
			*link
		}{g, &topo{g}, &link{g}}
	case w.opts.OneSided:
		return struct {
			*group
			*oneSided
		}{g, &oneSided{g}}
	case hasTopo:
		return struct {
			*group
			*topo
		}{g, &topo{g}}
	case hasLink:
		return struct {
			*group
			*link
		}{g, &link{g}}
	}
	return g
}

// Kill simulates the loss of rank: every pending and later operation of
// every rank fails with a *PeerLostError naming it.
func (w *World) Kill(rank int) {
	w.mu.Lock()
	if w.lost == nil {
		w.lost = &PeerLostError{Rank: rank}
		w.down.Store(true)
		close(w.failed)
	}
	err := w.lost
	w.wcond.Broadcast()
	w.mu.Unlock()
	for _, b := range w.boxes {
		b.failAll(err)
	}
	w.mu.Lock()
	for _, ws := range w.wins {
		for _, win := range ws {
			if win != nil {
				for _, q := range win.notes {
					q.fail(err)
				}
			}
		}
	}
	w.mu.Unlock()
}

func (w *World) lostErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lost
}

// Run runs fn on every rank in its own goroutine and returns each rank's
// error.
func (w *World) Run(fn func(rank int, g collectives.Group) error) []error {
	errs := make([]error, w.n)
	var wg sync.WaitGroup
	for r := 0; r < w.n; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(r, w.Group(r))
		}()
	}
	wg.Wait()
	return errs
}

type key struct{ src, tag int }

// queue holds, for one (source, tag) at one receiver, the messages that
// arrived before a receive and the receives posted before a message.
type queue struct {
	msgs  []queued
	recvs []*request
}

// queued is a message that arrived before its receive; sent is its send's
// request, completed when a receive takes it (Options.SyncSends), or nil.
type queued struct {
	data []byte
	sent *request
}

// take delivers m to r and completes m's send, if it waits.
func (m queued) take(r *request) {
	deliver(r, m.data)
	if m.sent != nil {
		m.sent.complete(len(m.data), nil)
	}
}

type mailbox struct {
	w        *World
	mu       sync.Mutex
	queues   map[key]*queue
	anyRecvs map[int][]*request // receives from any source, per tag
}

func (b *mailbox) q(k key) *queue {
	q := b.queues[k]
	if q == nil {
		q = &queue{}
		b.queues[k] = q
	}
	return q
}

func (b *mailbox) failAll(err error) {
	b.mu.Lock()
	var rs []*request
	for _, q := range b.queues {
		rs = append(rs, q.recvs...)
		q.recvs = nil
		for _, m := range q.msgs {
			if m.sent != nil {
				rs = append(rs, m.sent)
			}
		}
	}
	for tag, ar := range b.anyRecvs {
		rs = append(rs, ar...)
		delete(b.anyRecvs, tag)
	}
	b.mu.Unlock()
	for _, r := range rs {
		r.complete(0, err)
	}
}

func (b *mailbox) remove(k key, r *request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if k.src < 0 {
		ar := b.anyRecvs[k.tag]
		for i, x := range ar {
			if x == r {
				b.anyRecvs[k.tag] = append(ar[:i], ar[i+1:]...)
				return true
			}
		}
		return false
	}
	q := b.queues[k]
	if q == nil {
		return false
	}
	for i, x := range q.recvs {
		if x == r {
			q.recvs = append(q.recvs[:i], q.recvs[i+1:]...)
			return true
		}
	}
	return false
}

// request is a fake Isend/Irecv.
type request struct {
	done chan struct{}
	n    int
	err  error
	buf  []byte
	once sync.Once
	// A fold receive (IrecvFold): the message is folded into buf.
	fold func(dst, src []byte)
	unit int
	// A parts receive (IrecvParts): the message's head goes to head, the
	// rest to buf.
	head []byte

	// A pending receive: where it is queued, so that Cancel can take it out.
	box *mailbox
	key key
	// A pending send (Options.SyncSends): the receiver's mailbox and key
	// under which its message waits, for Cancel.
	sendBox *mailbox
}

func (r *request) complete(n int, err error) {
	r.once.Do(func() {
		r.n, r.err = n, err
		close(r.done)
	})
}

// Cancel takes a receive that has not matched, or a send whose message
// no receive has taken (Options.SyncSends), out of its queue; it then
// completes with ErrCanceled. Other sends have completed and ignore it.
func (r *request) Cancel() {
	if r.box != nil && r.box.remove(r.key, r) {
		r.complete(0, ErrCanceled)
	}
	if r.sendBox != nil && r.sendBox.unsend(r.key, r) {
		r.complete(0, ErrCanceled)
	}
}

// unsend takes the message of the pending send r out of queue k.
func (b *mailbox) unsend(k key, r *request) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queues[k]
	if q == nil {
		return false
	}
	for i, m := range q.msgs {
		if m.sent == r {
			q.msgs = append(q.msgs[:i], q.msgs[i+1:]...)
			return true
		}
	}
	return false
}

func (r *request) Wait(ctx context.Context) (int, error) {
	select {
	case <-r.done:
		return r.n, r.err
	default:
	}
	select {
	case <-r.done:
		return r.n, r.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func doneRequest(n int, err error) *request {
	r := &request{done: make(chan struct{}), n: n, err: err}
	close(r.done)
	return r
}

type group struct {
	w    *World
	rank int
}

func (g *group) Rank() int { return g.rank }
func (g *group) Size() int { return g.w.n }

func (g *group) check(peer, tag int, buf []byte) error {
	if peer < 0 || peer >= g.w.n {
		return fmt.Errorf("%w: peer %d out of range [0, %d)", ErrInvalid, peer, g.w.n)
	}
	if tag < 0 {
		return fmt.Errorf("%w: negative tag %d", ErrInvalid, tag)
	}
	return g.w.lostErr()
}

func (g *group) Isend(peer, tag int, buf []byte) (collectives.Request, error) {
	if err := g.check(peer, tag, buf); err != nil {
		return nil, err
	}
	w := g.w
	if w.opts.FailAfter > 0 && g.rank == w.opts.FailRank {
		w.mu.Lock()
		w.sent[g.rank]++
		die := w.sent[g.rank] >= w.opts.FailAfter
		w.mu.Unlock()
		if die {
			w.Kill(g.rank)
			return nil, w.lostErr()
		}
	}
	msg := append([]byte(nil), buf...)
	b := w.boxes[peer]
	k := key{g.rank, tag}
	b.mu.Lock()
	q := b.q(k)
	if len(q.recvs) > 0 {
		r := q.recvs[0]
		q.recvs = q.recvs[1:]
		b.mu.Unlock()
		deliver(r, msg)
	} else if ar := b.anyRecvs[tag]; len(ar) > 0 {
		r := ar[0]
		b.anyRecvs[tag] = ar[1:]
		b.mu.Unlock()
		deliver(r, msg)
	} else if w.opts.SyncSends {
		sent := &request{done: make(chan struct{}), sendBox: b, key: k}
		q.msgs = append(q.msgs, queued{data: msg, sent: sent})
		b.mu.Unlock()
		// The receiver may have died between the check and the enqueue.
		if err := w.lostErr(); err != nil {
			sent.complete(0, err)
		}
		return sent, nil
	} else {
		q.msgs = append(q.msgs, queued{data: msg})
		b.mu.Unlock()
	}
	return doneRequest(len(buf), nil), nil
}

func deliver(r *request, msg []byte) {
	if r.head != nil {
		// What fits, head first, as p2p places an eager message.
		n := copy(r.head, msg)
		n += copy(r.buf, msg[n:])
		if n < len(msg) {
			r.complete(n, fmt.Errorf("%w: %d-byte message, %d+%d-byte buffers", ErrTruncated, len(msg), len(r.head), len(r.buf)))
			return
		}
		r.complete(n, nil)
		return
	}
	if len(msg) > len(r.buf) {
		r.complete(0, fmt.Errorf("%w: %d-byte message, %d-byte buffer", ErrTruncated, len(msg), len(r.buf)))
		return
	}
	if r.fold == nil {
		r.complete(copy(r.buf, msg), nil)
		return
	}
	// In pieces of three elements, as a transport folds the fragments of a
	// message as they arrive.
	step := 3 * r.unit
	for off := 0; off < len(msg); off += step {
		end := min(off+step, len(msg))
		r.fold(r.buf[off:end], msg[off:end])
	}
	r.complete(len(msg), nil)
}

func (g *group) Irecv(peer, tag int, buf []byte) (collectives.Request, error) {
	return g.irecv(peer, tag, nil, buf, 0, nil)
}

// IrecvFold is the FoldReceiver capability: the message is folded into buf
// in pieces of three elements (a wrapper that embeds only
// collectives.Group hides it, for the engine's path without it).
func (g *group) IrecvFold(peer, tag int, buf []byte, unit int, fold func(dst, src []byte)) (collectives.Request, error) {
	if fold == nil || unit < 1 {
		return nil, fmt.Errorf("%w: fold needs a function and a unit (got %d)", ErrInvalid, unit)
	}
	g.w.folds.Add(1)
	return g.irecv(peer, tag, nil, buf, unit, fold)
}

// SendNow is the NowSender capability: Isend's eager copy of head and then
// body, reported as sent (a wrapper that embeds only collectives.Group
// hides it), and counted as a parts send too when head is set; with
// Options.RefuseNow it sends nothing and reports false.
func (g *group) SendNow(peer, tag int, head, body []byte) (bool, error) {
	if g.w.opts.RefuseNow || g.w.opts.SyncSends {
		return false, nil
	}
	buf := body
	if head != nil {
		buf = joined(head, body)
	}
	if _, err := g.Isend(peer, tag, buf); err != nil {
		return true, err
	}
	g.w.nows.Add(1)
	if head != nil {
		g.w.sends.Add(1)
		g.w.nowParts.Add(1)
	}
	return true, nil
}

// joined is a message of head and then body in one new buffer, as a
// parts send delivers it.
func joined(head, body []byte) []byte {
	return append(append(make([]byte, 0, len(head)+len(body)), head...), body...)
}

// IsendParts is the PartsSender capability: one message of head and then
// body (a wrapper that embeds only collectives.Group hides it).
func (g *group) IsendParts(peer, tag int, head, body []byte) (collectives.Request, error) {
	g.w.sends.Add(1)
	return g.Isend(peer, tag, joined(head, body))
}

// IrecvParts is the PartsReceiver capability: the message's first
// len(head) bytes go to head, the rest to body (a wrapper that embeds only
// collectives.Group hides it, for the engine's path without it).
func (g *group) IrecvParts(peer, tag int, head, body []byte) (collectives.Request, error) {
	if head == nil {
		head = []byte{}
	}
	g.w.parts.Add(1)
	return g.irecv(peer, tag, head, body, 0, nil)
}

// FoldLimit is Options.FoldLimit, unlimited when 0.
func (g *group) FoldLimit(peer int) int {
	if g.w.opts.FoldLimit > 0 {
		return g.w.opts.FoldLimit
	}
	return math.MaxInt
}

func (g *group) irecv(peer, tag int, head, buf []byte, unit int, fold func(dst, src []byte)) (collectives.Request, error) {
	if err := g.check(peer, tag, buf); err != nil {
		return nil, err
	}
	b := g.w.boxes[g.rank]
	k := key{peer, tag}
	r := &request{done: make(chan struct{}), buf: buf, head: head, box: b, key: k, fold: fold, unit: unit}
	b.mu.Lock()
	q := b.q(k)
	if len(q.msgs) > 0 {
		m := q.msgs[0]
		q.msgs = q.msgs[1:]
		b.mu.Unlock()
		m.take(r)
		return r, nil
	}
	q.recvs = append(q.recvs, r)
	b.mu.Unlock()
	// A rank may have died between the check and the enqueue.
	if err := g.w.lostErr(); err != nil && b.remove(k, r) {
		r.complete(0, err)
	}
	return r, nil
}

// IrecvAny receives the next message with tag from any rank (specific
// receives of the same tag are served first; the fake does not keep MPI's
// posting order between the two kinds).
func (g *group) IrecvAny(tag int, buf []byte) (collectives.Request, error) {
	if err := g.check(0, tag, buf); err != nil {
		return nil, err
	}
	b := g.w.boxes[g.rank]
	k := key{-1, tag}
	r := &request{done: make(chan struct{}), buf: buf, box: b, key: k}
	b.mu.Lock()
	for k, q := range b.queues {
		if k.tag == tag && len(q.msgs) > 0 {
			m := q.msgs[0]
			q.msgs = q.msgs[1:]
			b.mu.Unlock()
			m.take(r)
			return r, nil
		}
	}
	b.anyRecvs[tag] = append(b.anyRecvs[tag], r)
	b.mu.Unlock()
	if err := g.w.lostErr(); err != nil && b.remove(k, r) {
		r.complete(0, err)
	}
	return r, nil
}

// shared is the SharedMemoryGroup capability: the ranks are goroutines, so
// their regions are ordinary memory of this process.
type shared struct{ g *group }

func (s *shared) Shared() collectives.SharedRegion { return s }

func (s *shared) Mem(rank int) []byte {
	if rank < 0 || rank >= len(s.g.w.shared) {
		return nil
	}
	return s.g.w.shared[rank]
}

func (s *shared) Failed() <-chan struct{} { return s.g.w.failed }
func (s *shared) Err() error              { return s.g.w.lostErr() }

// FailFlag is collectives.FailFlagger's flag: Kill sets it.
func (s *shared) FailFlag() *atomic.Bool { return &s.g.w.down }

// WaitPolicy: the ranks are goroutines, so waits yield to them and never
// sleep, unless Options.SharedPolicy says otherwise.
func (s *shared) WaitPolicy() shmsync.Policy {
	if p := s.g.w.opts.SharedPolicy; p != nil {
		return *p
	}
	return shmsync.Policy{Yield: shmsync.Forever, Gosched: true}
}

// Crowded makes the region a collectives.Crowded, as Options.Crowded says.
func (s *shared) Crowded() bool { return s.g.w.opts.Crowded }

// SingleCopyMin makes the group a collectives.SingleCopy, reporting
// Options.SingleCopyMin.
func (s *shared) SingleCopyMin() int { return s.g.w.opts.SingleCopyMin }

// CanReadPeer and ReadPeer make the region a collectives.PeerReader: the
// ranks share this process, so reading a rank's memory is a copy from the
// address it published (the owner keeps it alive and unchanged meanwhile).
func (s *shared) CanReadPeer() bool { return true }

func (s *shared) ReadPeer(rank int, addr uint64, dst []byte) error {
	if err := s.g.w.opts.PeerReadErr; err != nil {
		return err
	}
	src, err := s.peerMem(rank, addr, dst)
	copy(dst, src)
	return err
}

// WritePeer makes the region a collectives.PeerWriter, like ReadPeer.
func (s *shared) WritePeer(rank int, addr uint64, src []byte) error {
	if err := s.g.w.opts.PeerWriteErr; err != nil {
		return err
	}
	dst, err := s.peerMem(rank, addr, src)
	copy(dst, src)
	return err
}

// peerMem is the len(b) bytes at addr that rank published (this process's
// memory), after ReadPeer and WritePeer's checks.
func (s *shared) peerMem(rank int, addr uint64, b []byte) ([]byte, error) {
	if err := s.g.check(rank, 0, b); err != nil || len(b) == 0 {
		return nil, err
	}
	p := uintptr(addr)
	return unsafe.Slice((*byte)(*(*unsafe.Pointer)(unsafe.Pointer(&p))), len(b)), nil
}

type topo struct{ g *group }

func (t *topo) HostOf(rank int) int {
	if rank < 0 || rank >= len(t.g.w.opts.Hosts) {
		return -1
	}
	return t.g.w.opts.Hosts[rank]
}

type link struct{ g *group }

type crowding struct{ g *group }

func (c *crowding) Crowding() float64 { return c.g.w.opts.Crowding }

func (l *link) Link(peer int) (time.Duration, float64) {
	o := &l.g.w.opts
	if o.Hosts != nil && o.Hosts[peer] != o.Hosts[l.g.rank] && o.InterLatency > 0 {
		bw := o.InterBandwidth
		if bw == 0 {
			bw = o.Bandwidth
		}
		return o.InterLatency, bw
	}
	return o.Latency, o.Bandwidth
}
