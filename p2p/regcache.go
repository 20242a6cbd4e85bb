package p2p

import (
	"sync"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
)

// The registration cache keeps the memory regions of rendezvous buffers so
// that sending the same buffer again does not register it again
// (registration is a system call and page pinning on real hardware).
//
// Why it is safe: an entry holds a strong reference to the slice it
// registered (and the MR pins it), so while the entry exists the garbage
// collector cannot free that memory and no other object can be allocated
// at those addresses. A lookup therefore matches an entry only when the new
// buffer lies inside the entry's range: being inside a live Go object, it
// is that object. Keying by address alone would be wrong the moment the
// entry let its memory go: a freed and reused buffer at the same address
// would silently inherit a registration of memory that no longer exists.
//
// Entries in use (refs > 0) are never evicted; unused ones are evicted
// least recently used first once there are more than maxEntries of them or
// they hold more than maxBytes.
type regCache struct {
	pd         verbs.PD
	access     verbs.Access
	maxEntries int
	maxBytes   int64

	mu    sync.Mutex
	lru   []*regEntry // least recently used first
	bytes int64
	hits  uint64
	miss  uint64
}

type regEntry struct {
	buf  []byte // the strong reference that keeps the memory alive
	base uintptr
	mr   verbs.MR
	refs int
}

func newRegCache(pd verbs.PD, access verbs.Access, maxEntries int, maxBytes int64) *regCache {
	return &regCache{pd: pd, access: access, maxEntries: maxEntries, maxBytes: maxBytes}
}

func addrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// get returns a referenced entry covering buf (which is not empty).
func (c *regCache) get(buf []byte) (*regEntry, error) {
	a, n := addrOf(buf), uintptr(len(buf))
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.lru) - 1; i >= 0; i-- {
		e := c.lru[i]
		if a >= e.base && a+n <= e.base+uintptr(len(e.buf)) {
			e.refs++
			c.hits++
			// Move to the most recently used end.
			copy(c.lru[i:], c.lru[i+1:])
			c.lru[len(c.lru)-1] = e
			return e, nil
		}
	}
	c.miss++
	mr, err := c.pd.RegMR(buf, c.access)
	if err != nil {
		return nil, err
	}
	e := &regEntry{buf: buf, base: a, mr: mr, refs: 1}
	c.lru = append(c.lru, e)
	c.bytes += int64(len(buf))
	c.evictLocked()
	return e, nil
}

// put drops a reference taken by get.
func (c *regCache) put(e *regEntry) {
	c.mu.Lock()
	e.refs--
	c.evictLocked()
	c.mu.Unlock()
}

func (c *regCache) evictLocked() {
	for i := 0; i < len(c.lru) && (len(c.lru) > c.maxEntries || c.bytes > c.maxBytes); {
		e := c.lru[i]
		if e.refs > 0 {
			i++
			continue
		}
		c.lru = append(c.lru[:i], c.lru[i+1:]...)
		c.bytes -= int64(len(e.buf))
		_ = e.mr.Close()
		e.buf = nil
	}
}

// addr is the virtual address of b (inside e) as the device knows it.
func (e *regEntry) addr(b []byte) uint64 {
	return e.mr.Addr() + uint64(addrOf(b)-e.base)
}

// close deregisters every entry; entries still referenced are released too
// (the endpoint is going away and its queue pairs are closed).
func (c *regCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range c.lru {
		_ = e.mr.Close()
		e.buf = nil
	}
	c.lru, c.bytes = nil, 0
}

func (c *regCache) stats() (entries int, bytes int64, hits, misses uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lru), c.bytes, c.hits, c.miss
}
