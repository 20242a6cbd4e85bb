//go:build linux && cgo && rdma

package ibv

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// ibv_event_type values this provider acts on.
const (
	evCQErr       = 0
	evQPFatal     = 1
	evQPReqErr    = 2
	evQPAccessErr = 3
	evDeviceFatal = 8
	evPortActive  = 9
	evPortErr     = 10
)

// startAsync reads the device's asynchronous events the same way CQ.Wait
// reads completion events: the non-blocking async fd, duplicated, in Go's
// netpoller, with one goroutine per device. Each event is acknowledged at
// once (so destroying a QP or CQ never waits for an ack), logged, and acted
// on: a QP error event records that the QP is in ERR, a CQ overrun makes
// that CQ's Wait fail instead of sleeping forever.
func (d *device) startAsync() error {
	fd := cAsyncFD(d.ctx)
	if err := unix.SetNonblock(fd, true); err != nil {
		return fmt.Errorf("%w: O_NONBLOCK on the async event fd: %w", verbs.ErrUnavailable, err)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("%w: dup of the async event fd: %w", verbs.ErrUnavailable, err)
	}
	f := os.NewFile(uintptr(dup), "ibv-async")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return fmt.Errorf("%w: async event fd: %w", verbs.ErrUnavailable, err)
	}
	d.asyncFile, d.asyncDone = f, make(chan struct{})
	go func() {
		defer close(d.asyncDone)
		for {
			var ev asyncEvent
			var got bool
			var gerr error
			if err := rc.Read(func(uintptr) bool {
				ev, got, gerr = cGetAsyncEvent(d.ctx)
				return got || gerr != nil
			}); err != nil {
				return // closed by Close
			}
			if gerr != nil {
				d.logf(slog.LevelError, "ibv: reading async events failed; no more will be seen", "err", gerr)
				return
			}
			d.handleEvent(ev)
		}
	}()
	return nil
}

func (d *device) stopAsync() {
	if d.asyncFile != nil {
		_ = d.asyncFile.Close()
		<-d.asyncDone
	}
}

func (d *device) logf(level slog.Level, msg string, args ...any) {
	if d.log != nil {
		d.log.Log(context.Background(), level, msg, append([]any{"device", d.name}, args...)...)
	}
}

func (d *device) handleEvent(ev asyncEvent) {
	switch ev.typ {
	case evQPFatal, evQPReqErr, evQPAccessErr:
		d.logf(slog.LevelWarn, "ibv: queue pair error event", "event", ev.name, "qp", ev.qpn)
		if q := d.lookupQP(ev.qpn); q != nil {
			q.mu.Lock()
			if !q.closed && q.state != verbs.QPReset {
				q.state = verbs.QPErr
			}
			q.mu.Unlock()
		}
	case evCQErr:
		d.mu.Lock()
		var hit *cq
		for c := range d.cqs {
			if c.h == ev.cq {
				hit = c
			}
		}
		d.mu.Unlock()
		if hit != nil {
			d.logf(slog.LevelError, "ibv: completion queue overrun", "depth", hit.depth)
			hit.setOverrun()
		}
	case evDeviceFatal:
		d.logf(slog.LevelError, "ibv: device fatal error event", "event", ev.name)
	case evPortErr:
		d.logf(slog.LevelWarn, "ibv: port went down", "port", ev.port)
	case evPortActive:
		d.logf(slog.LevelInfo, "ibv: port active", "port", ev.port)
	default:
		d.logf(slog.LevelDebug, "ibv: async event", "event", ev.name, "qp", ev.qpn, "port", ev.port)
	}
}
