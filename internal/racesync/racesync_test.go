package racesync_test

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/internal/racesync"
)

// A word in mmap'ed memory hands a plain Go value from one goroutine to
// another. The race detector cannot see the atomics on that word; under
// -race this test fails unless Release and Acquire carry the edge.
func TestEdgeThroughMappedWord(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, unix.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	word := (*uint32)(unsafe.Pointer(&mem[0]))
	value := make([]int, 1)
	const rounds = 100
	done := make(chan error, 1)
	go func() {
		for i := uint32(1); i <= rounds; i += 2 {
			deadline := time.Now().Add(10 * time.Second)
			for atomic.LoadUint32(word) != i {
				if time.Now().After(deadline) {
					done <- errors.New("the main goroutine never stored an odd number")
					return
				}
				runtime.Gosched()
			}
			racesync.Acquire()
			value[0]++
			racesync.Release()
			atomic.StoreUint32(word, i+1)
		}
		done <- nil
	}()
	for i := uint32(0); i < rounds; i += 2 {
		deadline := time.Now().Add(10 * time.Second)
		for atomic.LoadUint32(word) != i {
			require.False(t, time.Now().After(deadline), "the other goroutine never stored %d", i)
			runtime.Gosched()
		}
		racesync.Acquire()
		value[0]++
		racesync.Release()
		atomic.StoreUint32(word, i+1)
	}
	require.NoError(t, <-done)
	require.Equal(t, rounds, value[0])
}
