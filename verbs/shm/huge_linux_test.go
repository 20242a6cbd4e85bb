//go:build linux

package shm

import (
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/verbs"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// anonRegion maps n bytes of anonymous memory, a mapping of its own, and
// touches every 4 KiB page of it; it skips the test where the kernel
// already backs such memory with huge pages (THP "always"), since then a
// collapse could not be told from the kernel's own work.
func anonRegion(t *testing.T, size uintptr, n int) []byte {
	t.Helper()
	if size == 0 {
		t.Skip("the kernel gives no transparent huge pages here")
	}
	// Room for an aligned range of n between two inaccessible pages, which
	// keep the kernel from merging it with the mappings around it.
	raw, err := unix.Mmap(-1, 0, n+2*int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(raw) })
	start := uintptr(unsafe.Pointer(&raw[0]))
	off := int((start+4096+size-1)&^(size-1) - start)
	b := raw[off : off+n]
	require.NoError(t, unix.Mprotect(raw[off-4096:off], unix.PROT_NONE))
	require.NoError(t, unix.Mprotect(raw[off+n:off+n+4096], unix.PROT_NONE))
	for i := 0; i < n; i += 4096 {
		b[i] = byte(i/4096 + 1)
	}
	if hugeKB(t, b) != 0 {
		t.Skip("anonymous memory gets huge pages at its first touch here (THP always)")
	}
	return b
}

// hugeKB is AnonHugePages of the mapping that holds b, from /proc/self/smaps.
func hugeKB(t *testing.T, b []byte) int {
	t.Helper()
	a := uint64(uintptr(unsafe.Pointer(&b[0])))
	data, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		f := strings.Fields(l)
		if len(f) > 0 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":") {
			lo, hi, _ := strings.Cut(f[0], "-")
			l, err1 := strconv.ParseUint(lo, 16, 64)
			h, err2 := strconv.ParseUint(hi, 16, 64)
			in = err1 == nil && err2 == nil && l <= a && a < h
			continue
		}
		if in && len(f) >= 2 && f[0] == "AnonHugePages:" {
			kb, err := strconv.Atoi(f[1])
			require.NoError(t, err)
			return kb
		}
	}
	t.Fatalf("no mapping of %#x in /proc/self/smaps", a)
	return 0
}

// requireCollapsed fails unless b's mapping has huge pages now, skipping
// the test where the kernel refuses MADV_COLLAPSE for such memory (before
// Linux 6.1, or THP turned off for the process).
func requireCollapsed(t *testing.T, size uintptr, b []byte, what string) {
	t.Helper()
	if hugeKB(t, b) > 0 {
		return
	}
	a := uintptr(unsafe.Pointer(&b[0])) &^ (size - 1)
	if _, _, errno := syscall.Syscall(unix.SYS_MADVISE, a, size, unix.MADV_COLLAPSE); errno == unix.EINVAL || errno == unix.EPERM {
		t.Skipf("the kernel refuses MADV_COLLAPSE here: %v", errno)
	}
	t.Fatalf("%s: no huge pages in its mapping after registration", what)
}

// collapse backs the huge-page regions a range overlaps with huge pages,
// keeps their contents, and asks about each region once.
func TestHugeSetCollapse(t *testing.T) {
	h := &hugeSet{size: hugePageSize()}
	b := anonRegion(t, h.size, 2*int(h.size))
	// 64 KiB across the boundary of the two regions.
	mid := int(h.size)
	h.collapse(b[mid-32<<10 : mid+32<<10])
	requireCollapsed(t, h.size, b, "collapse")
	require.GreaterOrEqual(t, hugeKB(t, b), 2*int(h.size>>10), "both regions the range overlaps")
	for i := 0; i < len(b); i += 4096 {
		if b[i] != byte(i/4096+1) {
			t.Fatalf("page %d holds %d after the collapse, want %d", i/4096, b[i], byte(i/4096+1))
		}
	}
	require.Len(t, h.tried, 2)
	h.collapse(b[:100])
	h.collapse(b[len(b)-100:])
	require.Len(t, h.tried, 2, "regions already tried are not asked again")

	h.tried = nil
	for i := range hugeMaxRegions {
		h.claim(uintptr(i+1) * h.size * 4)
	}
	require.False(t, h.claim(h.size), "a full set takes no more regions")
}

// Once a queue pair reaches its peer by cross-memory attach, memory
// registered for remote access (before the connection or after it) is
// backed by huge pages, memory for local access only is not, and a device
// with KeepPages leaves all of it alone.
func TestRegisteredMemoryCollapsesForCMA(t *testing.T) {
	size := hugePageSize()
	for _, keep := range []bool{false, true} {
		t.Run(map[bool]string{false: "Default", true: "KeepPages"}[keep], func(t *testing.T) {
			early := anonRegion(t, size, int(size))
			late := anonRegion(t, size, int(size))
			local := anonRegion(t, size, int(size))
			e := newEnd(t, Options{KeepPages: keep})
			reg := func(b []byte, a verbs.Access) {
				m, err := e.pd.RegMR(b[4096:8192], a)
				require.NoError(t, err)
				t.Cleanup(func() { m.Close() })
			}
			reg(early, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
			require.Zero(t, hugeKB(t, early), "registered before any peer reaches this device")

			c := startChild(t, "peer", nil, nil, "")
			f := c.expect("ADDR")
			peerAddr, err := hex.DecodeString(f[1])
			require.NoError(t, err)
			c.send("PEER %s", hex.EncodeToString(e.qp.Address()))
			require.NoError(t, verbs.Connect(e.qp, peerAddr, verbs.DefaultConnectOptions()))
			c.expect("READY")
			defer func() {
				// The child echoes one SEND before it waits for EXIT.
				require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{verbs.SGEOf(e.umr, 0, 64)}}))
				require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{verbs.SGEOf(e.umr, 64, 64)}}))
				okWC(t, e.scq, 4)
				okWC(t, e.rcq, 9)
				c.expect("ECHOED")
				c.send("EXIT")
				require.NoError(t, c.wait(10*time.Second), "child exit")
			}()
			if e.qp.UserMemPath() != UserMemCMA {
				t.Skipf("the kernel does not permit cross-memory attach here (path %v)", e.qp.UserMemPath())
			}
			reg(late, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
			reg(local, verbs.AccessLocalWrite)
			require.Zero(t, hugeKB(t, local), "memory registered for local access only")
			if keep {
				require.Zero(t, hugeKB(t, early), "KeepPages: registered before the connection")
				require.Zero(t, hugeKB(t, late), "KeepPages: registered after it")
				return
			}
			requireCollapsed(t, size, early, "memory registered before the connection")
			requireCollapsed(t, size, late, "memory registered after it")
		})
	}
}
