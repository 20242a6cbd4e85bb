//go:build linux

package shm

import (
	"os"
	"testing"
	"unsafe"

	"github.com/rdmago/rdmago/internal/cputime"
	"github.com/stretchr/testify/require"
)

// cmaCopy moves a range longer than one call in several, through local
// segments whose ends fall anywhere in a call, both ways (this process's
// own memory stands for the peer's).
func TestCMACopyAcrossCalls(t *testing.T) {
	pid := os.Getpid()
	n := 2*cmaCallMax + 12345
	src := make([]byte, n+64)
	for i := range src {
		src[i] = byte(i*7 + i>>13)
	}
	cuts := []int{cmaCallMax/3 + 7, cmaCallMax + 5, 2*cmaCallMax - 1}
	segs := func(b []byte) [][]byte {
		var out [][]byte
		prev := 0
		for _, c := range cuts {
			out = append(out, b[prev:c])
			prev = c
		}
		return append(out, nil, b[prev:]) // an empty segment is skipped
	}

	dst := make([]byte, n)
	require.NoError(t, cmaCopy(pid, segs(dst), uint64(uintptr(unsafe.Pointer(&src[64]))), false))
	require.Equal(t, src[64:], dst, "read")

	back := make([]byte, n+64)
	require.NoError(t, cmaCopy(pid, segs(src[:n]), uint64(uintptr(unsafe.Pointer(&back[64]))), true))
	require.Equal(t, src[:n], back[64:], "write")
	require.Equal(t, make([]byte, 64), back[:64], "write outside its range")
}

// A copy that takes longer than the Go scheduler's 20 µs tick does not
// make it hand the copying thread's P to another thread (cmaCall): 8000
// copies of 512 KiB woke the process's threads about 20 times here, about
// as often as its sysmon wakes anyway, and through syscall.Syscall 530-600
// times.
func TestCMACopyWakesNoThreads(t *testing.T) {
	if cputime.Wakeups() < 0 {
		t.Skip("no /proc/self/task to count wake-ups in")
	}
	pid := os.Getpid()
	src, dst := make([]byte, 512<<10), make([]byte, 512<<10)
	addr := uint64(uintptr(unsafe.Pointer(&src[0])))
	local := [][]byte{dst}
	require.NoError(t, cmaCopy(pid, local, addr, false)) // first touch
	const calls = 8000
	before := cputime.Wakeups()
	for range calls {
		if err := cmaCopy(pid, local, addr, false); err != nil {
			t.Fatal(err)
		}
	}
	woke := cputime.Wakeups() - before
	t.Logf("%d copies of 512 KiB: %d thread wake-ups", calls, woke)
	require.Less(t, woke, calls/40, "the copies' threads were handed off and woken")
}
