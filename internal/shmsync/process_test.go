//go:build linux

package shmsync

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The cross-process test's layout of the shared file: two bells, then the
// two sides' words.
const (
	procBellLead = 0
	procBellPeer = 8
	procWordLead = 16
	procWordPeer = 24
	procSize     = 4096
)

const procEnv = "SHMSYNC_TEST_PEER"

func mapFD(t testing.TB, fd int) []byte {
	mem, err := unix.Mmap(fd, 0, procSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	return mem
}

func word64(mem []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }

// publishers are the ways TestCrossProcess's sides publish, by the name
// its child finds in procEnv.
var publishers = map[string]publisher{"heavy": heavyPublisher, "light": lightPublisher}

// TestCrossProcess: the ping-pong of TestNoLostWakeup between this process
// and a child that maps the same memory (a memfd it inherits: no name in
// /dev/shm, which other tests watch for leaks), each side sleeping in
// futex(2) on a word the other rings; with atomic stores, and with light
// publishing where this machine has it (the fence of a waiter must reach
// the other process). Under -race it lost a wake-up about once in 30 runs
// until Asleep ordered the writer's look after its store
// (TestPublishOrderOutsideHeap).
func TestCrossProcess(t *testing.T) {
	for _, name := range []string{"heavy", "light"} {
		t.Run(name, func(t *testing.T) {
			if name == "light" && !Asymmetric() {
				t.Skip("no light publishing here (not amd64, the race detector, or no membarrier(2))")
			}
			crossProcess(t, name)
		})
	}
}

func crossProcess(t *testing.T, name string) {
	fd, err := unix.MemfdCreate("rdmago-shmsync-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Skipf("memfd_create: %v", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	defer f.Close()
	require.NoError(t, f.Truncate(procSize))
	mem := mapFD(t, fd)
	defer unix.Munmap(mem)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrossProcessPeer$", "-test.count=1")
	cmd.Env = append(os.Environ(), procEnv+"="+name)
	cmd.ExtraFiles = []*os.File{f} // fd 3 in the child
	out := &lockedBuf{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	done, err := pingPongLead(ctx, word64(mem, procWordLead), word64(mem, procWordPeer),
		BellAt(mem, procBellLead), BellAt(mem, procBellPeer), 5000, time.Second, publishers[name])
	require.NoError(t, err, "lost wake-up after %d rounds", done)
	require.NoError(t, cmd.Wait(), "the peer process: %s", out.String())
	require.Positive(t, done)
	t.Logf("%d rounds", done)
}

// TestCrossProcessPeer is TestCrossProcess's child; alone it does nothing.
func TestCrossProcessPeer(t *testing.T) {
	pub, ok := publishers[os.Getenv(procEnv)]
	if !ok {
		t.Skip("the child of TestCrossProcess")
	}
	mem := mapFD(t, 3)
	defer unix.Munmap(mem)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	n, err := pingPongPeer(ctx, word64(mem, procWordPeer), word64(mem, procWordLead),
		BellAt(mem, procBellPeer), BellAt(mem, procBellLead), 0, pub)
	require.NoError(t, err, "after %d rounds", n)
}

// TestNoLostWakeupLight is TestNoLostWakeup with light publishing: each
// side stores its round with PublishLight64 and rings with RingLight, and
// waits Fenced. A ring skipped, or a waiter that does not fence, loses a
// wake-up (the latter only now and then) and hangs the exchange.
func TestNoLostWakeupLight(t *testing.T) {
	if !Asymmetric() {
		t.Skip("no light publishing here (not amd64, the race detector, or no membarrier(2))")
	}
	mem, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	// Outside Go's heap, as a shared segment is: bells and words on lines
	// of their own.
	word := func(off int) *uint64 { return (*uint64)(unsafe.Pointer(&mem[off])) }
	a, b := BellAt(mem, 0), BellAt(mem, 64)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const rounds, budget = 20000, 2 * time.Second
	errc := make(chan error, 1)
	go func() {
		_, err := pingPongPeer(ctx, word(192), word(128), b, a, rounds, lightPublisher)
		errc <- err
	}()
	done, err := pingPongLead(ctx, word(128), word(192), a, b, rounds, budget, lightPublisher)
	require.NoError(t, err, "lost wake-up after %d rounds", done)
	require.NoError(t, <-errc)
	require.Positive(t, done)
	t.Logf("%d rounds", done)
}
