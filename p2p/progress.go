package p2p

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// The progress engine.
//
// Completions are handled by whoever polls the completion queues: progress
// takes a poll lock (TryLock: a second poller simply returns), polls every
// device's CQ and handles the batch under the endpoint mutex. A goroutine
// blocked in Wait, Recv, Send or Probe polls by itself (spinning for
// Options.Spin, then yielding between polls until Spin+Yield), so on the
// hot path the message is noticed by the goroutine that wants it, without
// a hand-off between goroutines (which costs 20-25 µs on a busy 2-core
// machine). The polling is internal/shmsync's Policy (Endpoint.poll, with
// waitPolicy's values). Only then does it block, in the CQ's own Wait
// (one device) or on its request's channel.
//
// One background goroutine per device keeps everything else moving: it
// blocks in CQ.Wait and handles completions when no foreground goroutine is
// polling, so non-blocking requests progress while the program computes,
// credits flow back and liveness frames are answered. While foreground
// goroutines poll (or keep coming back to poll, as a ping-pong loop does)
// it naps on a timer instead, so the two never fight over completions or
// for the cores, and nothing on the hot path has to wake it; a goroutine
// about to block on a channel hands progress to it explicitly (handOff).

// waitSleep waits on the device's CQ without spinning when the provider
// can (verbs.SleepWaiter): the background goroutine must not hold a CPU
// that a foreground goroutine of this process needs.
func (d *device) waitSleep(ctx context.Context) error {
	if sw, ok := d.cq.(verbs.SleepWaiter); ok {
		return sw.WaitSleep(ctx)
	}
	return d.cq.Wait(ctx)
}

func (ep *Endpoint) progress() int {
	ep.releaseDeferred()
	if !ep.pollMu.TryLock() {
		return 0
	}
	return ep.progressLocked()
}

// progressTurn is progress for a goroutine that will block on the CQ next:
// it waits for its turn to poll instead of skipping. Skipping would send it
// straight back to CQ.Wait, which returns at once while the completions the
// current poller is about to take are still queued, so many waiters would
// spin on the CQ's lock and starve the very producers and poller they wait
// for. The caller must not hold ep.mu.
func (ep *Endpoint) progressTurn() int {
	ep.releaseDeferred()
	ep.pollMu.Lock()
	return ep.progressLocked()
}

// progressLocked polls every device; the caller holds ep.pollMu, which this releases.
func (ep *Endpoint) progressLocked() int {
	total := 0
	for _, d := range ep.devs {
		n, ring, ok := ep.pollDev(d)
		if !ok {
			continue
		}
		ep.mu.Lock()
		total += ep.handlePolledLocked(n, ring)
		ep.mu.Unlock()
	}
	ep.pollMu.Unlock()
	return total
}

// progressFor is progress for a goroutine that waits for r: when handling
// a device's completions completes r, it stops there and returns with ep.mu
// held (held); the other devices wait for the next poll.
func (ep *Endpoint) progressFor(r *Request) (total int, held bool) {
	ep.releaseDeferred()
	if !ep.pollMu.TryLock() {
		return 0, false
	}
	for _, d := range ep.devs {
		n, ring, ok := ep.pollDev(d)
		if !ok {
			continue
		}
		ep.mu.Lock()
		total += ep.handlePolledLocked(n, ring)
		if r.done.Load() {
			ep.pollMu.Unlock()
			return total, true
		}
		ep.mu.Unlock()
	}
	ep.pollMu.Unlock()
	return total, false
}

// pollDev polls d's CQ into ep.wcs after noting where the rings stand (the
// frames sent before those ring messages are in the CQ by now, see
// ring.go); ok says there is something to handle (handlePolledLocked).
// The caller holds ep.pollMu.
func (ep *Endpoint) pollDev(d *device) (n int, ring, ok bool) {
	if ep.wcs == nil {
		ep.wcs = make([]verbs.WC, 32)
	}
	ring = ep.sleepers != nil && ep.ringScan()
	n = d.cq.Poll(ep.wcs)
	return n, ring, n > 0 || ring || ep.unsettled
}

// handlePolledLocked handles the n completions a poll put in ep.wcs and,
// when ring says so, the ring messages; the caller holds ep.pollMu and ep.mu.
func (ep *Endpoint) handlePolledLocked(n int, ring bool) int {
	total := n
	// What the completions make us post to a peer goes in one write (READ
	// requests for a window of RTSs, FINs, credits) rather than one each
	// over tcp.
	outer := ep.batching
	if !ep.noPollBatch {
		ep.batching = true
	}
	for i := range ep.wcs[:n] {
		ep.handleWC(&ep.wcs[i])
	}
	if ring && n < len(ep.wcs) {
		total += ep.ringDrainLocked()
	}
	if ep.unsettled && n < len(ep.wcs) {
		ep.settleLinksLocked()
	}
	if len(ep.steerParked) > 0 {
		ep.unparkLocked(false)
	}
	ep.flushDirtyLocked()
	ep.endBatchLocked(outer)
	return total
}

// beginBatchLocked starts holding the posts to every peer whose QP can
// hold them (holdPosts) and reports whether a batch was already under way,
// for endBatchLocked.
func (ep *Endpoint) beginBatchLocked() (outer bool) {
	outer = ep.batching
	ep.batching = true
	return outer
}

// endBatchLocked sends what the batch held, unless it runs inside another
// (outer), whose end sends it.
func (ep *Endpoint) endBatchLocked(outer bool) {
	if outer {
		return
	}
	ep.batching = false
	ep.releasePostsLocked()
}

// holdPosts makes p's QP hold what is posted to it until releasePostsLocked,
// while the endpoint is batching.
func (ep *Endpoint) holdPosts(p *peer) {
	if p.run.Len() > 0 {
		ep.postRunLocked(p) // the writes run before whatever follows them
	}
	if !ep.batching {
		if ep.deferred > 0 && !ep.deferring {
			// Any other post sends the deferred ones first: they
			// were posted before it, and nothing should wait behind
			// them for a poll.
			ep.releasePostsLocked()
		}
		return
	}
	if p.batcher != nil {
		ep.holdQPLocked(p)
	}
}

// holdQPLocked makes p's QP (a PostBatcher) hold its posts until
// releasePostsLocked, unless it holds them already.
func (ep *Endpoint) holdQPLocked(p *peer) {
	if p.held {
		return
	}
	p.held = true
	p.batcher.HoldPosts()
	ep.heldQPs = append(ep.heldQPs, p)
}

// releasePostsLocked sends what the held QPs hold, deferred posts
// included.
func (ep *Endpoint) releasePostsLocked() {
	for _, p := range ep.heldQPs {
		if p.run.Len() > 0 {
			ep.postRunLocked(p)
		}
		p.held = false
		p.batcher.ReleasePosts()
	}
	clear(ep.heldQPs)
	ep.heldQPs = ep.heldQPs[:0]
	if ep.deferred > 0 {
		ep.deferred = 0
		ep.deferOn.Store(false)
		ep.deferTimer.Stop()
	}
}

// Deferred posts. A one-sided write that takes the queue pair of a peer
// whose QP can hold posts (verbs.PostBatcher: a doorbell that is a system
// call) stays held after Window.IwriteNow returns, so that a burst of small
// Puts leaves in one write at the Flush that follows instead of a write
// each (MPI lets a Put wait for its flush). The posts go at the next poll
// of the endpoint by any goroutine (every wait polls first), at the next
// batch's end, when deferMaxPosts are held, or deferGrace after the first
// one if nothing else releases them, so that a program that never polls
// still sees its writes land. A write with a request of its own goes
// after deferMaxPosts are held: releasing every 32 lets the peer place the
// first of a window of 64 Puts of 1-8 KiB while this rank posts the rest
// (put_bw over tcp 1.04-1.12x the rate of releasing every 64, 1.05-1.11x
// that of every 48; every 16 0.80-0.93x of 32's). Small Puts go inline
// (window_inline.go) and cost little to post, while each write of a batch
// costs the kernel several µs here: they go after deferMaxInline, so that
// a window of 64 and its fence leave in one write (the transport takes
// 128 requests a batch, verbs/tcp maxBatch), at 1.3-1.7x the rate of
// releasing every 32.
const (
	deferMaxPosts  = 32
	deferMaxInline = 128
)

var deferGrace = 100 * time.Microsecond // a var for tests (SetDeferGrace)

// deferPostsLocked holds p's posts past this call (see above) and counts
// one more deferred post; it reports false, holding nothing, when p's QP
// cannot hold posts.
func (ep *Endpoint) deferPostsLocked(p *peer) bool {
	if p.batcher == nil || ep.batching {
		return false
	}
	ep.holdQPLocked(p)
	if ep.deferred == 0 {
		ep.deferOn.Store(true)
		if ep.deferTimer == nil {
			ep.deferTimer = time.AfterFunc(deferGrace, ep.releaseDeferred)
		} else {
			ep.deferTimer.Reset(deferGrace)
		}
	}
	ep.deferred++
	return true
}

// releaseDeferred releases the deferred posts, if any: before a poll (a
// goroutine about to wait for something may be waiting for them), and
// from deferTimer. The caller does not hold ep.mu.
func (ep *Endpoint) releaseDeferred() {
	if !ep.deferOn.Load() {
		return
	}
	ep.mu.Lock()
	if ep.deferred > 0 {
		ep.releasePostsLocked()
	}
	ep.mu.Unlock()
}

// progressHeldLocked is progress for a caller that holds ep.mu (and may
// hold it, as pollMu comes before ep.mu, only because it does not wait for
// pollMu): one poll of every device, handled without letting go of ep.mu.
// A blocking receive posts and polls in one hold of the mutex this way
// instead of taking it again for the poll (see Channel.Recv).
func (ep *Endpoint) progressHeldLocked() {
	if ep.deferred > 0 && !ep.batching {
		ep.releasePostsLocked()
	}
	if !ep.pollMu.TryLock() {
		return
	}
	// A poll, for background: a receive that completes here may never
	// enter poll, and background must still see that a goroutine polls.
	shmsync.PublishLight(&ep.heldPolls, ep.heldPolls+1)
	for _, d := range ep.devs {
		if n, ring, ok := ep.pollDev(d); ok {
			ep.handlePolledLocked(n, ring)
		}
	}
	ep.pollMu.Unlock()
}

// pollStarted and pollerIn are what a poll adds to Endpoint.polling.
const (
	pollStarted = 1 << 32
	pollerIn    = 1
)

func (ep *Endpoint) enterPoll() { ep.polling.Add(pollStarted + pollerIn) }

// pollsStarted counts the polls started, from polling's value v and
// heldPolls, for the background goroutine to see them move.
func (ep *Endpoint) pollsStarted(v uint64) uint64 {
	return v>>32 + uint64(atomic.LoadUint32(&ep.heldPolls))
}

// leavePoll only counts down: waking the background goroutine here would
// put a goroutine wake-up (a futex call when a P is idle) on every blocking
// call's path and have it spin on the CQ beside the next foreground poller.
// The background goroutine notices a quiet endpoint by itself (see
// background); a goroutine that is about to block calls handOff instead.
func (ep *Endpoint) leavePoll() { ep.polling.Add(^uint64(0)) } // minus pollerIn

// handOff tells the background goroutines to take over progress now,
// because the caller is about to block on a channel.
func (ep *Endpoint) handOff() {
	for _, d := range ep.devs {
		select {
		case d.wakeCh <- struct{}{}:
		default:
		}
	}
}

// Naps of the background goroutine while foreground goroutines poll: it
// takes over after at most bgNapMax (doubling from bgNapMin) of quiet, or
// at once when a goroutine hands off before blocking.
const (
	bgNapMin = 50 * time.Microsecond
	bgNapMax = time.Millisecond
)

// background handles completions while no foreground goroutine polls. It
// stays off while one does (pollers > 0) and also while they come and go
// (the polls count moved since its last look: a ping-pong loop leaves and
// re-enters the poll between every Send and Recv), napping on a timer so
// that the hot path never has to wake it. A goroutine about to block on a
// channel hands off (wakeCh), which engages it without the nap.
func (ep *Endpoint) background(d *device) {
	defer ep.wg.Done()
	nap := bgNapMin
	timer := time.NewTimer(nap)
	defer timer.Stop()
	kicked := false
	seen := ep.pollsStarted(ep.polling.Load())
	for {
		v := ep.polling.Load()
		busy := uint32(v) > 0
		if now := ep.pollsStarted(v); now != seen {
			seen = now
			busy = busy || !kicked
		}
		if busy {
			kicked = false
			timer.Reset(nap)
			select {
			case <-d.wakeCh:
				kicked = true
			case <-timer.C:
				nap = min(2*nap, bgNapMax)
			case <-ep.bgCtx.Done():
				return
			}
			continue
		}
		kicked, nap = false, bgNapMin
		ep.repostDue()
		if err := ep.blockIn(ep.bgCtx, d, true); err != nil {
			if ep.bgCtx.Err() != nil {
				return
			}
			time.Sleep(time.Millisecond)
			continue
		}
		// Handle what woke us even if a foreground poller appeared
		// meanwhile: a CQ may wake only one of its waiters, and leaving
		// the completion to a poller that was not woken could strand it.
		if ep.progress() == 0 {
			runtime.Gosched()
		}
		ep.repostDue()
	}
}

// liveness sends heartbeats on idle links and declares silent peers lost.
func (ep *Endpoint) liveness() {
	defer ep.wg.Done()
	period := ep.livenessPeriod()
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ep.bgCtx.Done():
			return
		case <-t.C:
		}
		if !ep.livenessTick(time.Now(), period) {
			return
		}
	}
}

// livenessPeriod is how often the liveness goroutine looks at the links.
func (ep *Endpoint) livenessPeriod() time.Duration {
	return min(ep.opts.Heartbeat, ep.opts.LivenessTimeout/4)
}

// livenessTick is one look of the liveness goroutine at now (its ticks
// come every period): it notes the frames heard and sent since the last,
// declares peers silent for LivenessTimeout lost, and pings the links
// idle for Heartbeat. It reports false once the endpoint failed or closes.
//
// A link counts as idle from half a period before Heartbeat is up, and a
// ping it sends counts as sent now: ticks jitter on a busy machine, and
// with the exact comparison, and the ping noted at the next tick (a period
// late), an idle link pinged only every second or third tick, so the peer
// heard from it every 2 to 3 Heartbeats instead of every one, and a few
// seconds of lateness on top used up the LivenessTimeout.
func (ep *Endpoint) livenessTick(now time.Time, period time.Duration) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.failErr != nil || ep.closing {
		return false
	}
	for _, p := range ep.peers {
		if p == nil || p.departed || p.broken {
			continue
		}
		if p.heard {
			p.lastHeard, p.heard = now, false
		}
		if p.sent {
			p.lastSent, p.sent = now, false
		}
		if silent := now.Sub(p.lastHeard); silent > ep.opts.LivenessTimeout {
			ep.loseLocked(p.rank, fmt.Errorf("no frame for %v (liveness timeout %v)", silent.Round(time.Millisecond), ep.opts.LivenessTimeout))
			break
		}
		if now.Sub(p.lastSent) >= ep.opts.Heartbeat-period/2 && len(p.queue) == 0 && p.credits > 0 {
			p.sendCtl(ep, header{kind: kPing})
			p.lastSent, p.sent = now, false
			p.pings++
		}
	}
	ep.flushDirtyLocked()
	return true
}

func (ep *Endpoint) handleWC(wc *verbs.WC) {
	if wc.Opcode == verbs.WCReadServed {
		// Not a request of ours: the peer READ a rendezvous send's buffer
		// whole, and asked our QP to say when it had the data written out.
		ep.rndvServedLocked(wc.ID)
		return
	}
	kind, rank, idx := splitWRID(wc.ID)
	if rank >= ep.size || ep.peers[rank] == nil {
		return
	}
	p := ep.peers[rank]
	switch kind {
	case wrSend:
		if idx&inlineMark != 0 {
			p.sqOut -= int(idx &^ inlineMark)
		} else {
			p.sendFree = append(p.sendFree, int32(idx))
			p.sqOut--
		}
		ep.markDirty(p)
	case wrRead, wrWrite:
		p.sqOut--
		if kind == wrWrite {
			if r := ep.writes[idx]; r != nil {
				p.sqOut -= r.covers
			}
		}
		ep.markDirty(p)
	}
	if wc.Status != verbs.StatusSuccess {
		err := ep.linkCause(p, wc.Err())
		switch kind {
		case wrRead:
			if r := ep.reads[idx]; r != nil {
				r.readErr = err
				ep.readDoneLocked(p, r, idx)
			}
		case wrWrite:
			if r := ep.writes[idx]; r != nil {
				ep.dropWriteLocked(idx)
				ep.completeLocked(r, ep.opErr(r, &PeerLostError{Rank: p.rank, Reporter: ep.rank, Cause: err}))
			}
		}
		cause := fmt.Errorf("link failed: %w", err)
		if p.rin == nil || p.broken {
			ep.linkErrorLocked(p, cause)
		} else if p.linkFail == nil {
			// A peer that closed on purpose sent its last messages and its
			// BYE through the ring, which this poll reads after the CQ:
			// judge the link once both are read (settleLinksLocked).
			p.linkFail = cause
			ep.unsettled = true
		}
		return
	}
	switch kind {
	case wrRecv:
		p.doneSeq++
		ep.onRecv(p, p.recvSlot(idx), wc)
	case wrRead:
		if r := ep.reads[idx]; r != nil {
			ep.readDoneLocked(p, r, idx)
		}
	case wrWrite:
		if r := ep.writes[idx]; r != nil {
			ep.dropWriteLocked(idx)
			if r.op == opWrite {
				p.stats.WriteSent.add(len(r.buf))
			}
			if (r.op == opWinRead || r.op == opWinAtomic) && r.reg != nil {
				r.dev.cache.put(r.reg)
				r.reg = nil
			}
			ep.completeLocked(r, ep.failErrFor(r))
		}
	}
}

func (ep *Endpoint) failErrFor(r *Request) error {
	if ep.failErr != nil {
		return ep.opErr(r, ep.failErr)
	}
	return nil
}

func (ep *Endpoint) onRecv(p *peer, slot uint32, wc *verbs.WC) {
	p.heard = true
	if n := int(wc.ByteLen); n > p.hot {
		p.hot = min(n, p.slot) // the buffers repost keeps warm (peer.warm)
	}
	if wc.Opcode == verbs.WCRecvRDMAWithImm {
		ep.noteLocked(p.rank, wc.Imm)
		p.stats.NotifyRecv.add(0)
		ep.repostLocked(p, slot, true)
		return
	}
	var h header
	b := p.recvBuf(slot, wc.ByteLen)
	if err := parseFrame(b, &h); err != nil {
		ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: err.Error()})
		return
	}
	if h.credits > 0 {
		p.credits += int(h.credits)
		ep.markDirty(p)
	}
	if h.flags&flagAckCtrl != 0 {
		p.ctrlInFlight = false
		ep.markDirty(p)
	}
	if h.flags&flagStarved != 0 {
		ep.growLocked(p)
	}
	if h.flags&flagMarked != 0 {
		// Ring messages sent before this frame come first.
		ep.ringTo(p, h.aux)
		if p.broken {
			return
		}
	}
	owe := true
	switch h.kind {
	case kEager:
		env := envelope{ctx: h.ctx, src: p.rank, tag: h.tag}
		p.stats.eagerRecv(h.ctx, int(h.size), false)
		if ep.failErr != nil {
			break
		}
		ep.arriveEagerLocked(env, b[h.frameLen():])
	case kRTS:
		env := envelope{ctx: h.ctx, src: p.rank, tag: h.tag}
		p.stats.RndvRecv.add(int(h.size))
		if ep.failErr != nil {
			break
		}
		in := &inbound{env: env, size: int(h.size), rts: true, addr: h.addr, rkey: h.rkey, id: h.id, canWrite: h.flags&flagCanWrite != 0}
		if r := ep.m.arrive(env); r != nil {
			ep.deliverLocked(r, in)
		} else {
			ep.m.addUnexpected(in)
			ep.wakeArrivalsLocked()
		}
	case kFIN:
		if r := ep.rndvSends[h.id]; r != nil {
			if h.aux == finCanceled {
				ep.dropRndvSendLocked(r)
				r.canceled = true
				ep.completeLocked(r, ep.opErr(r, ErrCanceled))
			} else {
				ep.rndvSentLocked(p, r)
			}
		}
	case kPipe:
		if ep.failErr == nil {
			ep.onPipe(p, &h, b[pipeLen:])
		}
	case kCTS:
		ep.onCTS(p, &h)
	case kWDone:
		ep.onWDone(p, &h)
	case kCredit:
		owe = false
		p.ackPending = true
		// The acknowledgement (flagAckCtrl on our next frame) frees the
		// reserved buffer for the peer's next CREDIT, so that buffer must
		// be posted again before it goes: left in a batch, the next CREDIT
		// would take a buffer the peer's credits count on, and a credited
		// frame would meet no posted receive and wait in the provider
		// (RNR) while later ring messages overtook it.
		ep.repostLocked(p, slot, false)
		if p.nUnposted > 0 {
			ep.repostNowLocked(p)
		}
		return
	case kPing:
	case kRevoke:
		owe = false
		if ep.failErr == nil && !ep.closing {
			lost := int(h.size)
			ep.failLocked(&PeerLostError{Rank: lost, Reporter: p.rank, Revoked: true,
				Cause: fmt.Errorf("rank %d reported it", p.rank)})
			// Forward once, so ranks the reporter could not reach learn it too.
			ep.broadcastRevokeLocked(lost)
		}
	case kBye:
		owe = false
		ep.departLocked(p)
	case kCancel:
		in := ep.m.removeUnexpected(func(in *inbound) bool { return in.rts && in.env.src == p.rank && in.id == h.id })
		if in != nil {
			p.sendCtl(ep, header{kind: kFIN, aux: finCanceled, id: h.id})
		}
	}
	ep.repostLocked(p, slot, owe)
}

// rndvSentLocked completes rendezvous send r to p, whose data the receiver
// has (FIN) or the provider has written out (rndvServedLocked).
func (ep *Endpoint) rndvSentLocked(p *peer, r *Request) {
	ep.dropRndvSendLocked(r)
	p.stats.RndvSent.add(len(r.buf))
	ep.completeLocked(r, ep.failErrFor(r))
}

// rndvServedLocked handles the provider's report that the READ of the
// rendezvous send with this id was served whole (verbs.WCReadServed): the
// send completes as on a FIN, which the receiver does not send then.
func (ep *Endpoint) rndvServedLocked(id uint64) {
	r := ep.rndvSends[id]
	if r == nil {
		return // a report for a send that already ended (failed, closed)
	}
	p := ep.peers[r.peer] // a rendezvous goes to another rank: never nil
	p.stats.RndvServed.add(len(r.buf))
	ep.rndvSentLocked(p, r)
}

// dropRndvSendLocked forgets rendezvous send r and lets go of its
// buffer's registration: nobody reads it any more.
func (ep *Endpoint) dropRndvSendLocked(r *Request) {
	delete(ep.rndvSends, r.id)
	if r.reg != nil {
		r.dev.cache.put(r.reg)
		r.reg = nil
	}
}

// repostLocked gives a consumed receive buffer back to the queue pair,
// in batches of p.batch(): the credit for a buffer (owe) is returned once
// it is posted. A full batch is posted when the endpoint is next idle (a
// poll loop that found nothing, the background goroutine before it
// sleeps: repostDue), not here, where it would delay the reply the
// caller is about to send by a cross-core write (an eighth of an 8-byte
// shm round trip's software time); only a second full batch is posted at
// once.
func (ep *Endpoint) repostLocked(p *peer, slot uint32, owe bool) {
	if p.broken {
		return
	}
	p.unposted[p.nUnposted] = slot
	p.nUnposted++
	if owe {
		p.unpostOwed++
	}
	b := p.batch()
	if p.nUnposted < b {
		return
	}
	if p.nUnposted < 2*b {
		if !p.due {
			p.due = true
			ep.duePeers = append(ep.duePeers, p)
			ep.due.Store(true)
		}
		return
	}
	ep.repostNowLocked(p)
}

// growLocked answers a sender that waited for credits (flagStarved): it
// posts as many more receive buffers as are posted already, up to
// maxRecv, and owes the sender their credits. Buffers are added only on
// demand because the more a peer's messages cycle through, the more
// memory each one touches anew (see eagerSlotsMax).
func (ep *Endpoint) growLocked(p *peer) {
	if p.broken || p.nrecv >= p.maxRecv {
		return
	}
	k := min(p.nrecv, p.maxRecv-p.nrecv)
	for i := 0; i < k; {
		m := min(k-i, len(p.rwr))
		for j := range m {
			p.recvWR(j, uint32(p.nrecv+i+j))
		}
		if err := p.qp.PostRecv(p.rwr[:m]...); err != nil {
			ep.linkErrorLocked(p, fmt.Errorf("posting more receives: %w", err))
			return
		}
		i += m
	}
	p.nrecv += k
	p.owed += k
	ep.markDirty(p)
}

// repostDue posts the batches repostLocked left for an idle moment.
func (ep *Endpoint) repostDue() {
	if !ep.due.Load() {
		return
	}
	ep.mu.Lock()
	for _, p := range ep.duePeers {
		if p.due && p.nUnposted > 0 {
			ep.repostNowLocked(p)
		}
		p.due = false
	}
	clear(ep.duePeers)
	ep.duePeers = ep.duePeers[:0]
	ep.due.Store(false)
	ep.flushDirtyLocked()
	ep.mu.Unlock()
}

// repostNowLocked posts p's consumed buffers and owes their credits.
func (ep *Endpoint) repostNowLocked(p *peer) {
	if p.broken {
		return
	}
	if err := p.repost(); err != nil {
		ep.linkErrorLocked(p, fmt.Errorf("reposting a receive: %w", err))
		return
	}
	if p.unpostOwed > 0 {
		p.owed += p.unpostOwed
		p.unpostOwed = 0
		ep.markDirty(p)
	}
}

// departLocked handles a peer that closed its endpoint: nothing more will
// come from it, so receives that can only match it fail, and so do sends
// queued to it.
func (ep *Endpoint) departLocked(p *peer) {
	p.departed = true
	p.gone.Store(true)
	gone := &Error{Op: "", Rank: ep.rank, Peer: p.rank, Err: &PeerClosedError{Rank: p.rank}}
	ep.dropSplitsLocked(p, gone.Err)
	ep.dropPipesLocked(p, gone.Err)
	for i := 0; i < ep.m.posted.len(); {
		r := ep.m.posted.items()[i]
		if r.pattern.src == p.rank {
			ep.m.posted.removeAt(i)
			ep.completeLocked(r, ep.opErr(r, gone.Err))
			continue
		}
		i++
	}
	for _, it := range p.queue {
		if it.req != nil {
			ep.dropQueuedLocked(it)
			ep.completeLocked(it.req, ep.opErr(it.req, gone.Err))
		}
	}
	clear(p.queue)
	p.queue, p.qbuf = nil, nil
}

// arriveEagerLocked takes an eager message (env, data) that has arrived:
// into the receive it matches, or copied among the unexpected until one
// is posted. data may be reused once it returns.
func (ep *Endpoint) arriveEagerLocked(env envelope, data []byte) {
	if r := ep.m.arrive(env); r != nil {
		ep.deliverEagerLocked(r, env, data)
		return
	}
	ep.m.addUnexpected(&inbound{env: env, size: len(data), data: ep.spare.get(data)})
	ep.wakeArrivalsLocked()
}

// deliverEagerLocked copies (or folds) an eager payload into a matched
// receive.
func (ep *Endpoint) deliverEagerLocked(r *Request, env envelope, data []byte) {
	r.status = Status{Source: env.src, Tag: int(env.tag), Count: len(data)}
	if c := r.capacity(); len(data) > c {
		if r.fold == nil {
			// What fits, as before (buf is unspecified), which gives a
			// parts receive the message's head.
			r.place(0, data[:c])
		}
		r.status.Count = c
		ep.completeLocked(r, ep.opErr(r, &TruncatedError{Size: len(data), Cap: c}))
		return
	}
	r.place(0, data)
	ep.completeLocked(r, nil)
}

// deliverLocked completes receive r with message in (matched now).
func (ep *Endpoint) deliverLocked(r *Request, in *inbound) {
	if in.pipe != nil {
		ep.matchPipeLocked(r, in.env, in.pipe)
		return
	}
	if !in.rts {
		ep.deliverEagerLocked(r, in.env, in.data)
		ep.spare.put(in.data) // copied out: nothing refers to it now
		in.data = nil
		return
	}
	p := ep.peers[in.env.src]
	r.status = Status{Source: in.env.src, Tag: int(in.env.tag), Count: in.size}
	if in.size > r.capacity() {
		r.status.Count = 0
		p.sendCtl(ep, header{kind: kFIN, aux: finTruncated, id: in.id})
		ep.completeLocked(r, ep.opErr(r, &TruncatedError{Size: in.size, Cap: r.capacity()}))
		return
	}
	if r.placed() {
		// The READ (and the sender's write) place the message whole.
		ep.stageLocked(r, in.size)
	}
	reg, err := p.dev.cache.get(r.buf[:in.size])
	if err != nil {
		ep.regFailedLocked(p, r, in.id, err)
		return
	}
	r.reg, r.dev = reg, p.dev
	ep.coldLocked(r)
	r.rts = *in
	r.readOff, r.readLen = 0, in.size
	if in.canWrite && in.size >= rndvSplitMin && !p.departed && !p.broken && (in.size >= rndvSplitBusyMin || !ep.copiesFor(p.rank)) {
		// Split: ask the sender to write the second part while this rank
		// READs the first, so that both cores copy (see rndvSplitMin).
		h := in.size / 2 &^ 63
		r.readLen, r.split = h, true
		ep.splits[splitKey{p.rank, in.id}] = r
		testCTSSent.Add(1)
		p.sendCtl(ep, header{kind: kCTS, addr: uint64(addrOf(r.buf[h:in.size])), size: uint64(in.size - h), id: in.id})
	}
	ep.startReadLocked(p, r)
}

// regFailedLocked ends rendezvous receive r (of the RTS with this id)
// whose buffer could not be registered: the sender is told (FIN, status
// 1) and r fails.
func (ep *Endpoint) regFailedLocked(p *peer, r *Request, id uint64, err error) {
	p.sendCtl(ep, header{kind: kFIN, aux: finTruncated, id: id})
	ep.completeLocked(r, ep.opErr(r, fmt.Errorf("registering the receive buffer: %w", err)))
}

// startReadLocked READs [r.readOff, r.readOff+r.readLen) of the sender's
// buffer into r.buf.
func (ep *Endpoint) startReadLocked(p *peer, r *Request) {
	chunk := p.chunkFor(r.readLen)
	r.readChunks = (r.readLen + chunk - 1) / chunk
	r.readsLeft = r.readChunks
	ep.opSeq++
	r.readID = ep.opSeq
	ep.reads[r.readID] = r
	r.item = outItem{read: true, req: r}
	_ = p.send(ep, &r.item)
}

// copiesFor reports whether peer has copying of its own to do for this
// rank: a rendezvous send of this rank's large enough to split, which the
// peer READs. Then a split below rndvSplitBusyMin would not give the copy
// to an idle core but add a second copy call (process_vm_writev, a few µs
// before it copies anything), a CTS and a WDONE to a busy one: with both
// ranks sending (OSU bibw over shm) each core copying what it receives
// took 1.26-1.38 times the split's rate at 128-512 KiB (5 rounds), where
// splitting when the traffic goes one way doubles it (bw: 0.36-0.75
// unsplit). From 1 MiB the split won even then (bibw 1 MiB unsplit: 0.73-
// 0.81, 5-9 rounds).
func (ep *Endpoint) copiesFor(peer int) bool {
	for _, r := range ep.rndvSends {
		if r.peer == peer && len(r.buf) >= rndvSplitMin {
			return true
		}
	}
	return false
}

// rndvSplitMin is the smallest rendezvous message whose copy is split
// between the receiver's READ and the sender's write into the receiver's
// memory (providers with verbs.PeerWriter: shm between processes, where
// both are process_vm_readv/writev and a single one leaves the sender's
// core idle). Below it the extra frames cost more than the halved copy.
const rndvSplitMin = 128 << 10

// rndvSplitBusyMin is the smallest rendezvous message split even when its
// sender has copies of its own to make for this rank (copiesFor).
const rndvSplitBusyMin = 1 << 20

// testIgnoreCTS makes senders ignore CTS frames, as one that died or
// froze after its RTS would (set by tests through export_test.go).
var testIgnoreCTS atomic.Bool

// testCTSSent counts the CTS frames receivers sent (for tests).
var testCTSSent atomic.Int64

// testFINOKSent counts the FINs receivers sent for rendezvous they READ
// (for tests).
var testFINOKSent atomic.Int64

// testIgnoredCTS counts the CTS frames testIgnoreCTS dropped.
var testIgnoredCTS atomic.Int64

type splitKey struct {
	peer int
	id   uint64
}

// onCTS is the sender's side of a split rendezvous: write the part asked
// for into the receiver's memory, then say so (WDONE). A write that cannot
// be done is reported, and the receiver READs that part itself.
func (ep *Endpoint) onCTS(p *peer, h *header) {
	if testIgnoreCTS.Load() {
		testIgnoredCTS.Add(1)
		return
	}
	status := uint32(finOK)
	r := ep.rndvSends[h.id]
	pw, ok := p.qp.(verbs.PeerWriter)
	switch {
	case r == nil || !ok || h.size > uint64(len(r.buf)):
		status = finFailed
	default:
		if err := pw.WritePeer(h.addr, r.buf[uint64(len(r.buf))-h.size:]); err != nil {
			status = finFailed
			p.noWrite = true // do not offer again
			ep.log.Debug("p2p: split rendezvous write failed; the receiver reads instead", "rank", ep.rank, "peer", p.rank, "err", err)
		}
	}
	p.sendCtl(ep, header{kind: kWDone, aux: status, id: h.id})
}

// onWDone is the receiver's side: the sender wrote its part (or could not:
// then READ it too); the message is complete once the READ is as well.
func (ep *Endpoint) onWDone(p *peer, h *header) {
	k := splitKey{p.rank, h.id}
	r := ep.splits[k]
	if r == nil {
		return
	}
	delete(ep.splits, k)
	r.split = false
	if h.aux != finOK {
		r.fallback = true
	}
	if r.readDone {
		ep.finishRndvRecvLocked(p, r)
	}
}

// finishRndvRecvLocked completes a rendezvous receive whose READ has
// finished and whose sender has written its part if any: it READs the
// part a failed write left first, then tells the sender (FIN).
func (ep *Endpoint) finishRndvRecvLocked(p *peer, r *Request) {
	if r.fallback {
		r.fallback, r.readDone = false, false
		r.readOff, r.readLen = r.readLen, r.rts.size-r.readLen
		reg, err := p.dev.cache.get(r.buf[:r.rts.size])
		if err != nil {
			ep.regFailedLocked(p, r, r.rts.id, err)
			return
		}
		r.reg = reg
		ep.startReadLocked(p, r)
		return
	}
	if !r.served {
		testFINOKSent.Add(1)
		p.sendCtl(ep, header{kind: kFIN, aux: finOK, id: r.rts.id})
	}
	ep.completeLocked(r, ep.failErrFor(r))
}

func (ep *Endpoint) postReadLocked(p *peer, r *Request) error {
	chunk := p.chunkFor(r.readLen)
	id := wrID(wrRead, p.rank, r.readID)
	// Where the sender's queue pair can say when it has written the
	// response out (over tcp: into the socket, so its buffer is free), the
	// READ of the whole message (its last chunk) asks it to, and that
	// completes the send instead of a FIN from here: over tcp the FIN
	// was a system call on this side before whatever this rank sent next,
	// and, arriving just before that next frame, made the sender's kernel
	// acknowledge the two at once in a packet of its own (Linux acks two
	// small segments in a row at once): 5-9 us of a 512 KiB ping-pong's
	// 107 a way.
	r.served = p.dev.caps.ReadServed && r.readOff == 0 && r.readLen == r.rts.size
	last := verbs.SendSignaled
	if r.served {
		last |= verbs.SendReportServed
	}
	if r.readChunks == 1 {
		p.sge[0] = verbs.SGE{Addr: r.reg.addr(r.buf[r.readOff:]), Length: uint32(r.readLen), LKey: r.reg.mr.LKey()}
		p.swr[0] = verbs.SendWR{ID: id, Opcode: verbs.OpRDMARead, Flags: last,
			SGL: p.sge[:], RemoteAddr: r.rts.addr + uint64(r.readOff), RKey: r.rts.rkey, CompareAdd: r.rts.id}
		ep.holdPosts(p)
		if err := p.qp.PostSend(p.swr[:]...); err != nil {
			return err
		}
		p.sqOut++
		return nil
	}
	wrs := make([]verbs.SendWR, 0, r.readChunks)
	for off := r.readOff; off < r.readOff+r.readLen; off += chunk {
		n := min(chunk, r.readOff+r.readLen-off)
		wrs = append(wrs, verbs.SendWR{ID: id, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
			SGL:        []verbs.SGE{{Addr: r.reg.addr(r.buf[off:]), Length: uint32(n), LKey: r.reg.mr.LKey()}},
			RemoteAddr: r.rts.addr + uint64(off), RKey: r.rts.rkey})
	}
	// Responses go out in request order: the last one's report covers all.
	wrs[len(wrs)-1].Flags, wrs[len(wrs)-1].CompareAdd = last, r.rts.id
	ep.holdPosts(p)
	err := p.qp.PostSend(wrs...)
	if err != nil {
		var ve *verbs.Error
		if asVerbsError(err, &ve) && ve.Index > 0 {
			p.sqOut += ve.Index
			r.readsLeft -= len(wrs) - ve.Index
		}
		return err
	}
	p.sqOut += len(wrs)
	return nil
}

// readDoneLocked counts a finished READ chunk of r; the last one completes r
// and tells the sender (FIN).
func (ep *Endpoint) readDoneLocked(p *peer, r *Request, idx uint32) {
	r.readsLeft--
	if r.readsLeft > 0 {
		return
	}
	delete(ep.reads, idx)
	r.dev.cache.put(r.reg)
	r.reg = nil
	if r.readErr != nil {
		if r.split {
			delete(ep.splits, splitKey{p.rank, r.rts.id})
			r.split = false
		}
		ep.completeLocked(r, ep.opErr(r, &PeerLostError{Rank: p.rank, Reporter: ep.rank, Cause: r.readErr}))
		return
	}
	r.readDone = true
	switch {
	case r.split:
		return // the sender's WDONE finishes it
	case r.splitErr != nil:
		ep.completeLocked(r, ep.opErr(r, r.splitErr))
		return
	}
	ep.finishRndvRecvLocked(p, r)
}

// completeLocked finishes r with err (nil for success) and wakes its waiter.
func (ep *Endpoint) completeLocked(r *Request, err error) {
	if r.done.Load() {
		return
	}
	if r.staged() {
		ep.unstageLocked(r, err)
	}
	r.err = err
	r.done.set()
	if r.waker != nil {
		r.waker.wake()
		r.waker = nil
	}
	if r.notify != nil {
		select {
		case r.notify <- struct{}{}:
		default:
		}
	}
}

// linkCause is what a failed completion on p's QP means: when the provider
// never connected the QP (verbs.ConnectErrorer), the reason it gives (the
// address it tried and the cause), since the flushed request alone would
// say only that the peer is gone.
func (ep *Endpoint) linkCause(p *peer, err error) error {
	ce, ok := p.qp.(verbs.ConnectErrorer)
	if !ok {
		return err
	}
	cerr := ce.ConnectError()
	if cerr == nil {
		return err
	}
	return fmt.Errorf("could not connect over %s: %w (then %w)", ep.Transport(p.rank), cerr, err)
}
