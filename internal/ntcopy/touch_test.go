//go:build linux

package ntcopy

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// mapPages maps n fresh pages of a memfd twice (as two processes of a
// shared-memory link see one region) and unmaps them at the end.
func mapPages(t *testing.T, n int) (a, b []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("touch-test", 0)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	require.NoError(t, unix.Ftruncate(fd, int64(n*pageSize)))
	for _, m := range []*[]byte{&a, &b} {
		*m, err = unix.Mmap(fd, 0, n*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		require.NoError(t, err)
		mm := *m
		t.Cleanup(func() { unix.Munmap(mm) })
	}
	return a, b
}

func present(t *testing.T, b []byte) []bool {
	t.Helper()
	p, err := Present(b)
	require.NoError(t, err)
	return p
}

// TestTouch maps exactly the pages a slice spans, whatever its alignment,
// in this mapping only, and leaves what they hold as it was: written
// through the other mapping before, for reading and for writing.
func TestTouch(t *testing.T) {
	a, b := mapPages(t, 6)
	for i := range a[:3*pageSize] {
		a[i] = byte(i*7 + 1)
	}
	want := append([]byte(nil), a[:3*pageSize]...)
	require.Equal(t, []bool{false, false, false, false, false, false}, present(t, b), "b's mapping untouched yet")

	Touch(b[pageSize-2:2*pageSize+1], true) // 2 bytes of page 0, all of page 1, 1 byte of page 2
	require.Equal(t, []bool{true, true, true, false, false, false}, present(t, b))
	Touch(b[4*pageSize+100:4*pageSize+200], false)
	require.Equal(t, []bool{true, true, true, false, true, false}, present(t, b))
	require.Equal(t, want, b[:3*pageSize], "contents kept")
	require.Equal(t, want, a[:3*pageSize])

	Touch(nil, true) // nothing to do
}

// TestPagesTouchOnce touches each page the first time a slice over it
// comes, and never again: a page whose mapping was dropped since stays
// unmapped until its own first access. (Private memory: a read fault in a
// shared file mapping also maps the neighbours the page cache holds.)
func TestPagesTouchOnce(t *testing.T) {
	b, err := unix.Mmap(-1, 0, 8*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(b) })
	p := NewPages(b, nil)
	p.TouchOnce(b[pageSize+10:3*pageSize], true) // pages 1 and 2
	require.Equal(t, []bool{false, true, true, false, false, false, false, false}, present(t, b))

	require.NoError(t, unix.Madvise(b[pageSize:3*pageSize], unix.MADV_DONTNEED))
	require.Equal(t, []bool{false, false, false, false, false, false, false, false}, present(t, b), "mapping dropped")
	p.TouchOnce(b[pageSize:4*pageSize], true) // only page 3 is new
	require.Equal(t, []bool{false, false, false, true, false, false, false, false}, present(t, b))

	var none *Pages
	none.TouchOnce(b, true) // a nil Pages (memory not tracked) touches nothing
	require.Equal(t, []bool{false, false, false, true, false, false, false, false}, present(t, b))
}

// TestPagesBudget: Pages sharing a budget touch pages until it runs out
// and leave the rest to their first access, however they are asked.
func TestPagesBudget(t *testing.T) {
	b, err := unix.Mmap(-1, 0, 8*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { unix.Munmap(b) })
	budget := NewBudget(3 * pageSize)
	one, two := NewPages(b[:4*pageSize], budget), NewPages(b[4*pageSize:], budget)
	one.TouchOnce(b[:2*pageSize], true)
	one.TouchOnce(b[:2*pageSize], true) // touched already: costs nothing
	two.TouchOnce(b[4*pageSize:], true) // room for one page
	one.TouchOnce(b[2*pageSize:4*pageSize], true)
	require.Equal(t, []bool{true, true, false, false, true, false, false, false}, present(t, b))
	require.False(t, budget.Take(1))
	require.True(t, (*Budget)(nil).Take(1<<40), "a nil budget has no limit")
}
