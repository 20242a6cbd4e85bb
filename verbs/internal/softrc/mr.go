package softrc

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/verbs"
)

// MR is a registered memory region. Its memory stays valid while anyone
// holds a reference: the registration itself, and every request or response
// in flight that points into it. Close drops the registration's reference and
// removes the keys, so later use fails; the memory is unmapped (or unpinned)
// when the last in-flight user lets go, never under a running copy.
type MR struct {
	pd     *PD
	buf    []byte
	addr   uint64
	access verbs.Access
	kind   verbs.MemKind
	lkey   uint32
	rkey   uint32
	refs   atomic.Int64
	closed atomic.Bool
	free   func()
	pin    runtime.Pinner
	pages  *ntcopy.Pages // provider memory: which pages receives have touched
}

var _ verbs.MR = (*MR)(nil)

func (m *MR) Bytes() []byte         { return m.buf }
func (m *MR) Addr() uint64          { return m.addr }
func (m *MR) Len() int              { return len(m.buf) }
func (m *MR) LKey() uint32          { return m.lkey }
func (m *MR) RKey() uint32          { return m.rkey }
func (m *MR) Access() verbs.Access  { return m.access }
func (m *MR) Kind() verbs.MemKind   { return m.kind }
func (m *MR) SupportsAtomics() bool { return true }
func (m *MR) valid() bool           { return !m.closed.Load() }
func (m *MR) String() string {
	return fmt.Sprintf("MR{addr %#x len %d lkey %#x rkey %#x %v}", m.addr, len(m.buf), m.lkey, m.rkey, m.access)
}

// acquire takes an in-flight reference; it fails once the memory is gone.
func (m *MR) acquire() bool {
	for {
		r := m.refs.Load()
		if r <= 0 {
			return false
		}
		if m.refs.CompareAndSwap(r, r+1) {
			return true
		}
	}
}

func (m *MR) release() {
	if m.refs.Add(-1) == 0 {
		m.pin.Unpin()
		if m.free != nil {
			m.free()
		}
	}
}

// Close deregisters the region.
func (m *MR) Close() error {
	if m.closed.Swap(true) {
		return &verbs.Error{Op: "MR.Close", Provider: m.pd.dev.cfg.Provider, Index: -1, Err: verbs.ErrClosed}
	}
	d := m.pd.dev
	d.mu.Lock()
	delete(d.lkeys, m.lkey)
	delete(d.rkeys, m.rkey)
	d.mu.Unlock()
	m.pd.mrs.Add(-1)
	m.release()
	return nil
}

// span returns the part of the region [addr, addr+n), or false when it is
// not entirely inside.
func (m *MR) span(addr uint64, n uint64) ([]byte, bool) {
	if addr < m.addr {
		return nil, false
	}
	off := addr - m.addr
	if off > uint64(len(m.buf)) || n > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+n : off+n], true
}

// word is the 8-byte word at addr for an atomic; addr is inside and aligned.
func (m *MR) word(addr uint64) *uint64 {
	return (*uint64)(unsafe.Pointer(&m.buf[addr-m.addr]))
}

func addrOf(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }
