//go:build !linux

package tcp

import (
	"net"
	"time"
)

// inlineNeverBlocks is false: writeNow may wait up to inlineWait for the
// socket, so the reading side leaves responses to the writer goroutine.
const inlineNeverBlocks = false

// inlineWait bounds how long PostSend may block on a full socket before it
// leaves the rest of its write to the writer goroutine.
const inlineWait = time.Millisecond

type rawWriteState struct{ w net.Buffers }

func (w *rawWriteState) init(*link) {}

// writeNow writes bufs, waiting at most inlineWait for the socket, and
// returns what is left.
func (l *link) writeNow(bufs net.Buffers) (net.Buffers, error) {
	_ = l.c.SetWriteDeadline(time.Now().Add(inlineWait))
	l.ws.w = bufs // WriteTo consumes its receiver
	_, err := l.ws.w.WriteTo(l.c)
	_ = l.c.SetWriteDeadline(time.Time{})
	if err != nil && isTimeout(err) {
		err = nil
	}
	rest := l.ws.w
	l.ws.w = nil
	return rest, err
}
