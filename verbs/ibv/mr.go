//go:build linux && cgo && rdma

package ibv

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

type pd struct {
	dev *device
	h   unsafe.Pointer // struct ibv_pd

	mu     sync.Mutex
	closed bool
	mrs    map[*mr]struct{}
	nQP    int
}

func (p *pd) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errorf("PD.Close", 0, verbs.ErrClosed)
	}
	if len(p.mrs) > 0 || p.nQP > 0 {
		return errorf("PD.Close", 0, fmt.Errorf("%w: %d memory region(s) and %d queue pair(s) still open", verbs.ErrInUse, len(p.mrs), p.nQP))
	}
	if err := cDeallocPD(p.h); err != nil {
		return errorf("PD.Close", 0, errnoErr("ibv_dealloc_pd", err))
	}
	p.closed = true
	p.dev.mu.Lock()
	delete(p.dev.pds, p)
	p.dev.mu.Unlock()
	return nil
}

// mr is a registered region: provider memory from mmap (off the Go heap),
// or a caller's slice kept pinned (runtime.Pinner) until Close, because the
// device writes into it behind the garbage collector's back.
type mr struct {
	pd         *pd
	h          unsafe.Pointer // struct ibv_mr
	buf        []byte
	addr       uint64
	lkey, rkey uint32
	access     verbs.Access
	kind       verbs.MemKind
	mapped     []byte // provider memory as mmap returned it (page-rounded)
	pin        runtime.Pinner

	mu     sync.Mutex
	closed bool
}

func (p *pd) AllocMR(n int, access verbs.Access) (verbs.MR, error) {
	if n <= 0 {
		return nil, errorf("AllocMR", 0, fmt.Errorf("%w: size %d, want > 0", verbs.ErrInvalidArgument, n))
	}
	if err := access.Validate(); err != nil {
		return nil, errorf("AllocMR", 0, err)
	}
	pg := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, (n+pg-1)/pg*pg, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, errorf("AllocMR", 0, fmt.Errorf("%w: mmap %d bytes: %w", verbs.ErrQueueFull, n, err))
	}
	m := &mr{pd: p, buf: mem[:n:n], mapped: mem, access: access, kind: verbs.MemProvider}
	if err := p.register(m, "AllocMR"); err != nil {
		_ = unix.Munmap(mem)
		return nil, err
	}
	return m, nil
}

func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, errorf("RegMR", 0, fmt.Errorf("%w: empty buffer", verbs.ErrInvalidArgument))
	}
	if err := access.Validate(); err != nil {
		return nil, errorf("RegMR", 0, err)
	}
	m := &mr{pd: p, buf: buf, access: access, kind: verbs.MemUser}
	m.pin.Pin(&buf[0])
	if err := p.register(m, "RegMR"); err != nil {
		m.pin.Unpin()
		return nil, err
	}
	return m, nil
}

func (p *pd) register(m *mr, op string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return errorf(op, 0, verbs.ErrClosed)
	}
	if p.dev.isClosed() {
		return errorf(op, 0, verbs.ErrClosed)
	}
	m.addr = uint64(uintptr(unsafe.Pointer(&m.buf[0])))
	h, lkey, rkey, err := cRegMR(p.h, uintptr(m.addr), len(m.buf), uint32(m.access))
	if err != nil {
		e := errnoErr("ibv_reg_mr", err)
		if errors.Is(err, syscall.ENOMEM) || errors.Is(err, syscall.EPERM) {
			e = fmt.Errorf("%w (registering %d bytes pins them: raise the locked-memory limit, ulimit -l / LimitMEMLOCK)", e, len(m.buf))
		}
		return errorf(op, 0, e)
	}
	m.h, m.lkey, m.rkey = h, lkey, rkey
	p.mrs[m] = struct{}{}
	d := p.dev
	d.tabMu.Lock()
	d.byKey[lkey] = m
	d.tabMu.Unlock()
	return nil
}

func (d *device) isClosed() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.closed
}

func (m *mr) Bytes() []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf
}

func (m *mr) Addr() uint64          { return m.addr }
func (m *mr) Len() int              { return len(m.buf) }
func (m *mr) LKey() uint32          { return m.lkey }
func (m *mr) RKey() uint32          { return m.rkey }
func (m *mr) Access() verbs.Access  { return m.access }
func (m *mr) Kind() verbs.MemKind   { return m.kind }
func (m *mr) SupportsAtomics() bool { return m.pd.dev.caps.Atomics != verbs.AtomicNone }

// Close deregisters the region first (the device stops using the memory),
// then unpins or unmaps it.
func (m *mr) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errorf("MR.Close", 0, verbs.ErrClosed)
	}
	d := m.pd.dev
	d.tabMu.Lock()
	delete(d.byKey, m.lkey)
	d.tabMu.Unlock()
	if err := cDeregMR(m.h); err != nil {
		d.tabMu.Lock()
		d.byKey[m.lkey] = m
		d.tabMu.Unlock()
		return errorf("MR.Close", 0, errnoErr("ibv_dereg_mr", err))
	}
	m.closed = true
	if m.mapped != nil {
		_ = unix.Munmap(m.mapped)
		m.mapped = nil
	} else {
		m.pin.Unpin()
	}
	m.buf = nil
	m.pd.mu.Lock()
	delete(m.pd.mrs, m)
	m.pd.mu.Unlock()
	return nil
}

// checkSGL checks local keys at post time, as the software providers do:
// each element must lie inside a region this provider registered on pd.
func (d *device) checkSGL(p *pd, sgl []verbs.SGE) error {
	if len(sgl) == 0 {
		return nil
	}
	d.tabMu.RLock()
	defer d.tabMu.RUnlock()
	for i, s := range sgl {
		m := d.byKey[s.LKey]
		switch {
		case m == nil:
			return fmt.Errorf("%w: SGE %d: lkey %#x names no registered memory region", verbs.ErrBadKey, i, s.LKey)
		case m.pd != p:
			return fmt.Errorf("%w: SGE %d: lkey %#x belongs to another protection domain", verbs.ErrBadKey, i, s.LKey)
		case s.Addr < m.addr || s.Addr+uint64(s.Length) > m.addr+uint64(len(m.buf)) || s.Addr+uint64(s.Length) < s.Addr:
			return fmt.Errorf("%w: SGE %d: [%#x, +%d) lies outside region lkey %#x [%#x, +%d)",
				verbs.ErrBadKey, i, s.Addr, s.Length, s.LKey, m.addr, len(m.buf))
		}
	}
	return nil
}
