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

// TestLightPublishHeavyFence is TestPublishOrderOutsideHeap for light
// publishing: the writer stores with PublishLight and looks with
// AsleepLight (a plain store and a plain load on amd64, which the CPU may
// reorder), the waiter fences with FenceHeavy between its Announce and its
// look. The outcome that loses a wake-up must never show. Without the
// fence it does here: lightLostWithoutFence counts it as a control.
func TestLightPublishHeavyFence(t *testing.T) {
	if !Asymmetric() {
		t.Skip("no light publishing here (not amd64, the race detector, or no membarrier(2))")
	}
	lost, ran := lightLost(t, true, time.Second)
	require.Zero(t, lost, "%d of %d rounds lost the wake-up: the writer saw no sleeper, the fenced waiter not the data", lost, ran)
	t.Logf("%d rounds", ran)
	if testing.Verbose() {
		lost, ran = lightLost(t, false, 200*time.Millisecond)
		t.Logf("without the fence: %d of %d rounds lost the wake-up", lost, ran)
	}
}

// lightLost runs rounds of a light writer against a waiter that fences
// (or not) for up to budget, and counts the rounds that lost the wake-up.
func lightLost(t *testing.T, fence bool, budget time.Duration) (lost, ran int) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	data := (*uint32)(unsafe.Pointer(&mem[0]))
	sleepers := (*uint32)(unsafe.Pointer(&mem[256]))
	var ready, finished, start, seen atomic.Uint32
	end := time.Now().Add(budget)
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
			Announce(sleepers) // A1
			if fence && !FenceHeavy() {
				t.Error("membarrier(2) failed after registering")
			}
			seen.Store(atomic.LoadUint32(data)) // A3
			finished.Store(i)
		}
	}()
	x := uint64(2463534242)
	for i := uint32(1); time.Now().Before(end); i++ {
		for ready.Load() != i {
		}
		atomic.StoreUint32(sleepers, 0)
		start.Store(i)
		x = spinFor(x%64, x)
		PublishLight(data, i)           // B1
		asleep := AsleepLight(sleepers) // B2
		for finished.Load() != i {
		}
		if !asleep && seen.Load() != i {
			lost++
		}
		ran++
	}
	close(stop)
	spinSink += x + <-done
	return lost, ran
}
