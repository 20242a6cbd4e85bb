//go:build linux

package shm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// Parking: how the background waiter sleeps (WaitSleep).
//
// A goroutine blocked in futex(2) is in a system call, and Go leaves its P
// (the right to run Go code) attached to it until the runtime's monitor
// takes it back, which takes up to 10 ms once the monitor has backed off.
// With GOMAXPROCS 1 (a rank bound to one core) that is the only P: when the
// foreground goroutine was preempted while the p2p layer's background
// goroutine went to sleep on a futex, the foreground stood still until the
// monitor noticed, 10 ms at a time, and its peer, spinning, stood still
// with it.
//
// So WaitSleep parks in Go's network poller instead, which gives the P
// back at once: each CQ that has a sleeper gets an abstract datagram
// socket, named after its device's socket and its index, and announces
// the sleeper in its doorbell's parked count; producers that see the count
// send one byte to the socket after they publish (the same store-then-load
// handshake as the futex's waiters), one per sleep: the first sets the
// doorbell's woken word, which the sleeper clears before it parks again,
// and later producers skip the system call while it is set. A sleeper
// stays parked until its process next looks at the poller, which a busy
// foreground goroutine postpones: without the word, every message of a
// stream then cost its sender a sendto. Spinning and yielding waiters
// (Wait) keep the futex: the
// goroutine that sleeps there is the one that needs the P next.

// parkWakes counts the wake-up datagrams that parked sleepers received
// (for the tests: a wake-up that never arrives still ends the sleep at the
// backstop deadline).
var parkWakes atomic.Int64

// parkName names a CQ's parking socket after its device's socket.
func parkName(devSock string, idx uint32) string {
	return "@" + devSock + ".cq" + strconv.FormatUint(uint64(idx), 10)
}

// waker sends wake-up datagrams to a CQ's parking socket. Its address is
// encoded once, read-only after: producers wake concurrently.
type waker struct {
	d      *Device // whose socket sends
	addr   unix.RawSockaddrUnix
	addrLn uintptr
}

func newWaker(d *Device, name string) *waker {
	w := &waker{d: d}
	w.addr.Family = unix.AF_UNIX
	// An abstract name: a leading NUL (for the '@'), no terminating one.
	for i := 1; i < len(name) && i < len(w.addr.Path); i++ {
		w.addr.Path[i] = int8(name[i])
	}
	w.addrLn = unsafe.Offsetof(w.addr.Path) + uintptr(min(len(name), len(w.addr.Path)))
	return w
}

func (w *waker) wake() {
	fd := w.d.wakeFD.Load()
	if fd < 0 {
		return
	}
	// A full queue (EAGAIN) already holds a wake-up; a missing socket
	// (ECONNREFUSED) means the sleeper's CQ is gone. It never blocks, so
	// it is a raw system call, as futex.Wake is: through syscall.Syscall
	// its entry woke the runtime's sysmon thread, and a preempted call
	// could hand this thread's P to another.
	b := byte(1)
	unix.RawSyscall6(unix.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&b)), 1, unix.MSG_DONTWAIT,
		uintptr(unsafe.Pointer(&w.addr)), w.addrLn)
}

// openWakeFD makes the device's sending socket.
func openWakeFD() (int, error) {
	return unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
}

// parker returns the CQ's parking socket, making it on first use; nil when
// it cannot be made (the caller sleeps on the futex instead).
func (c *cq) parker() *net.UnixConn {
	if p := c.park.Load(); p != nil {
		return p
	}
	c.parkMake.Lock()
	defer c.parkMake.Unlock()
	if p := c.park.Load(); p != nil || c.parkFailed || c.closed.Load() {
		return p
	}
	p, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: parkName(c.d.sockName, c.idx), Net: "unixgram"})
	if err != nil {
		c.parkFailed = true
		c.d.log.Info("shm: no parking socket for a CQ; its background waiter sleeps on the futex", "device", c.d.name, "cq", c.idx, "err", err)
		return nil
	}
	c.park.Store(p)
	if c.closed.Load() { // shut ran meanwhile and found no socket to close
		c.closePark()
		return nil
	}
	return p
}

// closePark closes the parking socket, which wakes a parked sleeper.
func (c *cq) closePark() {
	if p := c.park.Swap(nil); p != nil {
		p.Close()
	}
}

// drainPark reads every queued wake-up datagram from the parking socket
// fd (non-blocking, as the runtime's sockets are); it reports done once it
// read one, or on an error other than EAGAIN. A plain read, which drops
// the sender's address: recvfrom's allocated one per wake-up.
func (c *cq) drainPark(fd uintptr) bool {
	for {
		_, err := unix.Read(int(fd), c.parkBuf[:])
		switch {
		case err == nil:
			c.parkGot = true // drain every queued wake-up
		case err == unix.EINTR:
		default:
			return c.parkGot || err != unix.EAGAIN
		}
	}
}

// WaitSleep is Wait without the spin and the yield (verbs.SleepWaiter),
// parked in the network poller (see above). Its callers take turns: one
// sleeps on the socket at a time.
func (c *cq) WaitSleep(ctx context.Context) error {
	if c.ready() {
		return nil
	}
	p := c.parker()
	if p == nil {
		return c.wait(ctx, shmsync.Policy{})
	}
	select {
	case c.parkTurn <- struct{}{}:
		defer func() { <-c.parkTurn }()
	case <-ctx.Done():
		return ctx.Err()
	}
	rc, err := p.SyscallConn()
	if err != nil {
		return c.wait(ctx, shmsync.Policy{})
	}
	c.d.memGuard.RLock()
	defer c.d.memGuard.RUnlock()
	if c.d.memGone {
		return c.d.opErr("CQ.Wait", 0, -1, verbs.ErrClosed)
	}
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { p.SetReadDeadline(time.Unix(1, 0)) })
		defer stop()
	}
	if c.parkDrain == nil {
		c.parkDrain = c.drainPark
	}
	for {
		// Cleared before the announcement, so that a producer that sees
		// the sleeper sends again.
		atomic.StoreUint32(c.db.woken, 0)
		shmsync.Announce(c.db.parked)
		// The deadline is a backstop only: producers, Close and ctx wake us.
		// It is set before ctx is checked, so that a cancellation after the
		// check still moves it to the past (the AfterFunc above).
		p.SetReadDeadline(time.Now().Add(time.Second))
		if stop, err := c.sleepOver(ctx); stop {
			shmsync.Withdraw(c.db.parked)
			return err
		}
		c.parkGot = false
		err := rc.Read(c.parkDrain)
		shmsync.Withdraw(c.db.parked)
		if c.parkGot {
			parkWakes.Add(1)
		}
		switch {
		case err == nil && c.parkGot:
			// A producer published: return even if another goroutine has
			// polled the completion meanwhile (a foreground poller usually
			// has), so that the caller sees that others poll and stops
			// sleeping as one who needs waking. Parked again, it stayed
			// a sleeper to every peer while the foreground handled the
			// traffic, and p2p's ring senders sent it a PING per message.
			// Close and ctx wake with a datagram too: say so.
			_, err := c.sleepOver(ctx)
			return err
		case err == nil:
		case errors.Is(err, net.ErrClosed):
			return c.d.opErr("CQ.Wait", 0, -1, verbs.ErrClosed)
		case errors.Is(err, os.ErrDeadlineExceeded):
			if err := ctx.Err(); err != nil {
				return err
			}
		default:
			return c.d.opErr("CQ.Wait", 0, -1, fmt.Errorf("reading the CQ's parking socket: %w", err))
		}
	}
}
