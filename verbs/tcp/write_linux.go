package tcp

import (
	"errors"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// inlineNeverBlocks says writeNow never waits for the socket, so the
// reading side may write responses itself.
const inlineNeverBlocks = true

// maxIov bounds one writev's vector (Linux's IOV_MAX is 1024).
const maxIov = 1024

// flatMax is the largest write that is copied into one buffer rather than
// gathered.
const flatMax = 2048

// rawWriteState is the scratch of writeNow, owned by wmu's holder.
type rawWriteState struct {
	iov  []unix.Iovec
	flat []byte
	bufs net.Buffers // what is left to write, consumed by write
	err  error
	fn   func(fd uintptr) bool
	l    *link
}

func (w *rawWriteState) init(l *link) {
	w.fn = w.write
	w.l = l
}

// write is the RawConn.Write callback: writev until the socket is full or
// everything is written; never wait for the socket to drain.
func (w *rawWriteState) write(fd uintptr) bool {
	w.err = nil
	for len(w.bufs) > 0 {
		w.iov = w.iov[:0]
		total := 0
		for _, b := range w.bufs {
			if len(w.iov) == maxIov {
				break
			}
			if len(b) == 0 {
				continue
			}
			v := unix.Iovec{Base: &b[0]}
			v.SetLen(len(b))
			w.iov = append(w.iov, v)
			total += len(b)
		}
		if len(w.iov) == 0 {
			w.bufs = nil
			break
		}
		var n int
		var e syscall.Errno
		if len(w.iov) > 1 && total <= flatMax {
			// A few small pieces (a header and a short payload): one copy
			// and a plain write cost the kernel less than a gather.
			w.flat = w.flat[:0]
			for _, b := range w.bufs {
				w.flat = append(w.flat, b...)
				if len(w.flat) == total {
					break
				}
			}
			n, e = sysWrite(fd, w.flat, nil, total)
		} else {
			n, e = sysWrite(fd, nil, w.iov, total)
		}
		w.l.writes.Add(1)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			if e != syscall.EAGAIN {
				w.err = e
			}
			break
		}
		w.bufs = consume(w.bufs, n)
		if n < total {
			break // the socket is full
		}
	}
	clear(w.iov[:cap(w.iov)])
	return true
}

// writeNow writes as much of bufs as the socket takes without blocking and
// returns the rest (bufs' own backing array, consumed from the front).
func (l *link) writeNow(bufs net.Buffers) (net.Buffers, error) {
	if l.rc == nil {
		return bufs, nil // leave it all to the writer goroutine
	}
	w := &l.ws
	w.bufs = bufs
	err := l.rc.Write(w.fn)
	rest := w.bufs
	w.bufs = nil
	if err == nil {
		err = w.err
	}
	w.err = nil
	if err != nil {
		var en syscall.Errno
		if errors.As(err, &en) {
			err = &net.OpError{Op: "writev", Net: "tcp", Source: l.c.LocalAddr(), Addr: l.c.RemoteAddr(), Err: err}
		}
		return nil, err
	}
	return rest, nil
}

// consume drops the first n bytes of bufs.
func consume(bufs net.Buffers, n int) net.Buffers {
	for len(bufs) > 0 && n > 0 {
		if n < len(bufs[0]) {
			bufs[0] = bufs[0][n:]
			return bufs
		}
		n -= len(bufs[0])
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}
