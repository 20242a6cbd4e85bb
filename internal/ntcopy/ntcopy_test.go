package ntcopy

import (
	"bytes"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// testSource is n bytes of a pattern that repeats only every 64 KiB, for
// the copies' tests to copy.
func testSource(n int) []byte {
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	return src
}

// TestCopy: every length and alignment copies exactly the bytes copy
// does, and nothing around them.
func TestCopy(t *testing.T) {
	src := testSource(1<<20 + 300)
	for _, n := range []int{0, 1, 63, 64, MinBytes - 1, MinBytes, MinBytes + 1, 10000, piece, piece + 64 + 5, 1<<20 + 17} {
		for _, dOff := range []int{0, 1, 8, 15, 16, 33} {
			for _, sOff := range []int{0, 3, 16} {
				dst := make([]byte, n+100)
				for i := range dst {
					dst[i] = 0xEE
				}
				got := Copy(dst[dOff:dOff+n], src[sOff:sOff+n])
				require.Equal(t, n, got)
				require.Equal(t, src[sOff:sOff+n], dst[dOff:dOff+n], "n=%d dst+%d src+%d", n, dOff, sOff)
				for i, b := range dst {
					if i < dOff || i >= dOff+n {
						require.Equal(t, byte(0xEE), b, "n=%d dst+%d: byte %d outside the copy changed", n, dOff, i)
					}
				}
			}
		}
	}
	// Unequal lengths copy the shorter, like copy.
	require.Equal(t, 5000, Copy(make([]byte, 5000), src[:9000]))
	require.Equal(t, 4100, Copy(make([]byte, 9000), src[:4100]))
}

// TestPrefetch: Prefetch accepts any slice, empty or not, at any
// alignment, up to the last byte of a mapping, and changes nothing.
func TestPrefetch(t *testing.T) {
	buf := guardedPage(t)
	page := len(buf)
	for i := range buf {
		buf[i] = byte(i * 3)
	}
	want := append([]byte(nil), buf...)
	Prefetch(nil)
	for _, n := range []int{0, 1, 63, 64, 65, 127, 1072, page} {
		for _, off := range []int{0, 1, 17, 63} {
			if off+n > page {
				continue
			}
			Prefetch(buf[off : off+n])
			Prefetch(buf[page-n-off : page-off])
		}
	}
	require.Equal(t, want, buf)
}

func pin(cpu int) error {
	runtime.LockOSThread()
	var s unix.CPUSet
	s.Set(cpu)
	return unix.SchedSetaffinity(0, &s)
}

// BenchmarkCrossCoreRewrite: a writer on CPU 0 rewrites a buffer that a
// reader on CPU 1 copied out the previous time (what a shared-memory slot
// sees every round), with copy and with Copy. ns/op is the writer's time;
// the reader's is reported as read-ns/op.
func BenchmarkCrossCoreRewrite(b *testing.B) {
	if runtime.NumCPU() < 2 {
		b.Skip("needs two CPUs")
	}
	for _, n := range []int{4 << 10, 16 << 10, 64 << 10, 512 << 10} {
		for _, name := range []string{"copy", "ntcopy"} {
			b.Run(fmt.Sprintf("bytes=%d/%s", n, name), func(b *testing.B) {
				write := func(d, s []byte) { copy(d, s) }
				if name == "ntcopy" {
					write = func(d, s []byte) { Copy(d, s) }
				}
				src, shared, sink := make([]byte, n), make([]byte, n), make([]byte, n)
				var turn atomic.Int64
				var wt, rt time.Duration
				done := make(chan error, 2)
				iters := b.N
				go func() {
					err := pin(0)
					for i := 0; i < iters && err == nil; i++ {
						for turn.Load() != int64(2*i) {
						}
						t0 := time.Now()
						write(shared, src)
						wt += time.Since(t0)
						turn.Store(int64(2*i + 1))
					}
					done <- err
				}()
				go func() {
					err := pin(1)
					for i := 0; i < iters && err == nil; i++ {
						for turn.Load() != int64(2*i+1) {
						}
						t0 := time.Now()
						copy(sink, shared)
						rt += time.Since(t0)
						turn.Store(int64(2*i + 2))
					}
					done <- err
				}()
				for range 2 {
					if err := <-done; err != nil {
						b.Skipf("pinning: %v", err)
					}
				}
				b.ReportMetric(float64(wt.Nanoseconds())/float64(iters), "ns/op")
				b.ReportMetric(float64(rt.Nanoseconds())/float64(iters), "read-ns/op")
				b.SetBytes(int64(n))
			})
		}
	}
}

// TestPlain: every length and alignment copies exactly the bytes copy
// does, and nothing around them.
func TestPlain(t *testing.T) {
	src := testSource(1<<20 + 300)
	for _, n := range []int{0, 1, 63, 64, 65, WideMin - 1, WideMin, WideMin + 1, 319, 320, 511, 512, 513, 1000, 2048, 4099,
		PlainMin - 1, PlainMin, PlainMin + 1, 100000, piece, piece + 64 + 5, 512 << 10, 512<<10 + 1, 1<<20 + 17} {
		for _, dOff := range []int{0, 1, 15, 33} {
			for _, sOff := range []int{0, 3} {
				dst := make([]byte, n+100)
				for i := range dst {
					dst[i] = 0xEE
				}
				require.Equal(t, n, Plain(dst[dOff:dOff+n], src[sOff:sOff+n]))
				require.Equal(t, src[sOff:sOff+n], dst[dOff:dOff+n], "n=%d dst+%d src+%d", n, dOff, sOff)
				for i, b := range dst {
					if i < dOff || i >= dOff+n {
						require.Equal(t, byte(0xEE), b, "n=%d dst+%d: byte %d outside the copy changed", n, dOff, i)
					}
				}
			}
		}
	}
	// Overlapping slices, either way, and the same slice: as copy.
	for _, d := range []int{-4096, -1, 0, 1, 4096} {
		buf := append([]byte(nil), src[:300000]...)
		want := append([]byte(nil), buf...)
		copy(want[100000+d:200000+d], want[100000:200000])
		require.Equal(t, 100000, Plain(buf[100000+d:200000+d], buf[100000:200000]))
		require.Equal(t, want, buf, "overlap by %d", d)
	}
	require.Equal(t, 5000, Plain(make([]byte, 5000), src[:9000]))
	require.Equal(t, 4100, Plain(make([]byte, 9000), src[:4100]))
}

// TestPlainUsesMovs: Plain moves PlainMin bytes and more with REP MOVSB
// where the CPU has ERMS, in pieces of at most piece bytes (a copy of
// 1 MiB and more too, which Go's copy would stream past the caches), and
// leaves smaller sizes and overlapping slices to copy.
func TestPlainUsesMovs(t *testing.T) {
	if !haveMovs {
		t.Skip("no ERMS")
	}
	calls := countCalls(t, &movsCopy, piece)
	checkPlainCalls(t, calls, 4*piece+1, []callCase{{PlainMin - 1, 0}, {PlainMin, 1}, {piece + 1, 2},
		{1 << 20, (1<<20 + piece - 1) / piece}, {4*piece + 1, 5}})
}

// TestBulkSkipsWide: Bulk copies exactly what copy does at every size
// and offset, and nothing around it, moves PlainMin bytes and more with REP
// MOVSB where the CPU has ERMS (1 MiB and more too), and never uses the
// 64-byte moves (below PlainMin it is Go's copy).
func TestBulkSkipsWide(t *testing.T) {
	src := testSource(1<<20 + 301)
	wides := countCalls(t, &wideCopy, PlainMin)
	movses := countCalls(t, &movsCopy, piece)
	for _, n := range []int{0, 1, 64, WideMin, 2048, 4096 + 3, 4096 + 5, PlainMin - 1, PlainMin, PlainMin + 4096,
		piece + 1, 1 << 20, 1<<20 + 300} {
		for _, off := range []struct{ d, s int }{{1, 0}, {0, 1}} {
			dst := make([]byte, n+2)
			before := *movses
			require.Equal(t, n, Bulk(dst[off.d:off.d+n], src[off.s:off.s+n]))
			require.Equal(t, src[off.s:off.s+n], dst[off.d:off.d+n], "%d bytes %+v", n, off)
			if off.d == 1 {
				require.Zero(t, dst[0], "%d bytes: byte before the copy changed", n)
			}
			require.Zero(t, dst[off.d+n], "%d bytes %+v: byte after the copy changed", n, off)
			if haveMovs {
				want := 0
				if n >= PlainMin {
					want = (n + piece - 1) / piece
				}
				require.Equal(t, want, *movses-before, "REP MOVSB calls for %d bytes", n)
			}
		}
	}
	require.Zero(t, *wides, "64-byte moves")
}

// TestPlainUsesWide: Plain moves WideMin up to PlainMin bytes with wide
// where the CPU has AVX-512 (haveWide), in one call, and leaves smaller
// copies, larger ones and overlapping slices to the other paths; every
// length from 64 to 1 KiB and a spread above, at odd offsets, copies
// exactly its bytes.
func TestPlainUsesWide(t *testing.T) {
	if !haveWide {
		t.Skip("no AVX-512 (or one of the CPUs that slow down with it)")
	}
	calls := countCalls(t, &wideCopy, PlainMin)
	checkPlainCalls(t, calls, PlainMin, []callCase{{WideMin - 1, 0}, {WideMin, 1}, {4096 + 3, 1},
		{PlainMin - 1, 1}, {PlainMin, 0}})

	src := make([]byte, PlainMin+64)
	for i := range src {
		src[i] = byte(i*7 + i>>8)
	}
	sizes := []int{}
	for n := 64; n <= 1024; n++ {
		sizes = append(sizes, n)
	}
	sizes = append(sizes, 4095, 4096, 4097, 4096+767, 4096+768, 4096+769, 8191, 16384+77, PlainMin-1)
	for _, n := range sizes {
		for _, off := range []int{0, 1, 33} {
			dst := make([]byte, n+2*64)
			wide(unsafe.Pointer(&dst[64+off%64]), unsafe.Pointer(&src[off]), uintptr(n))
			if !bytes.Equal(dst[64+off%64:64+off%64+n], src[off:off+n]) {
				t.Fatalf("wide of %d bytes at +%d: wrong bytes", n, off)
			}
			for i, b := range dst {
				if (i < 64+off%64 || i >= 64+off%64+n) && b != 0 {
					t.Fatalf("wide of %d bytes at +%d wrote byte %d outside the copy", n, off, i)
				}
			}
		}
	}
}

type callCase struct{ n, calls int }

// countCalls makes *hook count its calls, each of at most most bytes,
// until the test ends, and returns the count.
func countCalls(t *testing.T, hook *func(dst, src unsafe.Pointer, n uintptr), most uintptr) *int {
	real := *hook
	calls := new(int)
	*hook = func(dst, src unsafe.Pointer, n uintptr) {
		*calls++
		require.LessOrEqual(t, n, most)
		real(dst, src, n)
	}
	t.Cleanup(func() { *hook = real })
	return calls
}

// checkPlainCalls checks how many counted calls Plain makes for each
// case's size, between two halves of a buffer of 2*half+2 bytes, and that
// it makes none for overlapping slices of the first case's size plus one.
func checkPlainCalls(t *testing.T, calls *int, half int, cases []callCase) {
	buf := make([]byte, 2*half+2)
	for _, c := range cases {
		*calls = 0
		Plain(buf[:c.n], buf[half+1:half+1+c.n])
		assert.Equal(t, c.calls, *calls, "%d bytes", c.n)
	}
	n := cases[0].n + 1
	*calls = 0
	Plain(buf[1:n+1], buf[:n])
	assert.Zero(t, *calls, "overlapping")
}

// BenchmarkPlain: Plain against the built-in copy, in cache and beyond.
func BenchmarkPlain(b *testing.B) {
	for _, n := range []int{256, 512, 1 << 10, 2 << 10, 4 << 10, 16 << 10, 32 << 10, 64 << 10, 128 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20} {
		src, dst := make([]byte, n), make([]byte, n)
		for _, name := range []string{"copy", "plain"} {
			b.Run(fmt.Sprintf("bytes=%d/%s", n, name), func(b *testing.B) {
				b.SetBytes(int64(n))
				for range b.N {
					if name == "copy" {
						copy(dst, src)
					} else {
						Plain(dst, src)
					}
				}
			})
		}
	}
}

// TestPrefetchWrite: PrefetchWrite accepts any slice (empty, or at the
// last byte of a mapping), changes nothing, and on amd64 runs PREFETCHW
// when CPUID says the CPU has it (else it does nothing).
func TestPrefetchWrite(t *testing.T) {
	buf := guardedPage(t)
	page := len(buf)
	for i := range buf {
		buf[i] = byte(i * 5)
	}
	want := append([]byte(nil), buf...)
	PrefetchWrite(nil)
	for _, off := range []int{0, 1, 63, 64, page - 1} {
		PrefetchWrite(buf[off:])
	}
	require.Equal(t, want, buf)
	t.Logf("PREFETCHW used: %v", havePrefetchW)
}

// guardedPage is a page of memory whose next page is inaccessible: a
// prefetch past a slice's last line would be harmless there, but a load
// or store would fault.
func guardedPage(t *testing.T) []byte {
	page := unix.Getpagesize()
	m, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(m) })
	require.NoError(t, unix.Mprotect(m[page:], unix.PROT_NONE))
	return m[:page]
}
