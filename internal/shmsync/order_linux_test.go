package shmsync

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// spinSink keeps the delay loops of TestPublishOrderOutsideHeap.
var spinSink uint64

// spinFor burns about n loop turns; it returns the next pseudo-random
// state.
func spinFor(n, x uint64) uint64 {
	for range n {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
	}
	return x
}

// TestPublishOrderOutsideHeap: the writer's publish-then-Asleep (B1, B2
// in the package doc) against the waiter's Announce-then-look (A1, A3),
// on memory mapped outside Go's heap as every shared segment is, many
// times with the two sides let go together (each after a random short
// delay, to sweep the offset between them). The outcome that loses a
// wake-up must never show: the writer finds no sleeper while the waiter,
// announced, misses the publication. Under -race an atomic store to such
// memory is a plain store, and with a plain load in Asleep the CPU's
// store buffer let exactly that happen (the cross-process ping-pong lost
// a wake-up about once in 30 runs).
func TestPublishOrderOutsideHeap(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	data := (*uint32)(unsafe.Pointer(&mem[0]))
	sleepers := (*uint32)(unsafe.Pointer(&mem[256])) // another cache line

	// ready and finished: the last round the waiter is ready for, and the
	// last one it has finished; start: the round the writer lets go.
	var ready, finished, start, seen atomic.Uint32
	const rounds = 300000
	budget := time.Now().Add(2 * time.Second)
	stop := make(chan struct{})
	done := make(chan uint64, 1)
	go func() {
		x := uint64(88172645463325252)
		for i := uint32(1); ; i++ {
			ready.Store(i)
			for start.Load() != i {
				select {
				case <-stop:
					done <- x
					return
				default:
				}
			}
			x = spinFor(x%64, x)
			Announce(sleepers)                  // A1
			seen.Store(atomic.LoadUint32(data)) // A3
			finished.Store(i)
		}
	}()
	x := uint64(2463534242)
	ran, lost := 0, 0
	for i := uint32(1); i <= rounds && time.Now().Before(budget); i++ {
		for ready.Load() != i {
		}
		atomic.StoreUint32(sleepers, 0)
		start.Store(i)
		x = spinFor(x%64, x)
		atomic.StoreUint32(data, i) // B1
		asleep := Asleep(sleepers)  // B2
		for finished.Load() != i {
		}
		if !asleep && seen.Load() != i {
			lost++
		}
		ran++
	}
	close(stop)
	spinSink += x + <-done
	require.Zero(t, lost, "%d of %d rounds lost the wake-up: the writer saw no sleeper, the announced waiter not the data", lost, ran)
	t.Logf("%d rounds", ran)
}
