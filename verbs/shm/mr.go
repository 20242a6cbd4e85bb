//go:build linux

package shm

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/verbs"
)

type pd struct {
	d      *Device
	id     uint32
	nMR    atomic.Int32
	nQP    atomic.Int32
	closed atomic.Bool
}

func (p *pd) Close() error {
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if p.closed.Load() {
		return d.opErr("PD.Close", 0, -1, verbs.ErrClosed)
	}
	if n, q := p.nMR.Load(), p.nQP.Load(); n != 0 || q != 0 {
		return d.opErr("PD.Close", 0, -1, fmt.Errorf("%w: %d memory regions and %d queue pairs still open", verbs.ErrInUse, n, q))
	}
	p.closed.Store(true)
	delete(d.pds, p)
	return nil
}

// mr is a memory region. Its descriptor in the device segment is what
// peers check; the Go object is what local posts and same-process peers use.
type mr struct {
	d      *Device
	pd     *pd
	key    uint32
	idx    int
	access verbs.Access
	kind   verbs.MemKind
	buf    []byte // the memory: a slice of the device heap, or the caller's slice
	addr   uint64
	off    uint64 // heap offset (provider memory)
	heapN  uint64
	pages  *ntcopy.Pages // provider memory: which pages receives have touched
	pin    runtime.Pinner
	closed atomic.Bool
}

func (m *mr) Bytes() []byte {
	if m.kind == verbs.MemProvider && m.closed.Load() {
		return nil
	}
	return m.buf
}
func (m *mr) Addr() uint64          { return m.addr }
func (m *mr) Len() int              { return len(m.buf) }
func (m *mr) LKey() uint32          { return m.key }
func (m *mr) RKey() uint32          { return m.key }
func (m *mr) Access() verbs.Access  { return m.access }
func (m *mr) Kind() verbs.MemKind   { return m.kind }
func (m *mr) SupportsAtomics() bool { return m.kind == verbs.MemProvider }
func (m *mr) unpin()                { m.pin.Unpin() }
func (m *mr) slice(addr uint64, n uint64) []byte {
	o := addr - m.addr
	return m.buf[o : o+n : o+n]
}

// contains reports whether [addr, addr+n) lies inside the region.
func (m *mr) contains(addr, n uint64) bool {
	return addr >= m.addr && n <= uint64(len(m.buf)) && addr-m.addr <= uint64(len(m.buf))-n
}

func (p *pd) AllocMR(n int, access verbs.Access) (verbs.MR, error) {
	d := p.d
	if err := access.Validate(); err != nil {
		return nil, d.opErr("AllocMR", 0, -1, err)
	}
	if n <= 0 {
		return nil, d.opErr("AllocMR", 0, -1, fmt.Errorf("%w: size %d (must be positive)", verbs.ErrInvalidArgument, n))
	}
	if uint64(n) > d.Caps().MaxMRSize {
		return nil, d.opErr("AllocMR", 0, -1, fmt.Errorf("%w: size %d exceeds the device's max MR size %d", verbs.ErrInvalidArgument, n, d.Caps().MaxMRSize))
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || p.closed.Load() {
		return nil, d.opErr("AllocMR", 0, -1, verbs.ErrClosed)
	}
	off, err := d.allocMem(uint64(n))
	if err != nil {
		return nil, d.opErr("AllocMR", 0, -1, err)
	}
	m := &mr{d: d, pd: p, access: access, kind: verbs.MemProvider, off: off, heapN: uint64(n)}
	m.buf = d.mem[off : off+uint64(n) : off+uint64(n)]
	m.addr = uint64(uintptr(unsafe.Pointer(&m.buf[0])))
	m.pages = ntcopy.NewPages(m.buf, d.touch)
	if err := d.publishMR(m); err != nil {
		d.freeMem(off, uint64(n))
		return nil, d.opErr("AllocMR", 0, -1, err)
	}
	p.nMR.Add(1)
	return m, nil
}

func (p *pd) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	d := p.d
	if err := access.Validate(); err != nil {
		return nil, d.opErr("RegMR", 0, -1, err)
	}
	if len(buf) == 0 {
		return nil, d.opErr("RegMR", 0, -1, fmt.Errorf("%w: empty buffer", verbs.ErrInvalidArgument))
	}
	if collapsible(access) && d.cmaSeen.Load() {
		d.huge.collapse(buf) // before the lock: it may take a while
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed || p.closed.Load() {
		return nil, d.opErr("RegMR", 0, -1, verbs.ErrClosed)
	}
	m := &mr{d: d, pd: p, access: access, kind: verbs.MemUser, buf: buf[:len(buf):len(buf)]}
	// Pin the slice: the collector does not move heap objects today, but a
	// pinned object is also one whose address may legally live in another
	// process's requests while we hold it.
	m.pin.Pin(&buf[0])
	m.addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
	if err := d.publishMR(m); err != nil {
		m.pin.Unpin()
		return nil, d.opErr("RegMR", 0, -1, err)
	}
	p.nMR.Add(1)
	return m, nil
}

// publishMR gives m a key and a descriptor. d.mu is held.
func (d *Device) publishMR(m *mr) error {
	var idx int
	if n := len(d.mrFree); n > 0 {
		idx = d.mrFree[n-1]
		d.mrFree = d.mrFree[:n-1]
	} else if d.mrNext < maxMR {
		idx = d.mrNext
		d.mrNext++
	} else {
		return fmt.Errorf("%w: all %d memory-region slots are in use", verbs.ErrInvalidArgument, maxMR-1)
	}
	d.mrGen[idx]++
	if d.mrGen[idx] == 0 {
		d.mrGen[idx] = 1
	}
	m.idx = idx
	m.key = uint32(d.mrGen[idx])<<16 | uint32(idx)
	base := uint64(mrOff) + uint64(idx)*mrdSize
	kind := uint32(kindProvider)
	if m.kind == verbs.MemUser {
		kind = kindUser
	}
	atomic.StoreUint32(word32(d.mem, base+mrdAccess), uint32(m.access))
	atomic.StoreUint32(word32(d.mem, base+mrdPD), m.pd.id)
	atomic.StoreUint32(word32(d.mem, base+mrdKind), kind)
	atomic.StoreUint64(word64(d.mem, base+mrdAddr), m.addr)
	atomic.StoreUint64(word64(d.mem, base+mrdLen), uint64(len(m.buf)))
	atomic.StoreUint64(word64(d.mem, base+mrdOff), m.off)
	atomic.StoreUint32(word32(d.mem, base+mrdKey), m.key)
	d.mrTab[idx].Store(m)
	return nil
}

// Close deregisters the region: its key stops working at once, locally and
// for peers (REM_ACCESS_ERR), and provider memory goes back to the heap.
func (m *mr) Close() error {
	d := m.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.closed.Load() {
		return d.opErr("MR.Close", 0, -1, verbs.ErrClosed)
	}
	m.closed.Store(true)
	m.pd.nMR.Add(-1)
	if d.closed {
		return nil // Device.Close releases everything
	}
	base := uint64(mrOff) + uint64(m.idx)*mrdSize
	atomic.StoreUint32(word32(d.mem, base+mrdKey), 0)
	d.mrTab[m.idx].Store(nil)
	d.mrFree = append(d.mrFree, m.idx)
	if m.kind == verbs.MemProvider {
		d.freeMem(m.off, m.heapN)
	} else {
		m.pin.Unpin()
	}
	return nil
}

// collapseRegistered collapses the regions registered so far for remote
// access into huge pages (see huge_linux.go), once, when the first queue
// pair that reaches its peer by cross-memory attach connects.
func (d *Device) collapseRegistered() {
	if !d.cmaSeen.CompareAndSwap(false, true) || d.huge.size == 0 {
		return
	}
	for i := range d.mrTab {
		m := d.mrTab[i].Load()
		if m != nil && m.kind == verbs.MemUser && collapsible(m.access) && !m.closed.Load() {
			d.huge.collapse(m.buf)
		}
	}
}

// localMR finds a live local region by key; nil if there is none.
func (d *Device) localMR(key uint32) *mr {
	if key&0xffff >= maxMR {
		return nil
	}
	m := d.mrTab[key&0xffff].Load()
	if m == nil || m.key != key || m.closed.Load() {
		return nil
	}
	return m
}

// mrDesc is a peer's view of a memory-region descriptor.
type mrDesc struct {
	key    uint32
	access verbs.Access
	pd     uint32
	kind   uint32
	addr   uint64
	n      uint64
	off    uint64
}

// readDesc reads the descriptor for key from a device segment; ok is false
// when no live region has that key.
func readDesc(mem []byte, key uint32) (mrDesc, bool) {
	idx := uint64(key & 0xffff)
	if idx == 0 || idx >= maxMR {
		return mrDesc{}, false
	}
	base := uint64(mrOff) + idx*mrdSize
	if atomic.LoadUint32(word32(mem, base+mrdKey)) != key {
		return mrDesc{}, false
	}
	m := mrDesc{
		key:    key,
		access: verbs.Access(atomic.LoadUint32(word32(mem, base+mrdAccess))),
		pd:     atomic.LoadUint32(word32(mem, base+mrdPD)),
		kind:   atomic.LoadUint32(word32(mem, base+mrdKind)),
		addr:   atomic.LoadUint64(word64(mem, base+mrdAddr)),
		n:      atomic.LoadUint64(word64(mem, base+mrdLen)),
		off:    atomic.LoadUint64(word64(mem, base+mrdOff)),
	}
	if atomic.LoadUint32(word32(mem, base+mrdKey)) != key {
		return mrDesc{}, false
	}
	return m, true
}

func (m *mrDesc) contains(addr, n uint64) bool {
	return addr >= m.addr && n <= m.n && addr-m.addr <= m.n-n
}
