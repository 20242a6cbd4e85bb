package p2p

import (
	"fmt"
	"math/bits"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/verbs"
)

// Flow control (the eager protocol's credits).
//
// Each side posts EagerSlots receive buffers of slotLen(EagerLimit) bytes on
// the queue pair before connecting. A sender starts with EagerSlots-1
// credits; every frame that consumes one of the receiver's buffers (EAGER,
// RTS, FIN, CANCEL, PING, and window writes with a notification) costs one.
// The receiver reposts the buffers it has handled in batches (an eighth of
// them, posted when the endpoint is next idle, or at once when a second
// batch fills: see repostLocked) and then owes the sender their credits,
// which go back in the credits field of the next frame it sends that way.
// A sender that had to queue a frame for want of credits says so on its
// next frame (flagStarved); its receiver then posts as many buffers again,
// up to EagerSlotsMax, and owes their credits too (growLocked). Buffers
// are only ever added, so the argument below holds with the new count. When it has nothing to send and owes at
// least half the slots, it sends an explicit CREDIT frame, which costs no
// credit: it lands in the one slot the sender never uses for anything else.
// Only one CREDIT frame is in flight per direction; the peer says the
// reserved slot is free again with flagAckCtrl on its next frame (it will
// send one: the CREDIT gave it credits exactly because it was sending),
// having posted that buffer again first. So
// a sender can never overrun a receiver, memory stays bounded by the slots,
// and credits cannot deadlock: a frame's credit is always returned, either
// piggybacked or in a CREDIT frame. BYE and REVOKE frames go without
// credits; they are sent at most once per peer, and the provider's RNR
// retry holds them until a buffer is free.
//
// A send that cannot go now (no credit, no free staging slot, a full send
// queue, or earlier sends queued) joins the peer's queue, which the
// progress engine drains in order, so per-peer order holds.

// WR ids: kind<<56 | rank<<32 | index.
const (
	wrRecv  = 1 // index: receive slot (with a steer: | post sequence number mod 2^16 << 16, see recvWR)
	wrSend  = 2 // index: staging slot
	wrRead  = 3 // index: read id
	wrWrite = 4 // index: write id
)

func wrID(kind, rank int, idx uint32) uint64 {
	return uint64(kind)<<56 | uint64(rank)<<32 | uint64(idx)
}

func splitWRID(id uint64) (kind, rank int, idx uint32) {
	return int(id >> 56), int(id>>32) & 0xffffff, uint32(id)
}

func sqDepth(slots int) int { return slots + 40 }

// Inline frames: over a provider with InlineSends (shm), whose inline SEND
// is copied like any other (up to 48 bytes into the completion's own
// line), control frames and eager frames up to the device's inline limit,
// which needs at least inlineMax (an EAGER of 36, an RTS, a FIN); a send
// queue entry of an unsignaled one is accounted for when the next
// signaled one completes, whose work request id carries their count
// (idx = inlineMark | count).
const (
	inlineMax    = 48
	inlineSignal = 16
	// pairMin is the smallest inline payload posted as a pair (header and
	// payload apart): an shm ping-pong measured no gain from the pair at
	// 1 KiB, where the saved copy is a few nanoseconds, and a clear one
	// from 2 KiB.
	pairMin    = 2 << 10
	inlineMark = 1 << 31
	// lentMin is the smallest eager payload posted as a lent pair
	// (verbs.LentPairPoster: the header inline, the payload written from
	// the caller's buffer) rather than copied into a staging slot first.
	lentMin = 4 << 10
)

type outItem struct {
	h          header
	payload    []byte   // (after req.head, an IsendParts message's first part, in its first frame)
	req        *Request // completed when posted (eager sends) or nil
	complete   bool     // complete req when posted
	uncredited bool     // BYE / REVOKE / CREDIT
	read       bool     // a rendezvous READ for req
	write      bool     // a window write for req
}

type peer struct {
	// fastMsgs and fastBytes count the writes IwriteNow's copy made
	// without ep.mu (countFastWrite), added to stats.WriteSent when Stats
	// reads it. First in the struct, so that their atomic loads find them
	// 64-bit aligned on 32-bit platforms too.
	fastMsgs, fastBytes uint64

	rank    int
	dev     *device
	qp      verbs.QP
	eager   int // largest eager message
	frag    int // a pipelined fragment's payload: eager, less eagerHeadroom by default
	pipe    int // largest pipelined message (0: none)
	slot    int // bytes per buffer
	recvMR  verbs.MR
	hot     int // bytes of a receive buffer repost keeps warm: the peer's largest frame (warm)
	sendMR  verbs.MR
	nrecv   int  // receive buffers posted (see growLocked)
	maxRecv int  // the most nrecv may grow to (recvMR holds that many)
	starved bool // a frame waited for credits since the last frame we sent

	// single: above this size a message that would go eagerly or
	// pipelined takes the rendezvous's single copy instead (0: never;
	// Endpoint.SetSingleCopyMin); forceRndv makes every such message take
	// it (MeasureCopy's rendezvous rounds). Both under ep.mu.
	single    int
	forceRndv bool

	// Small frames go inline where the provider takes them so
	// (verbs.Traits.InlineSends; the WR carries their bytes): no staging
	// slot, and only every inlineSignal-th is signaled.
	inline int    // largest inline frame (0: none)
	unsig  int    // inline frames posted unsignaled since the last signaled one
	iframe []byte // the inline frame being posted (p.inline bytes)
	// pair posts an inline frame's header and payload from their own
	// buffers (nil: the QP cannot, and the payload is copied into iframe).
	pair verbs.InlinePairPoster
	// lent writes eager payloads from the caller's buffer (see lentMin).
	lent    verbs.LentPairPoster
	batcher verbs.PostBatcher // the QP's, when it has the capability (Endpoint.holdPosts)
	// runs takes deferred inline writes as one request (window_inline.go):
	// run holds those not yet posted, up to runWrites writes of runBytes
	// bytes in all; runErr is the failure of posting one, for the next
	// write or fence to this peer to report.
	runs                verbs.RunWriter
	run                 verbs.WriteRun
	runWrites, runBytes int
	runErr              error
	held                bool // batcher holds posts for the endpoint (Endpoint.holdPosts)
	grows               bool // buffers grow on demand (maxRecv > EagerSlots; symmetric)
	// steer takes the bodies of pipelined fragments from the provider
	// straight into their receive (nil: the QP cannot; see pipeSteer).
	steer *pipeSteer
	// Receives posted to p and receive completions of p handled, each
	// mod 2^16 (see recvWR).
	postSeq, doneSeq uint16
	// seqSlot maps the sequence number of every receive posted and not
	// yet handled (mod its length, a power of two no smaller than maxRecv)
	// to its slot, for a steer's look at the frames before the one it
	// reads (nil without a steer).
	seqSlot []uint32

	sendFree     []int32
	credits      int
	owed         int
	ctrlInFlight bool // our CREDIT frame occupies the peer's reserved slot
	ackPending   bool // the peer's CREDIT frame occupied ours; tell it it is free
	sqOut, sqCap int
	queue        []*outItem
	qbuf         []*outItem // the array queue lives in, from its start (enqueue)
	inDirty      bool

	noWrite  bool // a split rendezvous write into the peer failed: do not offer again
	departed bool // the peer closed its endpoint (BYE)
	broken   bool // the link failed
	// linkFail is a failed completion of this link that waits for the end
	// of the poll to be judged (see settleLinksLocked); under pollMu.
	linkFail  error
	lastHeard time.Time
	lastSent  time.Time
	// heard and sent mark a frame received or sent since the liveness
	// goroutine last looked (it then moves lastHeard or lastSent to its
	// tick): a flag instead of time.Now on every frame, which cost a tenth
	// of an 8-byte round trip.
	heard, sent bool
	pings       int // heartbeats sent (for tests)

	stats PeerStats
	// gone mirrors broken || departed for IwriteNow's copy, which does
	// not take ep.mu.
	gone atomic.Bool

	// Scratch for posting without allocating; guarded by ep.mu.
	swr  [1]verbs.SendWR
	sge  [1]verbs.SGE
	rwr  [2 * repostBatch]verbs.RecvWR
	rsge [2 * repostBatch]verbs.SGE

	// Receive buffers consumed but not yet posted again, and how many of
	// them the peer is owed credit for once they are (see repostLocked).
	unposted   [2 * repostBatch]uint32
	nUnposted  int
	unpostOwed int
	due        bool // in ep.duePeers

	// The shared-memory rings for small messages (ring.go), when both
	// ranks have them: ours in the peer's memory, and the peer's in ours.
	rout *ringOut
	rin  *ringIn
}

// readChunk is the largest READ a rendezvous under readWholeMin posts over
// d: the provider's hint (verbs.Traits.ReadChunk, or ReadChunkCrowded
// where the host's ranks outnumber its CPUs), else the device's largest; a
// larger message is read in several, all posted at once.
func readChunk(d *device) int {
	c := maxRead(d)
	hint := d.traits.ReadChunk
	if d.crowded && d.traits.ReadChunkCrowded > 0 {
		hint = d.traits.ReadChunkCrowded
	}
	if hint > 0 {
		c = min(c, hint)
	}
	return c
}

// maxRead is the largest READ d takes (at most 1 GiB).
func maxRead(d *device) int { return int(min(d.caps.MaxMsgSize, 1<<30)) }

// chunkFor is the largest READ for a rendezvous of n bytes.
func (p *peer) chunkFor(n int) int {
	if n >= readWholeMin {
		return maxRead(p.dev)
	}
	return readChunk(p.dev)
}

// readWholeMin: messages under 1 MiB are read in the provider's chunks
// (verbs.Traits.ReadChunk), larger ones whole, since from 1 MiB pieces
// halved the bandwidth of a window of sends over tcp when its waiters read
// a frame only once it was all queued (tcp now streams one READ per
// message and asks for no chunks).
const readWholeMin = 1 << 20

// slotLen is the size of the receive (and staging) buffers of a peer whose
// eager limit is eager: room for the largest header with a payload, a PIPE
// fragment's, before eager bytes. So every fragment of a pipelined message
// can carry the provider's size (peer.frag), and a message of k times that
// (the powers of two that fill the pipelined range) takes k frames, not k
// fragments and a last one of a few bytes, which cost a frame, a credit
// and a wake-up of its own. Both ranks compute it from the eager limit they
// agree on.
func slotLen(eager int) int { return pipeLen + eager }

// repostBatch is how many receive buffers a peer collects before it posts
// them again: each post writes to memory the sender reads (the shm ring),
// so posting one buffer per message put a cross-core write on the critical
// path of every round trip.
const repostBatch = 8

// batch is how many consumed buffers this peer collects before posting
// them again: repostBatch, but at most an eighth of its buffers, so that
// with twice that held back (see repostLocked) the sender never runs out
// of credits waiting for a batch.
func (p *peer) batch() int { return max(1, min(repostBatch, p.nrecv/8)) }

func (ep *Endpoint) newPeer(d *device, rank int) (*peer, error) {
	n := ep.opts.EagerSlots
	most := ep.eagerSlotsMax(d.traits)
	eager, frag := ep.opts.EagerLimit, ep.opts.EagerLimit
	if eager <= 0 {
		frag = ep.eagerFor(d)
		eager = frag + eagerHeadroom
	}
	pipe := ep.opts.PipelineLimit
	if pipe == 0 {
		pipe = pipelineFor(d)
	}
	if pipe <= eager || n < 2 {
		pipe = 0
	}
	pipe = min(pipe, maxPipe)
	p := &peer{rank: rank, dev: d, eager: eager, frag: frag, pipe: pipe, slot: slotLen(eager), nrecv: n, maxRecv: most,
		credits: n - 1, sqCap: sqDepth(most), grows: most > n}
	if ep.opts.SingleCopyMin > 0 && p.singleCopyApplies() {
		p.single = ep.opts.SingleCopyMin
	}
	if d.traits.InlineSends && d.caps.MaxInline >= inlineMax {
		// An eager frame (or pipelined fragment) the device takes inline
		// skips the staging slot and, unsignaled, the send completion and
		// its handling: on a provider whose inline SEND is copied like any
		// other, that is the same copies for less work, so frames go
		// inline up to the device's limit.
		p.inline = min(d.caps.MaxInline, p.slot)
		p.iframe = make([]byte, p.inline)
	}
	p.stats.Rank = rank
	p.stats.Transport = d.provider
	var err error
	p.qp, err = d.pd.CreateQP(verbs.QPInitAttr{SendCQ: d.cq, RecvCQ: d.cq,
		Cap: verbs.QPCap{MaxSendWR: p.sqCap, MaxRecvWR: most + 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: p.inline}})
	if err != nil {
		return nil, err
	}
	p.stats.QPNum = p.qp.Num()
	if pp, ok := p.qp.(verbs.InlinePairPoster); ok && p.inline > 0 {
		p.pair = pp
	}
	if lp, ok := p.qp.(verbs.LentPairPoster); ok && p.inline >= maxCtlLen {
		p.lent = lp
	}
	p.batcher, _ = p.qp.(verbs.PostBatcher)
	if rw, ok := p.qp.(verbs.RunWriter); ok && p.batcher != nil {
		// Where writes go inline at all (not loop's QPs, whose writes
		// keep their requests).
		if w, b := rw.RunLimits(); w > 1 && b >= runWriteMax && p.inline > 0 {
			p.runs, p.runWrites, p.runBytes = rw, w, b
		}
	}
	// The steer places pipelined fragments, and the messages sent steered
	// whole (steersWhole) where the eager limit passes steerWholeMin.
	if ss, ok := p.qp.(verbs.SendSteerer); ok && (pipe > 0 || eager > steerWholeMin) && most <= 1<<16 {
		p.steer = &pipeSteer{ep: ep, p: p}
		p.seqSlot = make([]uint32, 1<<bits.Len(uint(most-1)))
		ss.SteerSends(pipeLen, p.steer)
	}
	co := ep.connectOptions(d)
	if err := p.qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: co.Access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		p.close()
		return nil, err
	}
	if p.recvMR, err = d.pd.AllocMR(most*p.slot, verbs.AccessLocalWrite); err != nil {
		p.close()
		return nil, err
	}
	nsend := most + 4
	if p.sendMR, err = d.pd.AllocMR(nsend*p.slot, verbs.AccessLocalWrite); err != nil {
		p.close()
		return nil, err
	}
	for i := nsend - 1; i >= 0; i-- {
		p.sendFree = append(p.sendFree, int32(i))
	}
	for i := 0; i < n; i++ {
		p.unposted[p.nUnposted] = uint32(i)
		if p.nUnposted++; p.nUnposted == repostBatch || i == n-1 {
			if err := p.repost(); err != nil {
				p.close()
				return nil, err
			}
		}
	}
	p.lastHeard, p.lastSent = time.Now(), time.Now()
	return p, nil
}

func (p *peer) close() {
	if p.qp != nil {
		_ = p.qp.Close()
	}
	if p.recvMR != nil {
		_ = p.recvMR.Close()
	}
	if p.sendMR != nil {
		_ = p.sendMR.Close()
	}
}

// repost posts the buffers in p.unposted again, in one PostRecv.
func (p *peer) repost() error {
	n := p.nUnposted
	for i, slot := range p.unposted[:n] {
		p.warm(slot)
		p.recvWR(i, slot)
	}
	p.nUnposted = 0
	return p.qp.PostRecv(p.rwr[:n]...)
}

// recvWR prepares p.rwr[i] to receive into buffer slot. With a steer its
// id carries the number of receives posted to p before it (mod 2^16), and
// seqSlot the slot under that number, so that the steer (pipeSteer) can
// tell which frames before the one it reads are not handled yet: receives
// are taken in the order they were posted.
func (p *peer) recvWR(i int, slot uint32) {
	p.rsge[i] = verbs.SGEOf(p.recvMR, int(slot)*p.slot, p.slot)
	idx := slot
	if p.seqSlot != nil {
		idx |= uint32(p.postSeq) << 16
		p.seqSlot[int(p.postSeq)&(len(p.seqSlot)-1)] = slot
	}
	p.rwr[i] = verbs.RecvWR{ID: wrID(wrRecv, p.rank, idx), SGL: p.rsge[i : i+1]}
	p.postSeq++
}

// recvSlot is the receive slot of a receive's WR index (recvWR): only a
// peer with a steer has fewer than 2^16 slots and numbers its receives.
func (p *peer) recvSlot(idx uint32) uint32 {
	if p.seqSlot != nil {
		return idx & 0xffff
	}
	return idx
}

// seqOf is the sequence number of a receive's WR index (recvWR).
func seqOf(idx uint32) uint16 { return uint16(idx >> 16) }

// warm writes a byte to every page of buffer slot's first p.hot bytes
// before the buffer is posted again, while nothing else may write it.
// Frames take the buffers in the order they were posted, so a buffer that
// has taken only small frames for a while may get a large one next, and on
// a VM a page left untouched that long costs about 10 µs at its next write
// (address translation), where a warm one costs a store.
func (p *peer) warm(slot uint32) {
	if p.hot == 0 {
		return
	}
	b := p.recvBuf(slot, uint32(p.hot))
	for i := 0; i < len(b); i += warmStride {
		b[i] = 0
	}
}

// warmStride is the page size warm assumes: a smaller page than the
// system's only costs more stores.
const warmStride = 4096

func (p *peer) recvBuf(slot uint32, n uint32) []byte {
	off := int(slot) * p.slot
	return p.recvMR.Bytes()[off : off+int(n)]
}

// canPost reports whether it can be posted now.
func (p *peer) canPost(it *outItem) bool {
	switch {
	case it.read:
		return p.sqOut+it.req.readChunks <= p.sqCap
	case it.write:
		// A notifying write leaves the last credit to the acknowledgement
		// of our peer's CREDIT frame while that is pending (see ackFirst).
		return p.sqOut < p.sqCap && (!it.req.notify32 || p.credits > 1 || p.credits > 0 && !p.ackPending)
	}
	return p.frameRoom(!it.uncredited)
}

// frameRoom reports whether a frame can be posted now: a staging slot, a
// send-queue entry, and a credit if it costs one.
func (p *peer) frameRoom(credited bool) bool {
	return len(p.sendFree) > 0 && p.sqOut < p.sqCap && (!credited || p.credits > 0)
}

// postFrame sends h (and payload) from a staging slot. The caller checked canPost.
func (p *peer) postFrame(ep *Endpoint, h *header, head, payload []byte, credited bool) error {
	if p.owed > 0 && h.kind != kRevoke && h.kind != kBye {
		c := min(p.owed, 0xffff)
		h.credits = uint16(c)
		p.owed -= c
	}
	if p.ackPending {
		h.flags |= flagAckCtrl
		p.ackPending = false
	}
	if p.starved {
		h.flags |= flagStarved
		p.starved = false
	}
	// A PING is marked too: it may announce a ring message to a peer
	// asleep in its CQ, and whoever polls it there, maybe not that
	// sleeper and maybe after a look at the rings that came before the
	// message, must handle the message rather than swallow the wake-up.
	if p.rout != nil && (h.kind == kEager || h.kind == kRTS || h.kind == kPipe || h.kind == kBye || h.kind == kPing) {
		h.flags |= flagMarked
		p.rout.settle()
		h.aux = p.rout.sent
	}
	slot := int32(-1) // the staging slot, if the frame does not go inline
	var tail []byte   // the payload, when it goes as an inline pair's tail
	var err error
	lent := false // posted as a lent pair
	if p.lent != nil && (h.kind == kEager || h.kind == kPipe) && len(payload) >= lentMin && h.frameLen()+len(head) <= p.inline {
		// The header inline, the payload from the caller's buffer: over
		// tcp its one copy on this side is then the kernel's. Where the
		// QP cannot write it at once, the frame takes a staging slot.
		p.inlineWR(h, head, nil, h.frameLen()+len(head))
		ep.holdPosts(p)
		if lent, err = p.lent.PostSendLentPair(p.swr[0], payload); lent {
			p.stats.LentSent.add(len(payload))
		}
	}
	switch n := h.frameLen() + len(head) + len(payload); {
	case lent || err != nil:
		// Posted as a lent pair, or failed as any post would.
	case n <= p.inline && (h.kind == kEager || h.kind == kPipe || len(payload) == 0):
		if p.pair != nil && len(payload) >= pairMin {
			// Only the header into iframe: the provider copies the
			// payload from the caller's buffer into the peer's receive,
			// one copy fewer on the way.
			tail = payload
			p.inlineWR(h, head, nil, h.frameLen()+len(head))
		} else {
			p.inlineWR(h, head, payload, n)
		}
	default:
		slot = p.sendFree[len(p.sendFree)-1]
		p.sendFree = p.sendFree[:len(p.sendFree)-1]
		off := int(slot) * p.slot
		b := p.sendMR.Bytes()[off : off+p.slot]
		n := h.frameLen()
		h.put(b)
		if h.kind == kEager || h.kind == kPipe {
			n += copy(b[n:], head)
			n += ntcopy.Plain(b[n:], payload)
		}
		p.sge[0] = verbs.SGEOf(p.sendMR, off, n)
		p.swr[0] = verbs.SendWR{ID: wrID(wrSend, p.rank, uint32(slot)), Opcode: verbs.OpSend,
			Flags: verbs.SendSignaled, SGL: p.sge[:]}
	}
	if !lent && err == nil {
		ep.holdPosts(p)
		if tail != nil {
			err = p.pair.PostSendInlinePair(p.swr[0], tail)
		} else {
			err = p.qp.PostSend(p.swr[:]...)
		}
	}
	if err != nil {
		if slot >= 0 {
			p.sendFree = append(p.sendFree, slot)
		}
		p.owed += int(h.credits)
		return err
	}
	if slot < 0 {
		p.postedInline()
	}
	if credited {
		p.credits--
	}
	p.sqOut++
	p.sent = true
	return nil
}

// sendsParts reports whether an IsendParts message to p of a head of head
// bytes and n bytes in all goes from its two buffers: an eager one, which
// takes neither the pipeline nor the rendezvous isendParts switches to for
// traffic both ways over shared memory (bothWaysMin), with a head that
// fits a ring line's room before the payload (ringWrite).
func (p *peer) sendsParts(head, n int) bool {
	return head <= ringFirst && n <= p.eager && (n < bothWaysMin || !p.dev.traits.SharesMemory)
}

// pipedMax is the largest message sent to p without the rendezvous: its
// eager limit, or its pipeline limit where that is larger (isendParts; and
// Endpoint.FoldLimit, up to which a fold receive folds as it arrives).
func (p *peer) pipedMax() int { return max(p.eager, p.pipe) }

// inlineWR prepares p.swr[0] to send the frame (h, head, payload; n
// bytes) inline: its bytes in the work request, signaled only every
// inlineSignal-th time or when the send queue is about to fill.
func (p *peer) inlineWR(h *header, head, payload []byte, n int) {
	b := p.iframe[:n]
	h.put(b)
	k := h.frameLen() + copy(b[h.frameLen():], head)
	copy(b[k:], payload)
	p.swr[0] = verbs.SendWR{Opcode: verbs.OpSend, Flags: verbs.SendInline, Inline: b}
	p.signalInline(p.sqOut+1 >= p.sqCap || h.kind == kBye)
}

// signalInline gives p.swr[0], an inline request, its id, and signals it
// when force is set or every inlineSignal-th time: the id of a signaled
// one carries the count of entries its completion frees (itself and the
// unsignaled ones before it).
func (p *peer) signalInline(force bool) {
	if force || p.unsig+1 >= inlineSignal {
		p.swr[0].Flags |= verbs.SendSignaled
		p.swr[0].ID = wrID(wrSend, p.rank, inlineMark|uint32(p.unsig+1))
	} else {
		p.swr[0].ID = wrID(wrSend, p.rank, inlineMark)
	}
}

// postedInline counts the inline request p.swr[0] once it is posted.
func (p *peer) postedInline() {
	if p.swr[0].Flags&verbs.SendSignaled != 0 {
		p.unsig = 0
	} else {
		p.unsig++
	}
}

// post posts it (the caller checked canPost) and completes what completes on posting.
func (p *peer) post(ep *Endpoint, it *outItem) error {
	var err error
	switch {
	case it.read:
		err = ep.postReadLocked(p, it.req)
	case it.write:
		if it.req.notify32 {
			if err = p.ackFirst(ep); err != nil {
				return err
			}
		}
		err = ep.postWriteLocked(p, it.req)
	default:
		var head []byte
		if it.req != nil && (it.h.kind != kPipe || it.h.addr == 0) {
			head = it.req.head // a send's: see isendParts; a PIPE message's first fragment's
		}
		err = p.postFrame(ep, &it.h, head, it.payload, !it.uncredited)
	}
	if err != nil {
		return err
	}
	if it.complete && it.req != nil {
		ep.completeLocked(it.req, nil)
	}
	return nil
}

// ackFirst acknowledges our peer's CREDIT frame in a PING before a
// notifying write. Such writes consume the peer's buffers and credits but
// carry no header, so no flagAckCtrl; if they alone took the credits the
// CREDIT gave, the peer could never send the next one (its reserved slot
// is still taken) and both sides would starve. canPost keeps one credit
// back for this PING; when no staging slot is free now, flush sends it
// once the write behind it has to wait for that credit.
func (p *peer) ackFirst(ep *Endpoint) error {
	if !p.ackPending || p.credits < 2 || !p.frameRoom(true) || p.sqOut+2 > p.sqCap {
		return nil
	}
	h := header{kind: kPing}
	return p.postFrame(ep, &h, nil, nil, true)
}

// send posts it now when nothing is queued before it, else queues it.
func (p *peer) send(ep *Endpoint, it *outItem) error {
	if len(p.queue) == 0 && p.canPost(it) {
		if err := p.post(ep, it); err != nil {
			ep.linkErrorLocked(p, fmt.Errorf("posting %v: %w", it.h.kind, err))
			return ep.failErr
		}
		return nil
	}
	if it.req != nil {
		it.req.queued = true
	}
	p.noteWait()
	p.enqueue(it)
	ep.markDirty(p)
	return nil
}

// noteWait records that a frame queues for want of credits, for the
// next frame to tell the receiver (flagStarved).
func (p *peer) noteWait() {
	if p.credits == 0 && p.grows {
		p.starved = true
	}
}

// sendCtl sends a control frame (FIN, CANCEL, PING), queuing a copy if it cannot go now.
func (p *peer) sendCtl(ep *Endpoint, h header) {
	if len(p.queue) == 0 && p.frameRoom(true) {
		if err := p.postFrame(ep, &h, nil, nil, true); err != nil {
			ep.linkErrorLocked(p, fmt.Errorf("posting %v: %w", h.kind, err))
		}
		return
	}
	p.noteWait()
	p.enqueue(&outItem{h: h})
	ep.markDirty(p)
}

// sendUncredited sends BYE or REVOKE, which need no credit.
func (p *peer) sendUncredited(ep *Endpoint, h *header) {
	it := &outItem{h: *h, uncredited: true}
	if len(p.queue) == 0 && p.canPost(it) {
		if err := p.postFrame(ep, &it.h, nil, nil, false); err != nil {
			p.broken = true
			p.gone.Store(true)
		}
		return
	}
	p.enqueue(it)
	ep.markDirty(p)
}

// flush posts queued items in order while they can go, then returns
// credits explicitly if a lot are owed.
func (p *peer) flush(ep *Endpoint) {
	if p.ackPending && len(p.queue) > 0 && p.queue[0].write && p.queue[0].req.notify32 && p.frameRoom(true) && !p.broken {
		// A queued notifying write waits for the credit canPost keeps
		// back for the acknowledgement of our peer's CREDIT (see
		// ackFirst): send it in a PING now, with that last credit.
		h := header{kind: kPing}
		if err := p.postFrame(ep, &h, nil, nil, true); err != nil {
			ep.linkErrorLocked(p, fmt.Errorf("posting %v: %w", h.kind, err))
			return
		}
	}
	for len(p.queue) > 0 && !p.broken {
		it := p.queue[0]
		if !p.canPost(it) {
			p.noteWait()
			break
		}
		p.popQueue()
		if it.req != nil {
			it.req.queued = false
		}
		if err := p.post(ep, it); err != nil {
			ep.linkErrorLocked(p, fmt.Errorf("posting %v: %w", it.h.kind, err))
			return
		}
	}
	if p.owed >= max(1, p.nrecv/2) && !p.ctrlInFlight && p.frameRoom(false) && !p.broken {
		h := header{kind: kCredit}
		if err := p.postFrame(ep, &h, nil, nil, false); err != nil {
			ep.linkErrorLocked(p, fmt.Errorf("posting CREDIT: %w", err))
			return
		}
		p.ctrlInFlight = true
	}
}

// queueKeep is the most queue entries a peer keeps room for once its
// queue empties; a longer burst's array goes back to the garbage collector.
const queueKeep = 1024

// enqueue appends it to p's send queue. The queue is consumed from its
// front (popQueue) and starts again at the front of its array (qbuf) when
// it empties, so a peer whose sends queue in every window (a burst beyond
// its credits) reuses one array: restarting with a fresh one cost a few
// allocations per window of 64 queue-pair messages. A queue that reaches
// the end of its array slides back to the front when that leaves it half
// free, else append moves it to a larger one.
func (p *peer) enqueue(it *outItem) {
	if n := len(p.queue); n == cap(p.queue) && n > 0 && n <= cap(p.qbuf)/2 {
		copy(p.qbuf[:n], p.queue)
		clear(p.qbuf[n:cap(p.qbuf)])
		p.queue = p.qbuf[:n]
	}
	moved := len(p.queue) == cap(p.queue)
	p.queue = append(p.queue, it)
	if moved {
		p.qbuf = p.queue[:0]
	}
}

// popQueue drops the queue's first item (the caller has it).
func (p *peer) popQueue() {
	p.queue[0] = nil
	p.queue = p.queue[1:]
	if len(p.queue) == 0 {
		if cap(p.qbuf) > queueKeep {
			p.qbuf = nil
		}
		p.queue = p.qbuf[:0]
	}
}

func (ep *Endpoint) markDirty(p *peer) {
	if !p.inDirty {
		p.inDirty = true
		ep.dirty = append(ep.dirty, p)
	}
}

func (ep *Endpoint) flushDirtyLocked() {
	if len(ep.dirty) != 0 { // inlined: nearly every poll finds none
		ep.flushDirtySlowLocked()
	}
}

// flushDirtySlowLocked is flushDirtyLocked's work, once peers are dirty.
func (ep *Endpoint) flushDirtySlowLocked() {
	// The frames that waited for credits leave together: one write per
	// peer over tcp rather than one each.
	outer := ep.beginBatchLocked()
	defer ep.endBatchLocked(outer)
	for i := 0; i < len(ep.dirty); i++ {
		p := ep.dirty[i]
		p.inDirty = false
		p.flush(ep)
	}
	clear(ep.dirty)
	ep.dirty = ep.dirty[:0]
}

// unqueue removes r's item from p's queue; it reports whether it was there.
// A pipelined send is removed only while its first fragment is queued,
// and then with all its fragments: once one has gone, the receiver has
// matched the message.
func (p *peer) unqueue(r *Request) bool {
	for i, it := range p.queue {
		if it.req != r {
			continue
		}
		if r.pipeFirst == nil {
			p.queue = removeAt(p.queue, i)
			r.queued = false
			return true
		}
		if it != r.pipeFirst {
			return false
		}
		p.queue = slices.DeleteFunc(p.queue, func(it *outItem) bool { return it.req == r })
		r.queued = false
		return true
	}
	return false
}

// linkErrorLocked handles a broken link to p: a lost peer unless it had
// said goodbye or we are closing.
func (ep *Endpoint) linkErrorLocked(p *peer, cause error) {
	if p.broken {
		return
	}
	p.broken = true
	p.gone.Store(true)
	lost := &PeerLostError{Rank: p.rank, Reporter: ep.rank, Cause: cause}
	ep.dropSplitsLocked(p, lost)
	ep.dropPipesLocked(p, lost)
	if p.departed || ep.closing {
		return
	}
	ep.loseLocked(p.rank, cause)
}

// dropSplitsLocked fails the split rendezvous receives still waiting for
// p's WDONE: p can no longer write (its link broke, or it closed its
// endpoint), so nothing will touch their buffers.
func (ep *Endpoint) dropSplitsLocked(p *peer, cause error) {
	for k, r := range ep.splits {
		if k.peer != p.rank {
			continue
		}
		delete(ep.splits, k)
		r.split, r.splitErr = false, cause
		if r.readDone { // else the READ's completion ends it
			ep.completeLocked(r, ep.opErr(r, cause))
		}
	}
}
