package tcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

func contextWithDeadline(t *transport, d time.Time) (context.Context, context.CancelFunc) {
	return context.WithDeadline(t.ctx, d)
}

// link is one connected QP pair's TCP connection. Its reader goroutine is
// the QP's responder and completer: it reads each frame header, and the
// payload straight into registered memory (or local READ buffers). Its
// writer goroutine is the requester's wire: it gathers queued responses and
// the QP's next requests into one writev. The reader never writes, so two
// ends busy writing large messages to each other cannot deadlock: each end's
// reader keeps draining its socket.
type link struct {
	t        *transport
	q        *softrc.QP
	c        net.Conn
	br       *bufio.Reader
	peerQP   uint32
	kick     chan struct{}
	done     chan struct{}
	progress func()
	once     sync.Once

	mu    sync.Mutex
	resps []softrc.Response
}

func (t *transport) startLink(q *softrc.QP, c net.Conn, br *bufio.Reader, peerQP uint32) {
	l := &link{t: t, q: q, c: c, br: br, peerQP: peerQP, kick: make(chan struct{}, 1), done: make(chan struct{}), progress: q.Progress}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		_ = c.Close()
		return
	}
	t.links[l] = struct{}{}
	t.wg.Add(2)
	t.mu.Unlock()
	go l.reader()
	go l.writer()
	if !q.Attach(l) {
		l.fail(fmt.Errorf("qp %#x no longer waits for a connection", q.Num()))
	}
}

func (l *link) Kick() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

func (l *link) Close() { l.fail(ErrDisconnected) }

func (l *link) fail(err error) {
	l.once.Do(func() {
		close(l.done)
		_ = l.c.Close()
		l.q.LinkLost(l, err)
		l.t.mu.Lock()
		delete(l.t.links, l)
		l.t.mu.Unlock()
		if !errors.Is(err, ErrDisconnected) && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			l.t.log.Warn("tcp: connection lost", "device", l.t.dev.Name(), "qp", l.q.Num(), "peer_qp", l.peerQP,
				"remote", l.c.RemoteAddr().String(), "err", err)
		}
	})
}

// payload reads one frame's body from the connection, never past its end.
type payload struct {
	br       *bufio.Reader
	left     int
	progress func() // nil for requests
}

func (p *payload) ReadFull(dst []byte) error {
	if len(dst) > p.left {
		return fmt.Errorf("%w: read of %d bytes past the frame's %d remaining", softrc.ErrProtocol, len(dst), p.left)
	}
	for len(dst) > 0 {
		k := min(len(dst), softrc.ProgressChunk)
		n, err := io.ReadFull(p.br, dst[:k])
		p.left -= n
		if err != nil {
			return err
		}
		dst = dst[k:]
		if p.progress != nil && len(dst) > 0 {
			p.progress()
		}
	}
	return nil
}

func (p *payload) Skip(n int) error {
	if n > p.left {
		return fmt.Errorf("%w: skip of %d bytes past the frame's %d remaining", softrc.ErrProtocol, n, p.left)
	}
	k, err := p.br.Discard(n)
	p.left -= k
	return err
}

func (l *link) reader() {
	defer l.t.wg.Done()
	var hb [HeaderLen]byte
	pl := payload{br: l.br}
	var resp softrc.Response
	maxMsg := l.t.dev.Caps().MaxMsgSize
	for {
		if _, err := io.ReadFull(l.br, hb[:]); err != nil {
			l.fail(err)
			return
		}
		h, err := DecodeHeader(hb[:], maxMsg)
		if err == nil && h.QPN != l.q.Num() {
			err = fmt.Errorf("%w: frame for qp %#x on the connection of qp %#x", softrc.ErrProtocol, h.QPN, l.q.Num())
		}
		if err != nil {
			l.fail(err)
			return
		}
		pl.left = h.PayloadLen()
		pl.progress = nil
		if h.Op.IsRequest() {
			err = l.q.HandleRequest(&h, &pl, &resp)
			if resp.Op != 0 {
				if err == nil {
					l.mu.Lock()
					l.resps = append(l.resps, resp)
					l.mu.Unlock()
					l.Kick()
				} else {
					resp.Done()
				}
			}
		} else {
			pl.progress = l.progress
			err = l.q.HandleResponse(&h, &pl)
		}
		if err == nil && pl.left > 0 {
			err = pl.Skip(pl.left)
		}
		if err != nil {
			l.fail(err)
			return
		}
	}
}

const maxBatch = 32

func (l *link) writer() {
	defer l.t.wg.Done()
	var (
		reqs  [maxBatch]softrc.Request
		resps []softrc.Response
		hdrs  []byte
		bufs  net.Buffers
	)
	defer func() {
		l.mu.Lock()
		for i := range l.resps {
			l.resps[i].Done()
		}
		l.resps = nil
		l.mu.Unlock()
	}()
	for {
		select {
		case <-l.kick:
		case <-l.done:
			return
		}
		for {
			l.mu.Lock()
			resps, l.resps = l.resps, resps[:0]
			l.mu.Unlock()
			if need := (len(resps) + maxBatch) * HeaderLen; cap(hdrs) < need {
				hdrs = make([]byte, need)
			}
			hdrs = hdrs[:cap(hdrs)]
			bufs = bufs[:0]
			h := 0
			for i := range resps {
				b := hdrs[h : h+HeaderLen : h+HeaderLen]
				h += HeaderLen
				EncodeHeader(b, &resps[i].Header)
				bufs = append(bufs, b)
				if len(resps[i].Data) > 0 {
					bufs = append(bufs, resps[i].Data)
				}
			}
			n := 0
			for n < maxBatch && l.q.NextRequest(&reqs[n]) {
				b := hdrs[h : h+HeaderLen : h+HeaderLen]
				h += HeaderLen
				EncodeHeader(b, &reqs[n].Header)
				bufs = append(bufs, b)
				for _, d := range reqs[n].Data {
					if len(d) > 0 {
						bufs = append(bufs, d)
					}
				}
				n++
			}
			if len(bufs) == 0 {
				break
			}
			err := l.write(bufs)
			for i := range resps {
				resps[i].Done()
			}
			for i := range n {
				reqs[i].Done()
			}
			if err != nil {
				l.fail(err)
				return
			}
		}
	}
}

// write sends bufs with as few writev calls as possible, but at most about
// ProgressChunk bytes per call, telling the requester after each that its
// traffic moves (so the ACK timer measures a stall, not a message's size).
func (l *link) write(bufs net.Buffers) error {
	var chunk net.Buffers
	for len(bufs) > 0 {
		chunk = chunk[:0]
		n := 0
		for len(bufs) > 0 && n < softrc.ProgressChunk {
			b := bufs[0]
			if room := softrc.ProgressChunk - n; len(b) > room {
				chunk = append(chunk, b[:room])
				bufs[0] = b[room:]
				n += room
				break
			}
			chunk = append(chunk, b)
			n += len(b)
			bufs = bufs[1:]
		}
		w := chunk // WriteTo consumes its receiver
		if _, err := w.WriteTo(l.c); err != nil {
			return err
		}
		if len(bufs) > 0 {
			l.progress()
		}
	}
	return nil
}
