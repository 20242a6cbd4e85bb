//go:build !linux

package tcp

import (
	"context"
	"time"

	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// pollFrameMax is the largest frame a poller receives itself: elsewhere
// than on Linux, only what fits its read buffer.
const pollFrameMax = readBufSize

// awaitQueued is the Linux poller's wait for a whole large frame; elsewhere
// such frames are the reader goroutine's.
func (l *link) awaitQueued(int) error { return errLarge }

// arriving is true only when the next frame's bytes are buffered: there is
// no portable way to look into the socket.
func (l *link) arriving() bool { return l.br.Buffered() > 0 }

// socketQueued cannot look into the socket elsewhere than on Linux.
func (l *link) socketQueued() (int, bool) { return 0, false }

// Incoming implements softrc.Arriver: elsewhere than on Linux a waiter
// cannot look into the socket.
func (l *link) Incoming() bool { return false }

type queueWait struct{}

func (w *queueWait) init() {}

func (l *link) spinUntilQueued(context.Context, *softrc.CQ, int, time.Time) bool { return false }

const spinFillMax = 0

func (l *link) spinFill(context.Context, *softrc.CQ, int, time.Time) bool { return false }

func (l *link) readQueued([]byte) (int, error) { return 0, errWouldBlock }

// streamSpins is false: without readQueued a streaming waiter's poll
// would find nothing, so it blocks in its reads at once.
const streamSpins = false

func (l *link) pollReadable() bool { return true }

func (l *link) quiet() {}

func (l *link) loud() {}

func (l *link) takeQueued() int { return 0 }

func (l *link) lastQueued() int { return 0 }

const smallQueued = 0

// readWait is the connection's blocking Read elsewhere than on Linux.
func (l *link) readWait(p []byte) (int, error) { return l.c.Read(p) }
