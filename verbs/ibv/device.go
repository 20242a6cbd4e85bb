//go:build linux && cgo && rdma

package ibv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// Available reports whether this build has the real provider (the rdma
// build tag on linux with cgo). Devices may still be absent.
const Available = true

type device struct {
	ctx       unsafe.Pointer // struct ibv_context
	name      string
	port      int
	gid       GIDEntry
	linkLayer LinkLayer
	lid       uint16
	activeMTU verbs.MTU
	caps      verbs.Caps
	log       *slog.Logger

	mu     sync.Mutex // guards closed and the object sets
	closed bool
	pds    map[*pd]struct{}
	cqs    map[*cq]struct{}
	qps    map[*qp]struct{}

	asyncFile *os.File      // duplicate of the async event fd, in the netpoller
	asyncDone chan struct{} // closed when the event goroutine ends

	tabMu sync.RWMutex // guards the lookup tables the data path reads
	byQPN map[uint32]*qp
	byKey map[uint32]*mr // by lkey
}

func errorf(op string, qpn uint32, err error) *verbs.Error {
	return &verbs.Error{Op: op, Provider: ProviderName, QPNum: qpn, Index: -1, Err: err}
}

// errnoErr wraps a libibverbs errno in the verbs sentinel it stands for.
func errnoErr(call string, err error) error {
	var e syscall.Errno
	if !errors.As(err, &e) {
		return fmt.Errorf("%w: %s: %w", verbs.ErrInvalidArgument, call, err)
	}
	switch e {
	case syscall.ENOMEM:
		return fmt.Errorf("%w: %s: %w", verbs.ErrQueueFull, call, e)
	case syscall.EBUSY:
		return fmt.Errorf("%w: %s: %w", verbs.ErrInUse, call, e)
	case syscall.EOPNOTSUPP:
		return fmt.Errorf("%w: %s: %w", verbs.ErrUnsupported, call, e)
	case syscall.ENODEV, syscall.ENOSYS:
		return fmt.Errorf("%w: %s: %w", verbs.ErrUnavailable, call, e)
	}
	return fmt.Errorf("%w: %s: %w", verbs.ErrInvalidArgument, call, e)
}

func open(ctx context.Context, sel selector, dopts verbs.DeviceOptions) (verbs.Device, error) {
	fail := func(err error) (verbs.Device, error) { return nil, errorf("Open", 0, err) }
	names, err := cDeviceNames()
	if err != nil {
		return fail(fmt.Errorf("%w: ibv_get_device_list: %w (is the ib_uverbs module loaded?)", verbs.ErrUnavailable, err))
	}
	cands, err := sel.candidates(names)
	if err != nil {
		return fail(err)
	}
	var errs []error
	for _, c := range cands {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		d, err := openOne(c, dopts.Logger)
		if err == nil {
			return d, nil
		}
		errs = append(errs, err)
	}
	return fail(errors.Join(errs...))
}

func openOne(sel DeviceEntry, log *slog.Logger) (*device, error) {
	name := sel.Name
	h, err := cOpen(name)
	if err != nil {
		return nil, fmt.Errorf("%w: ibv_open_device(%s): %w", verbs.ErrUnavailable, name, err)
	}
	d := &device{ctx: h, name: name, pds: map[*pd]struct{}{}, cqs: map[*cq]struct{}{}, qps: map[*qp]struct{}{},
		byQPN: map[uint32]*qp{}, byKey: map[uint32]*mr{}, log: log}
	err = d.setup(sel)
	if err == nil {
		err = d.startAsync()
	}
	if err != nil {
		_ = cClose(h)
		return nil, err
	}
	return d, nil
}

// setup picks the port and GID and computes the capabilities.
func (d *device) setup(sel DeviceEntry) error {
	var da devAttr
	if err := cQueryDevice(d.ctx, &da); err != nil {
		return fmt.Errorf("%w: ibv_query_device(%s): %w", verbs.ErrUnavailable, d.name, err)
	}
	var pa portAttr
	if sel.Port != 0 {
		if sel.Port > int(da.physPortCnt) {
			return fmt.Errorf("%w: %s has %d port(s), no port %d", verbs.ErrInvalidArgument, d.name, da.physPortCnt, sel.Port)
		}
		if err := cQueryPort(d.ctx, sel.Port, &pa); err != nil {
			return fmt.Errorf("%w: ibv_query_port(%s, %d): %w", verbs.ErrUnavailable, d.name, sel.Port, err)
		}
		if pa.state != portActive {
			return fmt.Errorf("%w: %s port %d is not active (state %d)", verbs.ErrUnavailable, d.name, sel.Port, pa.state)
		}
		d.port = sel.Port
	} else {
		for p := 1; p <= int(da.physPortCnt); p++ {
			if cQueryPort(d.ctx, p, &pa) == nil && pa.state == portActive {
				d.port = p
				break
			}
		}
		if d.port == 0 {
			return fmt.Errorf("%w: %s has no active port", verbs.ErrUnavailable, d.name)
		}
	}
	d.linkLayer = LinkLayer(pa.linkLayer)
	if d.linkLayer == LinkUnknown {
		d.linkLayer = LinkInfiniBand // IBV_LINK_LAYER_UNSPECIFIED is legacy InfiniBand
	}
	d.lid = uint16(pa.lid)
	d.activeMTU = verbs.MTU(pa.activeMTU)

	n := int(pa.gidTblLen) * max(int(da.physPortCnt), 1)
	raw := make([]gidDesc, max(n, 1))
	k, err := cGIDTable(d.ctx, d.port, raw)
	if err != nil {
		return fmt.Errorf("%w: ibv_query_gid_table(%s): %w", verbs.ErrUnavailable, d.name, err)
	}
	table := make([]GIDEntry, k)
	for i := range table {
		table[i] = GIDEntry{Index: int(raw[i].index), Type: GIDType(raw[i].typ), GID: raw[i].gid}
	}
	if d.gid, err = chooseGID(table, d.linkLayer, sel.GID); err != nil {
		return fmt.Errorf("%s port %d: %w", d.name, d.port, err)
	}

	inline, err := maxInline(d, &da)
	if err != nil {
		return err
	}
	lat := 2 * time.Microsecond
	if da.vendorID == 0xffffff { // Soft-RoCE (rxe) reports this vendor id: a software path
		lat = 10 * time.Microsecond
	}
	d.caps = verbs.Caps{
		MaxMsgSize:     uint64(pa.maxMsgSz),
		MaxMRSize:      da.maxMRSize,
		MaxQP:          int(da.maxQP),
		MaxQPWR:        int(da.maxQPWR),
		MaxSGE:         int(da.maxSGE),
		MaxInline:      inline,
		MaxCQE:         int(da.maxCQE),
		MaxRdAtom:      int(min(da.maxQPRdAtom, da.maxQPInitRdAtom)),
		Atomics:        verbs.AtomicCap(min(da.atomicCap, uint32(verbs.AtomicGlob))),
		UserMemAtomics: da.atomicCap != 0,
		Latency:        lat,
		Bandwidth:      bandwidth(pa.activeWidth, pa.activeSpeed),
	}
	return nil
}

var inlineCache sync.Map // device name + node GUID -> largest max_inline_data

// maxInline finds the largest inline size the device grants an RC QP. The
// device attributes do not report it, so ask the device by creating
// throw-away QPs (a binary search, once per device per process).
func maxInline(d *device, da *devAttr) (int, error) {
	key := fmt.Sprintf("%s/%x", d.name, da.nodeGUID)
	if v, ok := inlineCache.Load(key); ok {
		return v.(int), nil
	}
	pdh, err := cAllocPD(d.ctx)
	if err != nil {
		return 0, fmt.Errorf("%w: ibv_alloc_pd(%s): %w", verbs.ErrUnavailable, d.name, err)
	}
	defer cDeallocPD(pdh)
	cqh, _, err := cCreateCQ(d.ctx, 2, nil)
	if err != nil {
		return 0, fmt.Errorf("%w: ibv_create_cq(%s): %w", verbs.ErrUnavailable, d.name, err)
	}
	defer cDestroyCQ(cqh)
	try := func(n int) bool {
		c := capDesc{maxSendWR: 1, maxRecvWR: 1, maxSendSGE: 1, maxRecvSGE: 1, maxInline: uint32(n)}
		q, _, err := cCreateQP(pdh, cqh, cqh, &c, false)
		if err != nil {
			return false
		}
		_ = cDestroyQP(q)
		return true
	}
	lo, hi := 0, 4096 // lo works; hi is the upper bound we search
	if try(hi) {
		lo = hi
	} else {
		for hi-lo > 1 {
			m := (lo + hi) / 2
			if try(m) {
				lo = m
			} else {
				hi = m
			}
		}
	}
	inlineCache.Store(key, lo)
	return lo, nil
}

func (d *device) Name() string         { return d.name }
func (d *device) Provider() string     { return ProviderName }
func (d *device) Caps() verbs.Caps     { return d.caps }
func (d *device) Port() int            { return d.port }
func (d *device) GID() GIDEntry        { return d.gid }
func (d *device) LinkLayer() LinkLayer { return d.linkLayer }

// DeviceInfo is what an ibv device selected; a verbs.Device opened by this
// package implements it.
type DeviceInfo interface {
	Port() int
	GID() GIDEntry
	LinkLayer() LinkLayer
}

var _ DeviceInfo = (*device)(nil)

func (d *device) AllocPD() (verbs.PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, errorf("AllocPD", 0, verbs.ErrClosed)
	}
	h, err := cAllocPD(d.ctx)
	if err != nil {
		return nil, errorf("AllocPD", 0, errnoErr("ibv_alloc_pd", err))
	}
	p := &pd{dev: d, h: h, mrs: map[*mr]struct{}{}}
	d.pds[p] = struct{}{}
	return p, nil
}

func (d *device) lookupQP(n uint32) *qp {
	d.tabMu.RLock()
	defer d.tabMu.RUnlock()
	return d.byQPN[n]
}

// Close closes every queue pair (flushing their work), memory region,
// completion queue and protection domain of the device, then the device.
func (d *device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return errorf("Close", 0, verbs.ErrClosed)
	}
	d.closed = true
	qps := keys(d.qps)
	d.mu.Unlock()
	var errs []error
	for _, q := range qps {
		if err := q.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			errs = append(errs, err)
		}
	}
	d.mu.Lock()
	pds, cqs := keys(d.pds), keys(d.cqs)
	d.mu.Unlock()
	for _, p := range pds {
		p.mu.Lock()
		mrs := keys(p.mrs)
		p.mu.Unlock()
		for _, m := range mrs {
			if err := m.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
				errs = append(errs, err)
			}
		}
	}
	for _, c := range cqs {
		if err := c.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			errs = append(errs, err)
		}
	}
	for _, p := range pds {
		if err := p.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
			errs = append(errs, err)
		}
	}
	d.stopAsync()
	if err := cClose(d.ctx); err != nil {
		errs = append(errs, errorf("Close", 0, errnoErr("ibv_close_device", err)))
	}
	return errors.Join(errs...)
}

func keys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
