package tcp

import (
	"context"
	"errors"
	"io"
	"os"
	"runtime"
	"sync"
	"time"

	"github.com/rdmago/rdmago/internal/futex"
	"github.com/rdmago/rdmago/verbs/internal/softrc"

	"golang.org/x/sys/unix"
)

// pollFrameMax is the largest frame a poller waits for whole (see
// awaitQueued; READ responses larger than the read buffer it streams
// instead: streamFrame); larger frames go to the reader goroutine: for
// those sizes reading while the transfer goes on matters more than one
// hand-off.
const pollFrameMax = 1 << 20

// awaitQueued blocks, interruptibly, until the next need bytes of the
// connection are all here (buffered or queued in the socket), so that a
// poller can then handle a frame larger than its read buffer without
// blocking in the middle of it: its payload still goes straight from the
// socket into memory, on the waiter's goroutine, and a ctx that ends
// before the frame is all here leaves nothing half handled.
//
// SO_RCVLOWAT makes the kernel wake the poller once, when enough is
// queued, rather than for every segment (it also grows the receive buffer
// to hold that much). The kernel still wakes it early under memory
// pressure or when the receive window closes; after a few wake-ups without
// the frame it returns errLarge and the reader goroutine streams the frame.
// It also does so when the frame is not all here within awaitQueuedMax:
// the rest may be unable to come until something is read (a receive
// window smaller than the frame; the kernel's wake-up at its closing is an
// edge, and it may come before this wait began), and the peer, waiting for
// the window, would wait as long as we do (seen under load: the target of
// a 192 KiB WRITE waited, its peer timed out for want of the ACK).
func (l *link) awaitQueued(need int) error {
	if l.rc == nil {
		return errLarge
	}
	want := need - l.br.Buffered()
	if want <= 0 {
		return nil
	}
	w := &l.qw
	w.want, w.wakes, w.lowat, w.ok, w.err = want, 0, false, false, nil
	l.awaitTimer.Reset(awaitQueuedMax)
	err := l.rc.Read(w.fn)
	expired := !l.awaitTimer.Stop() // it fired (awaitFired)
	if w.lowat {
		_ = l.rc.Control(resetLowat)
		l.lowatHigh = false
	}
	switch {
	case err != nil && errors.Is(err, os.ErrDeadlineExceeded):
		// Interrupt (or ctx's end): nothing of the frame is handled yet.
		_ = l.c.SetReadDeadline(time.Time{})
		if expired {
			return errLarge // the reader goroutine reads it as it comes
		}
		return errInterrupted
	case err != nil:
		return err
	case w.err != nil:
		return errLarge // no SIOCINQ or SO_RCVLOWAT: leave it to the reader
	case !w.ok:
		return errLarge
	}
	return nil
}

// queueWait is awaitQueued's RawConn.Read callback state, and the socket
// probe of arriving and spinUntilQueued, owned by the read token's holder
// (a field of the link so the callbacks do not allocate).
type queueWait struct {
	want, wakes int
	lowat, ok   bool
	err         error
	fn          func(fd uintptr) bool
	queued      int              // what probe last read
	probe       func(fd uintptr) // reads the bytes queued in the socket into queued
	rbuf        []byte           // readQueued's destination
	rn          int              // and its result
	rerr        error
	read        func(fd uintptr) bool // readQueued's RawConn.Read callback
	// readWait's: its buffer, result and RawConn.Read callback (the reader
	// goroutine's, apart from the pollers' above).
	wbuf []byte
	wn   int
	werr error
	wait func(fd uintptr) bool
	// pollReadable's probe: poll(2) with no timeout.
	pollFds []unix.PollFd
	pollN   int
	pollFn  func(fd uintptr)
	// Incoming's probe, for waiters that do not hold the read token: a
	// spinner that finds peekMu taken sees nothing arriving.
	peekMu sync.Mutex
	peekN  int
	peek   func(fd uintptr)
}

// maxEarlyWakes is how many wake-ups without the whole frame awaitQueued
// tolerates (a readiness left over from earlier data, memory pressure).
const maxEarlyWakes = 8

// awaitQueuedMax bounds awaitQueued's wait for a whole frame. A frame the
// poller may wait for (pollFrameMax) crosses loopback in well under a
// millisecond and a 10 Gbit/s link in about one; on slower links, or when
// the sender waits for a CPU, the reader goroutine takes the frame, which
// costs a hand-off, not the wait.
const awaitQueuedMax = 5 * time.Millisecond

func (w *queueWait) init() {
	w.fn = w.check
	w.probe = func(fd uintptr) { w.queued, _ = sysQueued(fd) }
	w.peek = func(fd uintptr) { w.peekN, _ = sysQueued(fd) }
	w.pollFds = make([]unix.PollFd, 1)
	w.pollFn = func(fd uintptr) {
		w.pollFds[0] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		n, err := sysPollNow(w.pollFds)
		if err != nil || w.pollFds[0].Revents != 0 {
			n = 1 // readable, hung up or failed: the read tells which
		}
		w.pollN = n
	}
	w.read = func(fd uintptr) bool {
		w.rn, w.rerr = sysRead(int(fd), w.rbuf)
		return true
	}
	w.wait = func(fd uintptr) bool {
		for {
			w.wn, w.werr = sysRead(int(fd), w.wbuf)
			if w.werr != unix.EINTR {
				return w.werr != unix.EAGAIN // else the poller waits for bytes
			}
		}
	}
}

// readWait is the blocking read of the goroutine that holds the read
// token (the link's reader): it waits in the network poller while nothing
// is queued, as net.Conn's Read does, but reads with a raw read(2) of at
// most rawMax. Conn.Read's goes through syscall.Syscall, whose entry wakes
// the runtime's sysmon thread every time: beside a busy thread on its CPU,
// the target of a 1 MiB Put over tcp woke it once per read and waited
// for each turn, and put_latency there took 2.4x Open MPI's time.
func (l *link) readWait(p []byte) (int, error) {
	if l.rc == nil {
		return l.c.Read(p)
	}
	w := &l.qw
	w.wbuf = p[:min(len(p), rawMax)]
	err := l.rc.Read(w.wait)
	n, rerr := w.wn, w.werr
	w.wbuf, w.werr = nil, nil
	switch {
	case err != nil:
		return 0, err
	case rerr != nil:
		return 0, rerr
	case n == 0 && len(p) > 0:
		return 0, io.EOF
	}
	return n, nil
}

// Incoming implements softrc.Arriver: whether bytes are queued in the
// socket, for a waiter that does not read it (the reader goroutine does),
// or the writer goroutine is writing: a write the socket did not take at
// once waits for the network poller, which a waiter that keeps the thread
// keeps from running. It may run concurrently with the reader and with
// other waiters.
func (l *link) Incoming() bool {
	l.incomings.Add(1)
	if l.writing.Load() {
		return true
	}
	w := &l.qw
	if l.rc == nil || !w.peekMu.TryLock() {
		return false
	}
	defer w.peekMu.Unlock()
	w.peekN = 0
	if l.rc.Control(w.peek) != nil {
		return false
	}
	return w.peekN > 0
}

// ControlFD implements softrc.FDArriver: f runs with the socket's
// descriptor, which stays open meanwhile.
func (l *link) ControlFD(f func(fd int)) error {
	if l.rc == nil {
		return errors.New("tcp: no raw connection")
	}
	return l.rc.Control(func(fd uintptr) { f(int(fd)) })
}

// Writing implements softrc.Writer.
func (l *link) Writing() bool { return l.writing.Load() }

// smallQueued is the most a header read (sockReader.hdrOnly) takes when the
// last look into the socket found that much queued (takeQueued).
const smallQueued = 1 << 10

// takeQueued returns what the last look into the socket (socketQueued)
// found queued, once: later reads must look again.
func (l *link) takeQueued() int {
	q := l.qw.queued
	l.qw.queued = 0
	return q
}

// lastQueued is what the last look into the socket found queued, if no
// read has taken any of it since; else 0.
func (l *link) lastQueued() int { return l.qw.queued }

// socketQueued reports how many bytes are queued in the socket, and false
// when it cannot tell.
func (l *link) socketQueued() (int, bool) {
	if l.rc == nil || l.rc.Control(l.qw.probe) != nil {
		return 0, false
	}
	return l.qw.queued, true
}

func (w *queueWait) check(fd uintptr) bool {
	n, err := sysQueued(fd)
	if err != nil {
		w.err = err
		return true
	}
	if n >= w.want {
		w.ok = true
		return true
	}
	if !w.lowat {
		// The whole frame must fit the window the peer may fill without
		// our reading: were it larger, the peer would stall on a closed
		// window (a larger one is advertised only once we read) and so
		// would we. rcv_ssthresh is the most this side advertises now;
		// the kernel grows it as a connection carries large messages, so
		// this holds after the first few; until then, and for frames
		// beyond it, the reader goroutine streams them.
		ti, err := unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
		if err != nil || w.want > int(ti.Rcv_ssthresh) {
			w.err = errLarge
			return true
		}
		if err := unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, w.want); err != nil {
			w.err = err
			return true
		}
		w.lowat = true
		return false
	}
	// Woken without the whole frame: readiness left over from earlier
	// data, or the kernel's memory pressure.
	w.wakes++
	return w.wakes > maxEarlyWakes
}

func resetLowat(fd uintptr) {
	_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, 1)
}

// quietLowat is the socket's low-water mark while a poller polls it
// (quiet): above any frame that fits the read buffer, so that such a
// frame's arrival does not make the socket readable to epoll.
const quietLowat = readBufSize + 1

func raiseLowat(fd uintptr) {
	_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVLOWAT, quietLowat)
}

// quiet keeps arrivals from waking the network poller while the holder of
// the read token polls the socket itself (pollFrame's spin). Go registers
// every socket with its epoll set, and while some goroutine waits in the
// network poller or a timer is pending (always, in a process that serves
// connections), an idle P's thread sleeps in epoll_wait: each frame that
// arrives wakes that thread, which finds nobody to run, because the poller
// reads the frame itself. That thread then needs a CPU the two polling
// ranks of a ping-pong hold: on 2 CPUs a 32 KiB ping-pong ran about one
// context switch per round trip, and a poller it delays may spin out and
// sleep, which costs the next round trips wake-ups too. SO_RCVLOWAT above
// the frame keeps the kernel from signalling readability (tcp_data_ready
// and poll look at it), while the poll's own reads and SIOCINQ see every
// byte. It stays raised between waits (a ping-pong's waiter is back within
// microseconds): whoever next waits for the socket in the network poller
// lowers it first (loud), the reader goroutine too when it resumes, at the
// latest PollGrace after the last waiter left. (So a crowded poll of
// another CQ that this link also feeds, which looks for arrivals with
// epoll, sees them only then: as for traffic nobody polls for.)
func (l *link) quiet() {
	if l.lowatHigh || l.rc == nil {
		return
	}
	if l.rc.Control(raiseLowat) == nil {
		l.lowatHigh = true
	}
}

// loud restores the low-water mark of 1 that quiet raised; the kernel then
// signals what is already queued at once.
func (l *link) loud() {
	if !l.lowatHigh {
		return
	}
	l.lowatHigh = false
	_ = l.rc.Control(resetLowat)
}

// arriving reports whether bytes of the next frame are here: buffered, or
// queued in the socket.
func (l *link) arriving() bool {
	if l.br.Buffered() > 0 {
		return true
	}
	n, ok := l.socketQueued()
	return ok && n > 0
}

// spinUntilQueued polls the socket without blocking until want bytes are
// queued in it (true), cq has a completion or ctx ends (true: the caller
// re-checks), or deadline passes (false). Each poll is one ioctl; the
// time is read, and other goroutines may run, every few polls.
func (l *link) spinUntilQueued(ctx context.Context, cq *softrc.CQ, want int, deadline time.Time) bool {
	want = max(want, 1)
	for i := 0; ; i++ {
		n, ok := l.socketQueued()
		if !ok {
			return false
		}
		if n >= want || cq.Pending() || ctx.Err() != nil {
			return true
		}
		if l.t.opts.PollYield {
			futex.Yield()
		}
		if i&7 == 7 {
			if time.Now().After(deadline) {
				return false
			}
			// Let this process's other goroutines run now and then: the
			// completion may wait on one of them (the link's writer
			// finishing a large frame), and with GOMAXPROCS=1 nothing
			// else would run until the poll ends.
			runtime.Gosched()
		}
	}
}

// spinFillMax is the largest frame a poller reads as it arrives (spinFill)
// rather than once it is all queued (spinUntilQueued): reading a larger
// frame in the many pieces it arrives in costs more syscalls than it
// overlaps.
const spinFillMax = 32 << 10

// spinFill is spinUntilQueued for a frame that fits the read buffer: it
// reads what arrives into the buffer as it comes, without blocking, until
// want bytes are buffered (true), cq has a completion or ctx ends (true:
// the caller re-checks), or deadline passes (false). Reading at once,
// rather than probing the socket and reading once the frame is there,
// saves a system call per frame, a few µs on a VM.
func (l *link) spinFill(ctx context.Context, cq *softrc.CQ, want int, deadline time.Time) bool {
	if l.rc == nil {
		return l.spinUntilQueued(ctx, cq, want-l.br.Buffered(), deadline)
	}
	for i := 0; ; i++ {
		if l.br.Buffered() < want {
			l.sr.noBlock = true
			_, err := l.br.Peek(want)
			l.sr.noBlock = false
			if err != nil && err != errWouldBlock {
				return true // the blocking read that follows reports it
			}
		}
		if l.br.Buffered() >= want || cq.Pending() || ctx.Err() != nil {
			return true
		}
		if l.t.opts.PollYield {
			futex.Yield() // the sender may need this core
		}
		if i&7 == 7 {
			if time.Now().After(deadline) {
				return false
			}
			runtime.Gosched() // as in spinUntilQueued
		}
	}
}

// streamSpins says a streaming waiter may poll the socket between its
// reads (spinRead): readQueued and pollReadable look into it here.
const streamSpins = true

// pollReadable reports whether the socket is readable, without taking the
// socket's lock as a read or SIOCINQ does (tcp_poll reads its state
// locklessly): a reader that probes in a loop then does not hold off the
// kernel's handling of the segments arriving meanwhile.
func (l *link) pollReadable() bool {
	w := &l.qw
	w.pollN = 0
	if l.rc == nil || l.rc.Control(w.pollFn) != nil {
		return true // let the read tell
	}
	return w.pollN > 0
}

// readQueued reads what is queued in the socket into p without waiting:
// errWouldBlock when nothing is.
func (l *link) readQueued(p []byte) (int, error) {
	w := &l.qw
	w.rbuf = p
	err := l.rc.Read(w.read)
	if err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
		// A past deadline is an interrupt meant for whoever held the token
		// before (the reader goroutine gives it up without clearing it), or
		// one another poller set as this one took the token: the read never
		// ran. Clear it and read; a second one means a poller wants the
		// token now, which nothing read tells the caller to let go.
		_ = l.c.SetReadDeadline(time.Time{})
		if err = l.rc.Read(w.read); err != nil && errors.Is(err, os.ErrDeadlineExceeded) {
			w.rbuf = nil
			return 0, errWouldBlock
		}
	}
	n, rerr := w.rn, w.rerr
	w.rbuf, w.rerr = nil, nil
	switch {
	case err != nil:
		return 0, err
	case rerr == unix.EAGAIN || rerr == unix.EINTR:
		l.emptyReads.Add(1)
		return 0, errWouldBlock
	case rerr != nil:
		return 0, rerr
	case n == 0:
		return 0, io.EOF
	}
	l.spinReads.Add(1)
	return n, nil
}
