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
	lost, ran := lostWakeups(t, func(p *uint32, v uint32) { atomic.StoreUint32(p, v) }, Asleep, nil, 300000, 2*time.Second)
	require.Zero(t, lost, "%d of %d rounds lost the wake-up: the writer saw no sleeper, the announced waiter not the data", lost, ran)
	t.Logf("%d rounds", ran)
}

// TestLightPublishHeavyFence is TestPublishOrderOutsideHeap for light
// publishing: the writer stores with PublishLight and looks with
// AsleepLight (a plain store and a plain load on amd64, which the CPU may
// reorder), the waiter fences with FenceHeavy between its Announce and its
// look. The outcome that loses a wake-up must never show. With -v the test
// also runs the rounds without the fence, where it does show (rarely).
func TestLightPublishHeavyFence(t *testing.T) {
	if !Asymmetric() {
		t.Skip("no light publishing here (not amd64, the race detector, or no membarrier(2))")
	}
	fence := func() {
		if !FenceHeavy() {
			t.Error("membarrier(2) failed after registering")
		}
	}
	lost, ran := lostWakeups(t, PublishLight, AsleepLight, fence, 300000, time.Second)
	require.Zero(t, lost, "%d of %d rounds lost the wake-up: the writer saw no sleeper, the fenced waiter not the data", lost, ran)
	t.Logf("%d rounds", ran)
	if testing.Verbose() {
		lost, ran = lostWakeups(t, PublishLight, AsleepLight, nil, 300000, 200*time.Millisecond)
		t.Logf("without the fence: %d of %d rounds lost the wake-up", lost, ran)
	}
}

// lostWakeups runs up to rounds rounds (within budget) of a writer that
// publishes (B1) and looks for sleepers (B2) against a waiter that
// announces itself (A1), fences if fence is not nil, and looks at the data
// (A3), on memory mapped outside Go's heap as every shared segment is, the
// two sides let go together each after a random short delay (to sweep the
// offset between them). It counts the rounds that lost the wake-up: the
// writer found no sleeper while the waiter, announced, missed the data.
func lostWakeups(t *testing.T, publish func(*uint32, uint32), asleep func(*uint32) bool, fence func(), rounds int, budget time.Duration) (lost, ran int) {
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	data := (*uint32)(unsafe.Pointer(&mem[0]))
	sleepers := (*uint32)(unsafe.Pointer(&mem[256])) // another cache line

	// ready and finished: the last round the waiter is ready for, and the
	// last one it has finished; start: the round the writer lets go.
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
			if fence != nil {
				fence()
			}
			seen.Store(atomic.LoadUint32(data)) // A3
			finished.Store(i)
		}
	}()
	x := uint64(2463534242)
	for i := uint32(1); i <= uint32(rounds) && time.Now().Before(end); i++ {
		for ready.Load() != i {
		}
		atomic.StoreUint32(sleepers, 0)
		start.Store(i)
		x = spinFor(x%64, x)
		publish(data, i)          // B1
		found := asleep(sleepers) // B2
		for finished.Load() != i {
		}
		if !found && seen.Load() != i {
			lost++
		}
		ran++
	}
	close(stop)
	spinSink += x + <-done
	return lost, ran
}
