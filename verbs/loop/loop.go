package loop

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// Name is the provider name.
const Name = "loop"

func init() { verbs.Register(provider{}) }

type provider struct{}

func (provider) Name() string { return Name }

// Traits: loop is for tests and is used only when named. Each protocol
// round trip costs goroutine hand-offs, which makes eager pay up to 32 KiB.
func (provider) Traits() verbs.Traits {
	return verbs.Traits{EagerSize: 32 << 10, RegCache: verbs.SoftRegCache}
}

// CanConnect: loop connects ranks of one process.
func (provider) CanConnect(local, remote verbs.PeerInfo) bool { return local.SameProcess(remote) }

func (provider) Open(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error) {
	return Open(ctx, Options{Name: o.Name, ConnectTimeout: o.ConnectTimeout, Logger: o.Logger})
}

// Options configure a loop device.
type Options struct {
	// Name is the device name; empty picks "loop<N>".
	Name string
	// ConnectTimeout bounds how long a QP in RTR waits for its peer to reach
	// RTR too before posted work fails with RETRY_EXC_ERR. Zero means 30 s.
	ConnectTimeout time.Duration
	// Logger receives diagnostics; nil is silent.
	Logger *slog.Logger
}

// ErrDisconnected is the cause logged when a loop link is dropped.
var ErrDisconnected = verbs.ErrDisconnected

// The process-wide table devices reach each other through. A QP address's
// provider payload is the 8-byte device id, big-endian.
var (
	tableMu sync.Mutex
	devices = map[uint64]*transport{}
	nextID  uint64
)

type transport struct {
	id      uint64
	dev     *softrc.Device
	pending map[*softrc.QP]struct{} // QPs in RTR waiting for their peer
}

// Open opens a loop device.
func Open(ctx context.Context, o Options) (verbs.Device, error) {
	if err := ctx.Err(); err != nil {
		return nil, &verbs.Error{Op: "Open", Provider: Name, Index: -1, Err: err}
	}
	tableMu.Lock()
	defer tableMu.Unlock()
	nextID++
	t := &transport{id: nextID, pending: map[*softrc.QP]struct{}{}}
	name := o.Name
	if name == "" {
		name = fmt.Sprintf("loop%d", t.id)
	}
	caps := softrc.DefaultCaps()
	caps.Latency = time.Microsecond
	caps.Bandwidth = 10e9
	t.dev = softrc.NewDevice(softrc.Config{Provider: Name, Name: name, Caps: caps,
		ConnectTimeout: o.ConnectTimeout, Logger: o.Logger}, t)
	devices[t.id] = t
	return t.dev, nil
}

func (t *transport) AddressPayload(uint32) []byte {
	return binary.BigEndian.AppendUint64(nil, t.id)
}

func (t *transport) CheckRemote(p []byte) error {
	if len(p) != 8 {
		return fmt.Errorf("%w: loop address payload of %d bytes, want 8", verbs.ErrInvalidArgument, len(p))
	}
	return nil
}

func (t *transport) Close() error {
	tableMu.Lock()
	delete(devices, t.id)
	t.pending = nil
	tableMu.Unlock()
	return nil
}

// Forget drops q from the pending table (it was closed or reset), and fails
// a QP that waits to pair with it: that pairing can never happen now.
func (t *transport) Forget(q *softrc.QP) {
	var orphans []*softrc.QP
	tableMu.Lock()
	delete(t.pending, q)
	for _, pt := range devices {
		for p := range pt.pending {
			r := p.Remote()
			if binary.BigEndian.Uint64(r.Payload) == t.id && r.QPNum == q.Num() {
				delete(pt.pending, p)
				orphans = append(orphans, p)
			}
		}
	}
	tableMu.Unlock()
	for _, p := range orphans {
		p.FailConnect(fmt.Errorf("loop: peer qp %#x was closed before it connected", q.Num()))
	}
}

// Connect pairs q with its peer once both are in RTR and name each other;
// until then q waits in pending (and the core's connect timer runs).
func (t *transport) Connect(q *softrc.QP) {
	r := q.Remote()
	peerID := binary.BigEndian.Uint64(r.Payload)
	tableMu.Lock()
	if t.pending == nil {
		tableMu.Unlock()
		return
	}
	var p *softrc.QP
	pt := devices[peerID]
	if pt != nil {
		p = pt.dev.QP(r.QPNum)
	}
	if p == nil {
		// The address names a device or QP that no longer exists.
		tableMu.Unlock()
		q.FailConnect(fmt.Errorf("loop: peer device %d qp %#x does not exist", peerID, r.QPNum))
		return
	}
	var peer *softrc.QP
	if _, ok := pt.pending[p]; ok {
		if pr := p.Remote(); binary.BigEndian.Uint64(pr.Payload) == t.id && pr.QPNum == q.Num() {
			peer = p
			delete(pt.pending, p)
		}
	}
	if peer == nil {
		t.pending[q] = struct{}{}
		tableMu.Unlock()
		return
	}
	tableMu.Unlock()
	pr := &pair{}
	pr.a = &end{q: q, peer: peer, pair: pr, progress: q.Progress}
	pr.b = &end{q: peer, peer: q, pair: pr, progress: peer.Progress}
	okA := q.Attach(pr.a)
	okB := peer.Attach(pr.b)
	if !okA || !okB {
		pr.close()
	}
}

type pair struct {
	a, b   *end
	closed atomic.Bool
}

func (p *pair) close() {
	if p.closed.Swap(true) {
		return
	}
	p.a.q.LinkLost(p.a, ErrDisconnected)
	p.b.q.LinkLost(p.b, ErrDisconnected)
}

// end is one QP's side of a pair. Its requester runs inline in whichever
// goroutine kicks it (PostSend, a completion, a timer): it takes the QP's
// next request, runs the peer's responder on it directly (the payload is
// copied once, from the requester's buffer into the responder's region) and
// feeds the response to the QP's completer. busy/again make sure one
// goroutine pumps at a time without losing a kick.
type end struct {
	q, peer  *softrc.QP
	pair     *pair
	busy     atomic.Bool
	again    atomic.Bool
	req      softrc.Request
	resp     softrc.Response
	reqPL    softrc.BytesPayload
	respPL   softrc.BytesPayload
	respSeg  [1][]byte
	progress func()
}

func (e *end) Close() { e.pair.close() }

func (e *end) Kick() {
	e.again.Store(true)
	for e.again.Load() {
		if !e.busy.CompareAndSwap(false, true) {
			return
		}
		e.again.Store(false)
		e.pump()
		e.busy.Store(false)
	}
}

func (e *end) pump() {
	for !e.pair.closed.Load() && e.q.NextRequest(&e.req) {
		e.reqPL = softrc.BytesPayload{Segs: e.req.Data, Progress: e.progress}
		e.q.Executing(true)
		err := e.peer.HandleRequest(&e.req.Header, &e.reqPL, &e.resp)
		e.req.Done()
		if err != nil {
			// Cannot happen with in-memory payloads; treat it as a broken link.
			e.q.Executing(false)
			e.pair.close()
			return
		}
		if e.resp.Op != 0 && !e.pair.closed.Load() {
			e.respSeg[0] = e.resp.Data
			e.respPL = softrc.BytesPayload{Segs: e.respSeg[:], Progress: e.progress}
			if e.q.HandleResponse(&e.resp.Header, &e.respPL) == nil {
				e.resp.Sent()
			}
			e.respSeg[0] = nil
		}
		e.q.Executing(false)
		e.resp.Done()
	}
}
