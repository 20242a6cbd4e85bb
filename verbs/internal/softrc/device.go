package softrc

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/verbs"
)

// Config configures a software device.
type Config struct {
	Provider string // "loop", "tcp"
	Name     string // device name
	Caps     verbs.Caps
	// ConnectTimeout bounds how long a QP that reached RTR may wait for its
	// link before posted work fails with RETRY_EXC_ERR. Zero means 30 s.
	ConnectTimeout time.Duration
	// MinAckTimeout is a floor under every QP's ACK timeout
	// (timeout × (retry_cnt+1)). A software responder is a goroutine that a
	// loaded machine may deschedule for tens of milliseconds, which real RC
	// hardware never is; the floor keeps such hiccups from looking like a
	// dead peer. Zero means no floor.
	MinAckTimeout time.Duration
	// YieldSpin is how long a waiter of a CQ that several links feed (so
	// that it cannot drive one) polls them for incoming bytes (Arriver),
	// giving the CPU to other processes between polls (sched_yield), before
	// it sleeps. Once bytes are there it parks: the Go scheduler, having
	// nothing else to run, finds the link's reader ready in its non-blocking
	// network poll, so the process never sleeps in the kernel and is not
	// woken. For ranks that outnumber the CPUs, where each wake-up costs
	// more than the message. Zero: sleep at once.
	YieldSpin time.Duration
	Logger    *slog.Logger
}

// DefaultCaps are the limits of the software devices.
func DefaultCaps() verbs.Caps {
	return verbs.Caps{
		MaxMsgSize:     1 << 31,
		MaxMRSize:      1 << 40,
		MaxQP:          1 << 16,
		MaxQPWR:        1 << 14,
		MaxSGE:         16,
		MaxInline:      512,
		MaxCQE:         1 << 20,
		MaxRdAtom:      16,
		Atomics:        verbs.AtomicHCA,
		UserMemAtomics: true,
		ReadServed:     true, // its transports call Response.Sent
	}
}

// Device is a software RDMA device: the object model, the MR table and the
// RC engine. A provider creates one with NewDevice and its Transport.
type Device struct {
	cfg    Config
	t      Transport
	log    *slog.Logger
	mu     sync.RWMutex
	lkeys  map[uint32]*MR
	rkeys  map[uint32]*MR
	qps    map[uint32]*QP
	pds    map[*PD]struct{}
	cqs    map[*CQ]struct{}
	closed bool
	// touch bounds the receive buffers in provider memory mapped when
	// posted rather than at their first message (PostRecv).
	touch *ntcopy.Budget
}

var _ verbs.Device = (*Device)(nil)

// NewDevice creates a device that moves frames with t.
func NewDevice(cfg Config, t Transport) *Device {
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 30 * time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Device{cfg: cfg, t: t, log: log,
		lkeys: map[uint32]*MR{}, rkeys: map[uint32]*MR{}, qps: map[uint32]*QP{},
		pds: map[*PD]struct{}{}, cqs: map[*CQ]struct{}{}, touch: ntcopy.NewBudget(PrefaultBytes)}
}

// PrefaultBytes bounds the memory a device maps ahead of its use: the
// pages of receive buffers in its provider memory (AllocMR), mapped when
// first posted (see ntcopy.Touch: on the VM measured the first 32 messages
// through fresh p2p buffers took 2-10 times as long). p2p posts 32
// buffers of 256 KiB a peer over tcp (up to 33 ranks), so this covers 8
// peers; past it, pages are mapped at their first access.
const PrefaultBytes = 64 << 20

func (d *Device) Name() string         { return d.cfg.Name }
func (d *Device) Provider() string     { return d.cfg.Provider }
func (d *Device) Caps() verbs.Caps     { return d.cfg.Caps }
func (d *Device) Logger() *slog.Logger { return d.log }

func (d *Device) err(op string, qpn uint32, idx int, err error) error {
	return &verbs.Error{Op: op, Provider: d.cfg.Provider, QPNum: qpn, Index: idx, Err: err}
}

// QP returns the open queue pair numbered qpn, or nil.
func (d *Device) QP(qpn uint32) *QP {
	d.mu.RLock()
	q := d.qps[qpn]
	d.mu.RUnlock()
	return q
}

func (d *Device) lookupLKey(k uint32) *MR {
	d.mu.RLock()
	m := d.lkeys[k]
	d.mu.RUnlock()
	return m
}

func (d *Device) lookupRKey(k uint32) *MR {
	d.mu.RLock()
	m := d.rkeys[k]
	d.mu.RUnlock()
	return m
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, d.err("AllocPD", 0, -1, verbs.ErrClosed)
	}
	pd := &PD{dev: d}
	d.pds[pd] = struct{}{}
	return pd, nil
}

// CreateCQ creates a completion queue. It holds any number of completions
// (it grows past depth rather than lose one).
func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth < 1 || depth > d.cfg.Caps.MaxCQE {
		return nil, d.err("CreateCQ", 0, -1, fmt.Errorf("%w: depth %d not in [1, %d]", verbs.ErrInvalidArgument, depth, d.cfg.Caps.MaxCQE))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, d.err("CreateCQ", 0, -1, verbs.ErrClosed)
	}
	cq := &CQ{dev: d, sig: make(chan struct{}, 1)}
	d.cqs[cq] = struct{}{}
	return cq, nil
}

// Close closes every QP (flushing their work), CQ and MR, then the transport.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return d.err("Close", 0, -1, verbs.ErrClosed)
	}
	d.closed = true
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	mrs := make([]*MR, 0, len(d.lkeys))
	for _, m := range d.lkeys {
		mrs = append(mrs, m)
	}
	cqs := make([]*CQ, 0, len(d.cqs))
	for c := range d.cqs {
		cqs = append(cqs, c)
	}
	d.mu.Unlock()
	for _, q := range qps {
		_ = q.Close()
	}
	for _, m := range mrs {
		_ = m.Close()
	}
	for _, c := range cqs {
		_ = c.Close()
	}
	return d.t.Close()
}

// randKey draws a random 32-bit key (crypto/rand: keys are unguessable) that
// is non-zero and not in use.
func (d *Device) randKey(used map[uint32]*MR, also map[uint32]*MR) uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		k := binary.LittleEndian.Uint32(b[:])
		if k == 0 {
			continue
		}
		if _, dup := used[k]; dup {
			continue
		}
		if also != nil {
			if _, dup := also[k]; dup {
				continue
			}
		}
		return k
	}
}

// Rand24 draws a random 24-bit non-zero value (QP numbers, PSNs).
func Rand24() uint32 {
	var b [4]byte
	for {
		_, _ = rand.Read(b[:])
		if v := binary.LittleEndian.Uint32(b[:]) & 0xffffff; v != 0 {
			return v
		}
	}
}

// PD is a protection domain.
type PD struct {
	dev    *Device
	mrs    atomic.Int64
	qps    atomic.Int64
	closed atomic.Bool
}

var _ verbs.PD = (*PD)(nil)

// AllocMR allocates n bytes of anonymous mapped memory and registers it.
func (pd *PD) AllocMR(n int, access verbs.Access) (verbs.MR, error) {
	d := pd.dev
	if n <= 0 || uint64(n) > d.cfg.Caps.MaxMRSize {
		return nil, d.err("AllocMR", 0, -1, fmt.Errorf("%w: size %d not in [1, %d]", verbs.ErrInvalidArgument, n, d.cfg.Caps.MaxMRSize))
	}
	if err := access.Validate(); err != nil {
		return nil, d.err("AllocMR", 0, -1, err)
	}
	buf, free, err := allocMem(n)
	if err != nil {
		return nil, d.err("AllocMR", 0, -1, fmt.Errorf("%w: mapping %d bytes: %v", verbs.ErrUnavailable, n, err))
	}
	m := &MR{pd: pd, buf: buf, access: access, kind: verbs.MemProvider, free: free, pages: ntcopy.NewPages(buf, d.touch)}
	if err := pd.register(m); err != nil {
		free()
		return nil, err
	}
	return m, nil
}

// RegMR registers the caller's memory; it is pinned until the MR is closed
// and the last in-flight request using it is done.
func (pd *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	d := pd.dev
	if len(buf) == 0 || uint64(len(buf)) > d.cfg.Caps.MaxMRSize {
		return nil, d.err("RegMR", 0, -1, fmt.Errorf("%w: size %d not in [1, %d]", verbs.ErrInvalidArgument, len(buf), d.cfg.Caps.MaxMRSize))
	}
	if err := access.Validate(); err != nil {
		return nil, d.err("RegMR", 0, -1, err)
	}
	m := &MR{pd: pd, buf: buf[:len(buf):len(buf)], access: access, kind: verbs.MemUser}
	m.pin.Pin(unsafe.SliceData(buf))
	if err := pd.register(m); err != nil {
		m.pin.Unpin()
		return nil, err
	}
	return m, nil
}

func (pd *PD) register(m *MR) error {
	d := pd.dev
	m.addr = addrOf(m.buf)
	m.refs.Store(1)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || pd.closed.Load() {
		return d.err("RegMR", 0, -1, verbs.ErrClosed)
	}
	m.lkey = d.randKey(d.lkeys, nil)
	m.rkey = d.randKey(d.rkeys, nil)
	d.lkeys[m.lkey] = m
	d.rkeys[m.rkey] = m
	pd.mrs.Add(1)
	return nil
}

// Close frees the PD; it fails with ErrInUse while MRs or QPs of it are open.
func (pd *PD) Close() error {
	d := pd.dev
	if n, k := pd.mrs.Load(), pd.qps.Load(); n > 0 || k > 0 {
		return d.err("PD.Close", 0, -1, fmt.Errorf("%w: %d memory regions and %d queue pairs still open", verbs.ErrInUse, n, k))
	}
	if pd.closed.Swap(true) {
		return d.err("PD.Close", 0, -1, verbs.ErrClosed)
	}
	d.mu.Lock()
	delete(d.pds, pd)
	d.mu.Unlock()
	return nil
}
