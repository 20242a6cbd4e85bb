package coltest

import (
	"context"
	"fmt"
	"sync"

	"github.com/rdmago/rdmago/collectives"
)

type oneSided struct{ g *group }

// window is one rank's exposed buffer; notes[src] queues the notifications
// rank src sent it.
type window struct {
	buf   []byte
	notes []*noteQueue
}

// Expose is collective: the k-th Expose of every rank forms one window set,
// and it returns once every rank has made its k-th call.
func (o *oneSided) Expose(ctx context.Context, buf []byte) (collectives.Window, error) {
	w := o.g.w
	me := o.g.rank
	win := &window{buf: buf}
	for i := 0; i < w.n; i++ {
		win.notes = append(win.notes, newNoteQueue())
	}
	w.mu.Lock()
	k := w.wexp[me]
	w.wexp[me]++
	if w.wins[k] == nil {
		w.wins[k] = make([]*window, w.n)
	}
	w.wins[k][me] = win
	w.wcond.Broadcast()
	stop := context.AfterFunc(ctx, func() { w.mu.Lock(); w.wcond.Broadcast(); w.mu.Unlock() })
	defer stop()
	for {
		if w.lost != nil {
			err := w.lost
			w.mu.Unlock()
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			w.mu.Unlock()
			return nil, err
		}
		all := true
		for _, x := range w.wins[k] {
			all = all && x != nil
		}
		if all {
			break
		}
		w.wcond.Wait()
	}
	set := w.wins[k]
	w.mu.Unlock()
	return &winHandle{g: o.g, set: set}, nil
}

type winHandle struct {
	g   *group
	set []*window
}

func (h *winHandle) Put(peer, off int, src []byte, imm uint32) (collectives.Request, error) {
	if err := h.g.check(peer, 0, src); err != nil {
		return nil, err
	}
	dst := h.set[peer]
	if off < 0 || off+len(src) > len(dst.buf) {
		return nil, fmt.Errorf("%w: put of %d bytes at offset %d outside rank %d's %d-byte window", ErrInvalid, len(src), off, peer, len(dst.buf))
	}
	copy(dst.buf[off:], src)
	dst.notes[h.g.rank].push(imm)
	return doneRequest(len(src), nil), nil
}

func (h *winHandle) WaitNotify(ctx context.Context, peer int) (uint32, error) {
	if err := h.g.check(peer, 0, nil); err != nil {
		return 0, err
	}
	return h.set[h.g.rank].notes[peer].pop(ctx)
}

func (h *winHandle) Close() error { return nil }

type noteQueue struct {
	mu  sync.Mutex
	q   []uint32
	err error
	sig chan struct{}
}

func newNoteQueue() *noteQueue { return &noteQueue{sig: make(chan struct{}, 1)} }

func (n *noteQueue) push(v uint32) {
	n.mu.Lock()
	n.q = append(n.q, v)
	n.mu.Unlock()
	select {
	case n.sig <- struct{}{}:
	default:
	}
}

func (n *noteQueue) fail(err error) {
	n.mu.Lock()
	n.err = err
	n.mu.Unlock()
	select {
	case n.sig <- struct{}{}:
	default:
	}
}

func (n *noteQueue) pop(ctx context.Context) (uint32, error) {
	for {
		n.mu.Lock()
		if len(n.q) > 0 {
			v := n.q[0]
			n.q = n.q[1:]
			n.mu.Unlock()
			return v, nil
		}
		err := n.err
		n.mu.Unlock()
		if err != nil {
			return 0, err
		}
		select {
		case <-n.sig:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}
