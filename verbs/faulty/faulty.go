package faulty

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

func errorf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))
}

// New returns a provider whose devices are inner's, wrapped with inj. Its
// name is inner's, since addresses and devices are inner's too; it is not
// registered with verbs.Register.
func New(inner verbs.Provider, inj *Injector) verbs.Provider {
	return &provider{inner: inner, inj: inj}
}

type provider struct {
	inner verbs.Provider
	inj   *Injector
}

func (p *provider) Name() string { return p.inner.Name() }

func (p *provider) Traits() verbs.Traits { return p.inner.Traits() }

func (p *provider) CanConnect(local, remote verbs.PeerInfo) bool {
	return p.inner.CanConnect(local, remote)
}

func (p *provider) Open(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error) {
	d, err := p.inner.Open(ctx, o)
	if err != nil {
		return nil, err
	}
	return Wrap(d, p.inj), nil
}

// Opener returns a function that opens a device of the named provider with
// verbs.Open and wraps it with inj: the shape of p2p.Options.OpenDevice, so
// that every device a layer above opens obeys one injector.
func Opener(inj *Injector) func(ctx context.Context, provider string, o verbs.DeviceOptions) (verbs.Device, error) {
	return func(ctx context.Context, provider string, o verbs.DeviceOptions) (verbs.Device, error) {
		d, err := verbs.Open(ctx, provider, o)
		if err != nil {
			return nil, err
		}
		return Wrap(d, inj), nil
	}
}

// Wrap returns dev with every PD, CQ and QP created through it obeying inj.
// Closing the result closes dev.
func Wrap(dev verbs.Device, inj *Injector) verbs.Device {
	return &device{inner: dev, inj: inj, qps: map[*qp]struct{}{}}
}

type device struct {
	inner verbs.Device
	inj   *Injector

	mu  sync.Mutex
	qps map[*qp]struct{} // open QPs, unregistered from the injector at Close
}

func (d *device) Name() string     { return d.inner.Name() }
func (d *device) Provider() string { return d.inner.Provider() }
func (d *device) Caps() verbs.Caps { return d.inner.Caps() }
func (d *device) Close() error {
	d.mu.Lock()
	qps := d.qps
	d.qps = map[*qp]struct{}{}
	d.mu.Unlock()
	for q := range qps {
		q.forget()
	}
	return d.inner.Close()
}
func (d *device) Inner() verbs.Device { return d.inner }

func (d *device) AllocPD() (verbs.PD, error) {
	pd, err := d.inner.AllocPD()
	if err != nil {
		return nil, err
	}
	return &protDomain{inner: pd, dev: d}, nil
}

func (d *device) CreateCQ(depth int) (verbs.CQ, error) {
	c, err := d.inner.CreateCQ(depth)
	if err != nil {
		return nil, err
	}
	return &cq{inner: c, inj: d.inj, qps: map[uint32]*qp{}, buf: make([]verbs.WC, 32)}, nil
}

type protDomain struct {
	inner verbs.PD
	dev   *device
}

func (p *protDomain) AllocMR(n int, a verbs.Access) (verbs.MR, error)  { return p.inner.AllocMR(n, a) }
func (p *protDomain) RegMR(b []byte, a verbs.Access) (verbs.MR, error) { return p.inner.RegMR(b, a) }
func (p *protDomain) Close() error                                     { return p.inner.Close() }

func (p *protDomain) CreateQP(attr verbs.QPInitAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, &verbs.Error{Op: "CreateQP", Provider: p.dev.Provider(), Index: -1,
			Err: errorf(verbs.ErrInvalidArgument, "CQs (%T, %T) were not created by this faulty device", attr.SendCQ, attr.RecvCQ)}
	}
	in := attr
	in.SendCQ, in.RecvCQ = scq.inner, rcq.inner
	iq, err := p.inner.CreateQP(in)
	if err != nil {
		return nil, err
	}
	q := &qp{inner: iq, num: iq.Num(), provider: p.dev.Provider(), inj: p.dev.inj, dev: p.dev, cqs: []*cq{scq, rcq}}
	for _, c := range q.cqs {
		c.attach(q)
	}
	p.dev.inj.register(q)
	p.dev.mu.Lock()
	p.dev.qps[q] = struct{}{}
	p.dev.mu.Unlock()
	return q, nil
}

// qp wraps a QP: posts pass the injector's post rules, and it tracks its
// outstanding send IDs so that a synthesized loss can report RETRY_EXC_ERR
// on the right completion.
type qp struct {
	inner    verbs.QP
	num      uint32
	provider string
	inj      *Injector
	dev      *device
	cqs      []*cq

	mu        sync.Mutex
	sends     []uint64 // IDs of posted sends not yet known to be complete, oldest first
	lost      bool     // the next flushed send completion is reported as RETRY_EXC_ERR
	remoteNum uint32
	closed    bool
	holds     int // HoldPosts not yet released (verbs.PostBatcher)
}

func (q *qp) Num() uint32          { return q.num }
func (q *qp) PSN() uint32          { return q.inner.PSN() }
func (q *qp) Address() []byte      { return q.inner.Address() }
func (q *qp) State() verbs.QPState { return q.inner.State() }
func (q *qp) Cap() verbs.QPCap     { return q.inner.Cap() }
func (q *qp) Inner() verbs.QP      { return q.inner }

func (q *qp) Modify(attr *verbs.QPAttr, mask verbs.AttrMask) error {
	if err := q.inner.Modify(attr, mask); err != nil {
		return err
	}
	if mask&verbs.AttrAV != 0 {
		if a, err := verbs.DecodeAddress(attr.Remote); err == nil {
			q.mu.Lock()
			q.remoteNum = a.QPNum
			q.mu.Unlock()
		}
	}
	return nil
}

func (q *qp) postErr(op string, err error) error {
	return &verbs.Error{Op: op, Provider: q.provider, QPNum: q.num, Index: 0, Err: fmt.Errorf("faulty: injected: %w", err)}
}

func (q *qp) PostSend(wrs ...verbs.SendWR) error {
	if err := q.inj.onPost(q.num, false); err != nil {
		return q.postErr("PostSend", err)
	}
	// Record the IDs before posting (the loop provider completes
	// synchronously, so a completion may be matched before PostSend
	// returns), without holding the lock across the inner post, which may
	// block; then forget the requests the provider refused.
	q.mu.Lock()
	for i := range wrs {
		q.sends = append(q.sends, wrs[i].ID)
	}
	held := q.holds > 0
	q.mu.Unlock()
	if held {
		q.inj.noteHeld(len(wrs))
	}
	err := q.inner.PostSend(wrs...)
	if err != nil {
		n := 0
		var ve *verbs.Error
		if errors.As(err, &ve) && ve.Index > 0 && ve.Index <= len(wrs) {
			n = ve.Index
		}
		q.mu.Lock()
		for _, wr := range wrs[n:] {
			q.forgetSendLocked(wr.ID)
		}
		q.mu.Unlock()
	}
	return err
}

// forgetSendLocked drops the newest record of a send with id, one the
// provider refused after it was recorded.
func (q *qp) forgetSendLocked(id uint64) {
	for j := len(q.sends) - 1; j >= 0; j-- {
		if q.sends[j] == id {
			q.sends = append(q.sends[:j], q.sends[j+1:]...)
			return
		}
	}
}

// PostWriteRun implements verbs.RunWriter for a wrapped QP that writes
// runs (RunLimits reports none otherwise): a post failure injected for
// sends fails it as it fails a PostSend, and the run counts as one send.
func (q *qp) PostWriteRun(id uint64, run *verbs.WriteRun) error {
	rw, ok := q.inner.(verbs.RunWriter)
	if !ok {
		return q.postErr("PostWriteRun", fmt.Errorf("%w: the wrapped QP writes no runs", verbs.ErrInvalidArgument))
	}
	if err := q.inj.onPost(q.num, false); err != nil {
		return q.postErr("PostWriteRun", err)
	}
	q.mu.Lock()
	q.sends = append(q.sends, id)
	held := q.holds > 0
	q.mu.Unlock()
	if held {
		q.inj.noteHeld(1)
	}
	err := rw.PostWriteRun(id, run)
	if err != nil {
		q.mu.Lock()
		q.forgetSendLocked(id)
		q.mu.Unlock()
	}
	return err
}

// RunLimits implements verbs.RunWriter: the wrapped QP's, or no runs.
func (q *qp) RunLimits() (writes, bytes int) {
	if rw, ok := q.inner.(verbs.RunWriter); ok {
		return rw.RunLimits()
	}
	return 0, 0
}

// HoldPosts implements verbs.PostBatcher: it passes the hold on when the
// wrapped QP holds posts itself (else posts go as they come) and counts
// the sends posted under it (Stats.SendsHeld).
func (q *qp) HoldPosts() {
	q.mu.Lock()
	q.holds++
	q.mu.Unlock()
	if b, ok := q.inner.(verbs.PostBatcher); ok {
		b.HoldPosts()
	}
}

// ReleasePosts implements verbs.PostBatcher.
func (q *qp) ReleasePosts() {
	q.mu.Lock()
	if q.holds > 0 {
		q.holds--
	}
	q.mu.Unlock()
	if b, ok := q.inner.(verbs.PostBatcher); ok {
		b.ReleasePosts()
	}
}

func (q *qp) PostRecv(wrs ...verbs.RecvWR) error {
	if err := q.inj.onPost(q.num, true); err != nil {
		return q.postErr("PostRecv", err)
	}
	return q.inner.PostRecv(wrs...)
}

func (q *qp) Close() error {
	q.forget()
	q.dev.mu.Lock()
	delete(q.dev.qps, q)
	q.dev.mu.Unlock()
	// The CQs keep knowing this QP until they are closed: its flushed
	// completions still need the synthesis bookkeeping.
	return q.inner.Close()
}

// forget removes the QP from the injector's table (once).
func (q *qp) forget() {
	q.mu.Lock()
	first := !q.closed
	q.closed = true
	q.mu.Unlock()
	if first {
		q.inj.unregister(q)
	}
}

// Disconnect implements verbs.Disconnector (see the package documentation).
func (q *qp) Disconnect() error {
	q.inj.count(func(s *Stats) { s.Disconnects++ })
	if d, ok := q.inner.(verbs.Disconnector); ok && !q.inj.synthesizing() {
		return d.Disconnect()
	}
	q.mu.Lock()
	remote := q.remoteNum
	q.mu.Unlock()
	if err := q.loseLink(); err != nil {
		return err
	}
	for _, p := range q.inj.lookup(remote) {
		if p != q {
			p.mu.Lock()
			mine := p.remoteNum == q.num
			p.mu.Unlock()
			if mine {
				if err := p.loseLink(); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// loseLink moves the QP to ERR the way a lost link would.
func (q *qp) loseLink() error {
	q.mu.Lock()
	if q.inner.State() == verbs.QPReset {
		q.mu.Unlock()
		return &verbs.Error{Op: "Disconnect", Provider: "faulty", QPNum: q.num, Index: -1,
			Err: errorf(verbs.ErrInvalidState, "QP is in RESET: not connected")}
	}
	q.lost = true
	q.mu.Unlock()
	q.inj.count(func(s *Stats) { s.SynthesizedLoss++ })
	return q.inner.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState)
}

// track updates the send bookkeeping with a completion of this QP and
// rewrites the first flushed send after a synthesized loss.
func (q *qp) track(wc *verbs.WC) {
	q.mu.Lock()
	defer q.mu.Unlock()
	isSend := -1
	for i, id := range q.sends {
		if id == wc.ID {
			isSend = i
			break
		}
	}
	if wc.Status == verbs.StatusSuccess && wc.Opcode >= verbs.WCRecv {
		return // a receive
	}
	if isSend < 0 {
		return // a receive that failed, or a send we never saw
	}
	// Completions of one send queue come in order: everything before this
	// one (unsignaled requests) is done too.
	q.sends = q.sends[isSend+1:]
	if q.lost && wc.Status == verbs.StatusWRFlushErr {
		q.lost = false
		wc.Status = verbs.StatusRetryExcErr
		q.inj.count(func(s *Stats) { s.RetryExcReported++ })
	}
}

// cq wraps a CQ: completions pass the injector's completion rules on their
// way out, in FIFO order.
type cq struct {
	inner verbs.CQ
	inj   *Injector

	mu   sync.Mutex
	qps  map[uint32]*qp
	held []held
	buf  []verbs.WC
}

type held struct {
	wc    verbs.WC
	ready time.Time
}

func (c *cq) attach(q *qp) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.qps[q.num] = q
}

// pullLocked moves whatever the inner CQ holds into held, applying the rules.
func (c *cq) pullLocked() {
	for {
		n := c.inner.Poll(c.buf)
		now := time.Now()
		for _, wc := range c.buf[:n] {
			if q := c.qps[wc.QPNum]; q != nil {
				q.track(&wc)
			}
			drop, delay := c.inj.onCompletion(&wc)
			if drop {
				continue
			}
			ready := now.Add(delay)
			// FIFO: nothing is delivered before what is queued ahead of it.
			if k := len(c.held); k > 0 && c.held[k-1].ready.After(ready) {
				ready = c.held[k-1].ready
			}
			c.held = append(c.held, held{wc: wc, ready: ready})
		}
		if n < len(c.buf) {
			return
		}
	}
}

func (c *cq) Poll(wc []verbs.WC) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pullLocked()
	now := time.Now()
	n := 0
	for n < len(wc) && len(c.held) > 0 && !c.held[0].ready.After(now) {
		wc[n] = c.held[0].wc
		c.held = c.held[1:]
		n++
	}
	if len(c.held) == 0 {
		c.held = nil // let the backing array go
	}
	return n
}

func (c *cq) Wait(ctx context.Context) error {
	for {
		c.mu.Lock()
		c.pullLocked()
		have := len(c.held) > 0
		var due time.Duration
		if have {
			due = time.Until(c.held[0].ready)
		}
		c.mu.Unlock()
		if have && due <= 0 {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if have {
			t := time.NewTimer(due)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
			continue
		}
		if err := c.inner.Wait(ctx); err != nil {
			return err
		}
	}
}

func (c *cq) Close() error { return c.inner.Close() }
