package p2p

import (
	"encoding/binary"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// SetDeferGrace sets how long deferred window writes wait for a poll
// before they leave by themselves, for endpoints started after it, and
// returns the previous value.
func SetDeferGrace(d time.Duration) time.Duration {
	old := deferGrace
	deferGrace = d
	return old
}

// SetIgnoreCTS makes senders ignore the split rendezvous's CTS frames (a
// sender that stopped after its RTS), for TestSplitRendezvousSenderGone.
func SetIgnoreCTS(on bool) { testIgnoreCTS.Store(on) }

// CTSSent counts the CTS frames every endpoint of the process has sent.
func CTSSent() int64 { return testCTSSent.Load() }

// FINOKSent counts the FINs every endpoint of the process has sent for a
// rendezvous it READ (not for a truncated or canceled one).
func FINOKSent() int64 { return testFINOKSent.Load() }

// IgnoredCTS counts the CTS frames ignored under SetIgnoreCTS, so that a
// test knows its receiver has sent one.
func IgnoredCTS() int64 { return testIgnoredCTS.Load() }

// PostedRecvs reports how many receives wait in this endpoint's matching
// queue, so that a test knows a receive is posted before it breaks things.
func (ep *Endpoint) PostedRecvs() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.m.posted.len()
}

// Unposted reports how many consumed receive buffers from peer wait to be
// posted again, for TestIdleRepost.
func (ep *Endpoint) Unposted(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].nUnposted
}

// Posted reports how many receive buffers this endpoint has posted for
// peer (it grows when the peer runs out of credits), for TestSlotsGrow.
func (ep *Endpoint) Posted(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].nrecv
}

// SendOutstanding reports the send queue entries this endpoint counts as
// in use toward peer, for TestInlineAccounting.
func (ep *Endpoint) SendOutstanding(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].sqOut
}

// CorruptRing writes a message header claiming size bytes into this
// endpoint's ring to peer and publishes it, as a broken or hostile sender
// would (and wakes the peer), for TestRingCorrupt.
func (ep *Endpoint) CorruptRing(peer int, size uint32) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	o := ep.peers[peer].rout
	if o == nil {
		return false
	}
	l := o.line(o.sent)
	binary.LittleEndian.PutUint32(l[12:], size)
	atomic.StoreUint32(ringWord(l), o.sent+1)
	o.sent++
	p := ep.peers[peer]
	p.sendCtl(ep, header{kind: kPing}) // in case the peer sleeps in its CQ
	return true
}

// HoldProgress stops this endpoint's progress (as a peer whose process is
// stopped or stuck in a long computation would): nobody handles its
// completions, reposts its receive buffers or returns its credits until
// release is called. For TestExpireUnboundedByPeer.
func (ep *Endpoint) HoldProgress() (release func()) {
	ep.pollMu.Lock()
	return ep.pollMu.Unlock
}

// ForgetRings makes the endpoint look as it did before its ring window
// existed (no sleepers word), until the returned function installs the
// word again as setupRings does, for TestRingWakesEarlySleeper.
func (ep *Endpoint) ForgetRings() (restore func()) {
	ep.pollMu.Lock()
	ep.mu.Lock()
	s := ep.sleepers
	ep.sleepers = nil
	atomic.StoreUint32(s, 0) // fresh memory: whoever was counted is forgotten
	ep.mu.Unlock()
	ep.pollMu.Unlock()
	return func() {
		ep.pollMu.Lock()
		ep.mu.Lock()
		ep.setSleepers(s)
		ep.mu.Unlock()
		ep.pollMu.Unlock()
	}
}

// BlockedUncounted reports how many goroutines block in a CQ without
// being counted in a sleepers word, for TestRingWakesEarlySleeper.
func (ep *Endpoint) BlockedUncounted() int {
	ep.pollMu.Lock()
	defer ep.pollMu.Unlock()
	return ep.blockedUncounted
}

// HoldPolls keeps every goroutine of ep from polling until release is
// called, so that a test can line up completions and ring messages that
// one poll then finds together.
func (ep *Endpoint) HoldPolls() (release func()) {
	ep.pollMu.Lock()
	return ep.pollMu.Unlock
}

// PeerQPState is the state of the queue pair to peer, so that a test can
// wait until the provider has noticed that the peer's side is gone.
func (ep *Endpoint) PeerQPState(peer int) verbs.QPState {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].qp.State()
}

// EagerInline reports whether every eager frame to peer (a full EagerLimit
// payload behind the largest header) fits the peer's inline limit.
func (ep *Endpoint) EagerInline(peer int) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	p := ep.peers[peer]
	return p.inline >= hdrLen+p.eager
}

// IncomingProviders names the providers of the devices whose CQs a
// crowded poll asks for what has arrived (Endpoint.incoming), in order,
// for TestCrowdedIncoming.
func (ep *Endpoint) IncomingProviders() []string {
	var names []string
	for _, a := range ep.incoming {
		for _, d := range ep.devs {
			if cq, ok := d.cq.(verbs.Arrivals); ok && cq == a {
				names = append(names, d.provider)
			}
		}
	}
	return names
}

// PollsWithOSYield reports whether this endpoint's waits yield the CPU to
// other processes between polls (the crowded policy over several
// devices), for TestCrowdedIncoming.
func (ep *Endpoint) PollsWithOSYield() bool { return ep.policy.OSYield }

// RingLines is the depth, in lines, of this endpoint's ring in peer's
// window (0 without one), for TestDefaultRingHoldsWindow.
func (ep *Endpoint) RingLines(peer int) int {
	if o := ep.routOf(peer); o != nil {
		return int(o.n)
	}
	return 0
}

// routOf is this endpoint's ring in peer's window, nil without one; its
// depth and RingAhead do not change once it is set.
func (ep *Endpoint) routOf(peer int) *ringOut {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].rout
}

// RingAhead is Options.RingAhead as this endpoint's ring to peer resolved
// it (0 without a ring), for TestRingAheadOption.
func (ep *Endpoint) RingAhead(peer int) int {
	if o := ep.routOf(peer); o != nil {
		return int(o.ahead)
	}
	return 0
}

// RingTail is the tail of this endpoint's ring in peer's window as the
// peer last published it (how many lines it has read; 0 without a ring),
// for TestRingTailAfterDrain.
func (ep *Endpoint) RingTail(peer int) uint32 {
	if o := ep.routOf(peer); o != nil {
		return atomic.LoadUint32(o.tailW)
	}
	return 0
}

// RingMaxLinesPerMessage is how many lines the largest ring message takes.
const RingMaxLinesPerMessage = ringLines

// InlineStaged reports whether any byte past the largest header of the
// inline frame buffer to peer is non-zero: whether a payload was ever
// copied there rather than posted from the caller's buffer.
func (ep *Endpoint) InlineStaged(peer int) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return nonZero(ep.peers[peer].iframe[min(hdrLen, len(ep.peers[peer].iframe)):])
}

// nonZero reports whether any byte of b is non-zero.
func nonZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return true
		}
	}
	return false
}

// HasCold reports whether r carries a rendezvous receive's or window
// operation's state, for TestRequestColdState.
func (r *Request) HasCold() bool { return r.reqCold != nil }

// FreeColds reports how many such states wait for reuse, and whether
// they are all cleared.
func (ep *Endpoint) FreeColds() (n int, clear bool) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	for _, c := range ep.freeColds {
		if !reflect.ValueOf(*c).IsZero() {
			return len(ep.freeColds), false
		}
	}
	return len(ep.freeColds), true
}

// LivenessTick runs one look of the liveness goroutine as if its ticker
// fired at now, for TestHeartbeatEveryTick.
func (ep *Endpoint) LivenessTick(now time.Time) bool {
	return ep.livenessTick(now, ep.livenessPeriod())
}

// PingsSent reports how many heartbeats this endpoint sent to peer.
func (ep *Endpoint) PingsSent(peer int) int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.peers[peer].pings
}

// AnnounceSleeper counts a sleeper in this endpoint's rings' sleepers
// word, as a goroutine about to block in the CQ does, so that a peer's
// ring messages come with a PING, until the returned function withdraws
// it; nil when the endpoint has no rings. For TestRingPingStaleScan.
func (ep *Endpoint) AnnounceSleeper() (withdraw func()) {
	ep.pollMu.Lock()
	defer ep.pollMu.Unlock()
	s := ep.sleepers
	if s == nil {
		return nil
	}
	shmsync.Announce(s)
	return func() { shmsync.Withdraw(s) }
}

// StalePoll is one poll whose look at the rings comes before between
// runs and whose CQ poll after it, as when the poller loses its CPU
// between the two; then runs before any other goroutine can poll. For
// TestRingPingStaleScan.
func (ep *Endpoint) StalePoll(between func(cq verbs.CQ), then func()) {
	ep.pollMu.Lock()
	defer ep.pollMu.Unlock()
	d := ep.devs[0]
	if ep.wcs == nil {
		ep.wcs = make([]verbs.WC, 32)
	}
	ring := ep.sleepers != nil && ep.ringScan()
	between(d.cq)
	n := d.cq.Poll(ep.wcs)
	ep.mu.Lock()
	ep.handlePolledLocked(n, ring)
	ep.mu.Unlock()
	then()
}

// PipeFrag is the payload of each pipelined fragment to peer.
func (ep *Endpoint) PipeFrag(peer int) int { return ep.peers[peer].frag }

// StagingUsed reports whether any byte of the staging slots to peer is
// non-zero: whether a frame was ever copied there rather than posted
// inline.
func (ep *Endpoint) StagingUsed(peer int) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return nonZero(ep.peers[peer].sendMR.Bytes())
}

// SetPollBatching turns off (or back on) the holding of posts while a
// poll's completions are handled, so that a test can tell the batching of
// queued frames (flushDirtyLocked) from it.
func (ep *Endpoint) SetPollBatching(on bool) {
	ep.mu.Lock()
	ep.noPollBatch = !on
	ep.mu.Unlock()
}

// RecvBuffers returns the memory of this endpoint's receive buffers for
// peer and the length of one, for TestRepostWarmsBuffers.
func (ep *Endpoint) RecvBuffers(peer int) (mem []byte, slot int) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	p := ep.peers[peer]
	return p.recvMR.Bytes(), p.slot
}

// WaitArmed reports whether a goroutine waiting for r has armed its wake-up
// and blocks in the CQ (waitCQ), for TestCancelWakesBlockedWait.
func (r *Request) WaitArmed() bool {
	r.ep.mu.Lock()
	defer r.ep.mu.Unlock()
	return r.waker != nil
}

// SpareWakers counts the wakers the endpoint keeps for blocking waits.
func (ep *Endpoint) SpareWakers() int {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return len(ep.wakers)
}

// RingBurst says whether the last claim of this endpoint's ring to peer
// was part of a burst (ringWrite then prefetches the next message's lines). For
// TestRingBurstOnlyInWindows.
func (ep *Endpoint) RingBurst(peer int) bool {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	o := ep.peers[peer].rout
	return o != nil && o.run == 2
}

// ClaimRing claims room for buf in this endpoint's ring to peer, as a send
// on context 0 does under the lock, and returns the write the send does
// after it lets go of the lock, so that a test can keep a message in
// writing for as long as it likes; false when the ring does not take buf.
// For TestRingClaimInWriting.
func (ep *Endpoint) ClaimRing(peer, tag int, buf []byte) (write func(), ok bool) {
	ep.mu.Lock()
	p := ep.peers[peer]
	var s ringSlot
	ok = ep.ringClaim(p, ep.ch0.id, len(buf), &s)
	ep.mu.Unlock()
	if !ok {
		return nil, false
	}
	return func() { ep.ringWrite(p, &s, ep.ch0.id, int32(tag), nil, buf) }, true
}

// PollsStarted is the count of polls started that the background goroutine
// watches, and PollsEntered the part of it that blocking calls' polling
// phases counted (enterPoll), for TestHeldPollCounts.
func (ep *Endpoint) PollsStarted() uint64 { return ep.pollsStarted(ep.polling.Load()) }
func (ep *Endpoint) PollsEntered() uint64 { return ep.polling.Load() >> 32 }

// ProbeChannel is the channel of MeasureLink's messages, for a test that
// plays a misbehaving leader; Probe*Tag are its tags.
func ProbeChannel(ep *Endpoint) *Channel { return &Channel{ep: ep, id: ctxProbe} }

const (
	ProbePlanTag  = probePlan
	ProbeSmallTag = probeSmall
	ProbeLargeTag = probeLarge
	ProbeWarmups  = probeWarmups
)
