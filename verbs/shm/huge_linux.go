//go:build linux

package shm

import (
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// Huge pages for memory peers reach by cross-memory attach.
//
// process_vm_readv and _writev pin every page of the other process's
// range before they copy, and with 4 KiB pages that costs more than the
// copy: on the development VM one call took 5.2 µs for 64 KiB and 13.7 µs
// for 256 KiB, against 3.1 and 5.6 µs when the range lay in huge pages
// (and 1.8 µs for 4 KiB). Go's heap gets no huge pages where the kernel
// gives them only on request (transparent_hugepage "madvise", Debian's
// default), so a region registered for remote access is collapsed into
// huge pages (MADV_COLLAPSE, Linux 6.1), once per huge page of address
// space and only once a peer process reaches this device's memory that
// way. Best effort: where the kernel refuses (older kernels, THP "never",
// memory marked MADV_NOHUGEPAGE, e.g. GODEBUG=disablethp=1), nothing
// changes. Options.KeepPages turns it off.
//
// A collapse allocates a huge page and copies the region into it: 7-10 ms
// a region on the development VM (1.4 µs for one already huge), paid in
// RegMR, as pinning is on RDMA hardware (p2p caches its registrations).
// Done in the background instead, it overlapped the transfers it was for:
// OSU latency at 256 KiB-4 MiB took 1.3-1.9 times as long and bw at 2-4
// MiB ran at 0.6-0.7 (osu-compare, 5 rounds, 50 ms a size).
//
// A region stays huge while its pages stay mapped: Go's scavenger, which
// returns free heap pages to the kernel, splits a huge page whose region
// has free memory in it, and the region is not collapsed again. A buffer
// that covers whole regions (from 2 MiB, where the gains are largest)
// keeps them; the regions at a small buffer's ends may not.

// hugeMaxRegions bounds the set of huge-page regions a device remembers
// having collapsed (2 MiB each: 128 GiB of address space); past it, new
// regions are left as they are rather than retried on every registration.
const hugeMaxRegions = 1 << 16

// hugeSet is a device's record of the huge-page regions it collapsed or
// tried to; safe for concurrent use.
type hugeSet struct {
	size  uintptr // the huge page size (PMD), 0 when collapsing is off; set once
	mu    sync.Mutex
	tried map[uintptr]struct{} // one madvise call each
}

// collapsible is whether memory registered with access is collapsed (once
// a peer reaches the device by cross-memory attach): peers may read or
// write it.
func collapsible(access verbs.Access) bool {
	return access&(verbs.AccessRemoteRead|verbs.AccessRemoteWrite) != 0
}

// hugePageSize is the size of the kernel's transparent huge pages, or 0
// when it has none to give: no THP support, THP "never", or a page size
// this provider would not collapse an unrelated neighbourhood of memory
// into (above 32 MiB, as arm64 with 64 KiB base pages has).
func hugePageSize() uintptr {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil || strings.Contains(string(b), "[never]") {
		return 0
	}
	b, err = os.ReadFile("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
	if err != nil {
		return 0
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < uint64(os.Getpagesize()) || n > 32<<20 || n&(n-1) != 0 {
		return 0
	}
	return uintptr(n)
}

// collapse asks the kernel to back every huge-page region that buf
// overlaps with huge pages, skipping regions already tried. The regions
// may hold other memory of the process too; their contents do not change.
func (h *hugeSet) collapse(buf []byte) {
	if h.size == 0 || len(buf) == 0 {
		return
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	start := a &^ (h.size - 1)
	end := a + uintptr(len(buf))
	for r := start; r < end; r += h.size {
		if !h.claim(r) {
			continue
		}
		// Not a raw call: collapsing copies up to a huge page and may
		// compact memory first, long enough that the runtime should hand
		// this thread's P to other goroutines meanwhile. A refusal (an old
		// kernel, memory of another kind or marked MADV_NOHUGEPAGE, a
		// region only partly mapped) leaves the region as it was, and it
		// is not asked again.
		syscall.Syscall(unix.SYS_MADVISE, r, h.size, unix.MADV_COLLAPSE)
	}
}

// claim records region r as tried and reports whether it was new.
func (h *hugeSet) claim(r uintptr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.tried) >= hugeMaxRegions {
		return false
	}
	if _, ok := h.tried[r]; ok {
		return false
	}
	if h.tried == nil {
		h.tried = make(map[uintptr]struct{})
	}
	h.tried[r] = struct{}{}
	return true
}
