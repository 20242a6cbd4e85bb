package p2p

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/internal/racesync"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// Rings: small messages over shm without a work request.
//
// Over shm every message through the queue pair pays the verbs layer on
// both sides: the QP's and CQ's locks, the claim of a posted receive, the
// staging or inline work request, the copy out of the receive buffer and
// its repost, and credits. For small messages that software is most of the
// time (p2p's BenchmarkOverhead). So each endpoint on shm also exposes a
// window with one ring per sender, and a sender writes a small message
// straight into its ring in the receiver's memory: a 16-byte header and
// 48 bytes of payload in the first cache line, the rest of the payload in
// up to ringLines-1 further whole lines (4144 bytes in all, and at most
// half the ring). The first line's stamp (position+1) is stored last and
// publishes the message (the lines before it are visible once it is); the
// receiver polls the stamp
// of the next line it expects. Stamps from the previous lap differ by the
// ring's size, so a stale line never looks published (the receiver writes
// a consumed message's further lines their own stamps back, see ringTo,
// so that payload never reads as one). The further lines
// carry payload only, contiguous but for the wrap at the ring's end, so
// that each side moves them with one copy: with a stamp and 60 bytes per
// line, copied line by line, every further line cost a 2-process
// ping-pong about 20 ns more (256 B: 5 lines, 0.08 µs more than 2).
//
// Order. A message that does not fit the ring (too large, or the ring is
// full) goes through the queue pair as before, and MPI's rule that two
// messages between a pair with the same tag never overtake each other
// must hold across the two paths. Each path is FIFO, so a matchable frame
// on the queue pair (EAGER, RTS, PIPE, and BYE, after which nothing
// comes) carries a mark: the number of ring messages its sender had
// published before it (flagMarked, in the header's aux word). The
// receiver handles ring messages up to that mark before the frame. The
// other way round, a ring message may be handled only after every frame
// sent before it; those were published before it, so they are in the CQ
// when it is seen: the poll reads where the rings stand before it polls
// the CQ, and handles ring messages up to there only once the CQ is empty.
//
// Sending: a sender claims a message's lines under ep.mu (ringClaim) and
// writes them after it has let go of the lock (ringWrite), so that no
// locked instruction follows the stamp's store at once: on x86 every one
// of them waits until that store's line has come over from the receiver's
// core. Between processes that can (shmsync.Asymmetric, on both ends) the
// stamp is a plain store too (light publishing). In a burst of sends the
// writer also starts taking the next message's lines (ringWrite).
// Messages of several goroutines may be in writing at once; a frame that
// takes the ring's position as its mark, a claim that would reuse a slot
// of the written record, and the ring's teardown wait for them (settle).
//
// Flow control: the receiver stores how far it has read (the tail) in a
// line before the ring every ringSize/4 lines and once it has handled what
// it saw; a sender that finds the ring full by its last look at the tail
// reads it again, and sends through the queue pair if it is still full.
// Nothing waits for room.
//
// Wake-ups: a receiver that blocks in its CQ would not notice a ring
// message. Before it blocks it counts itself in a sleepers word at the
// start of its window and looks at the rings again; a sender that finds
// the word non-zero after publishing also sends a PING through the queue
// pair, which rings the CQ. Both sides write, then read, with sequentially
// consistent atomics, so at least one of them sees the other: the protocol
// of internal/shmsync, with the PING in the futex wake-up's place. The
// PING is marked like the matchable frames: another goroutine may poll
// it (the background one, woken by an earlier completion), after a look
// at the rings from before the message, and must then handle the message
// itself, or the sleeper, its wake-up gone from the CQ, sleeps on. A
// goroutine that blocked before the rings existed is counted in the word
// when it is installed (setSleepers).

const (
	ringLine  = 64
	ringHdr   = 16 // stamp, context, tag, size
	ringFirst = ringLine - ringHdr
	// ringLines is the most lines one message takes. 65 (4144 bytes):
	// on the Intel VM a 4 KiB ping-pong over the ring took 0.93-0.96 us a
	// way against 1.36 through the queue pair, and a window of them ran
	// at 1.45-1.75x the rate (half of it through the queue pair once the
	// ring is full); 129 lines put 8 KiB at 1.73 us against the
	// rendezvous's 1.31-1.42. Before, 33 lines (2096 bytes), chosen on an
	// AMD VM.
	ringLines    = 65
	ringMaxBytes = ringFirst + (ringLines-1)*ringLine // 4144
	ringMinLines = 64                                 // the smallest ring (messages there take at most half: ringMaxFor)
	// The window: a line with the sleepers word and the flags word and a
	// line nobody uses (see ringTailArea), then per sender ringTailArea
	// with its tail word and its ring of entries lines.
	ringWinHdr   = 2 * ringLine
	ringFlagsOff = 4
	// ringFlagFences: the window's owner fences heavily before it sleeps
	// (shmsync.FenceHeavy), so that its Asymmetric senders publish lightly.
	ringFlagFences = 1

	// The default ring (RingLines zero) is the deepest of maxRingLines
	// that keeps a rank's ring window within ringWinBudget, and at least
	// minDefaultRingLines.
	maxRingLines        = 2048
	minDefaultRingLines = 256
	ringWinBudget       = 1 << 20

	// defaultRingAhead is Options.RingAhead's default, maxRingAhead its
	// largest value (a quarter of the smallest ring).
	defaultRingAhead = 3
	maxRingAhead     = ringMinLines / 4
)

// defaultRingLines is the ring depth of an endpoint of ranks ranks. An OSU
// window (64 messages in flight, as the bw and bibw loops and the
// collectives' bursts of Isends post them) of 1 KiB messages takes 1088
// lines, of the largest 2112: with 256 lines and 9-line messages, both
// ranks of a bibw window filled each other's ring with the first 28 of 528
// bytes (51 of 256) while neither was reading, and the rest paid the queue
// pair's path, several times the ring's software (BenchmarkWindowOverhead).
// 2048 lines hold a window of messages up to 2000 bytes (4096 cost 256 B-1
// KiB message rate 0.8-0.9, the ring's lines spanning more cache); the
// depth shrinks with the rank count so that the window, one ring per rank,
// stays near 1 MiB, and untouched lines of the sparse heap cost no memory.
func defaultRingLines(ranks int) int {
	n := maxRingLines
	for n > minDefaultRingLines && ranks*n*ringLine > ringWinBudget {
		n /= 2
	}
	return n
}

// ringMaxFor is the largest message a ring of n lines takes: ringMaxBytes,
// or what half of the ring holds, whichever is smaller.
func ringMaxFor(n uint32) int {
	return min(ringMaxBytes, ringFirst+(int(n)/2-1)*ringLine)
}

// ringTailArea is what precedes each ring's lines in the window: the line
// of its tail word and a line nobody uses. With the tail's line beside
// the sleepers word's, which the sender loads after every message,
// storing the tail after every drain cost a ping-pong at 64 B-1 KiB
// 1.10-1.29x the time, and nothing with this pad: CPUs fetch aligned
// pairs of lines together (the adjacent-line prefetch), so the sender's
// loads likely took the tail's line too, and each store waited for it.
const ringTailArea = 2 * ringLine

// ringBlock is the bytes of one sender's ring of n lines in the window.
func ringBlock(n int) int { return ringTailArea + n*ringLine }

// ringLinesFor is how many lines a message of n bytes takes.
func ringLinesFor(n int) uint32 {
	if n <= ringFirst {
		return 1
	}
	return 1 + uint32((n-ringFirst+ringLine-1)/ringLine)
}

// ringMem is a ring's lines, as either end maps them.
type ringMem struct {
	mem []byte
	n   uint32 // lines (a power of two)
}

// line is line i of the ring, i counted from its start (so modulo n).
func (m *ringMem) line(i uint32) []byte {
	off := int(i&(m.n-1)) * ringLine
	return m.mem[off : off+ringLine : off+ringLine]
}

// put copies src into the lines from line i on, wrapping at the ring's end.
func (m *ringMem) put(i uint32, src []byte) {
	if n := ringCopy(m.mem[int(i&(m.n-1))*ringLine:], src); n < len(src) {
		ringCopy(m.mem, src[n:])
	}
}

// prefetch starts the transfer of the n bytes from line i on (see
// scanEnd).
func (m *ringMem) prefetch(i uint32, n int) {
	off := int(i&(m.n-1)) * ringLine
	b := m.mem[off:min(off+n, len(m.mem))]
	ntcopy.Prefetch(b)
	if len(b) < n {
		ntcopy.Prefetch(m.mem[:n-len(b)])
	}
}

// get fills dst from the lines from line i on, wrapping at the ring's end.
func (m *ringMem) get(dst []byte, i uint32) {
	if n := ringCopy(dst, m.mem[int(i&(m.n-1))*ringLine:]); n < len(dst) {
		ringCopy(dst[n:], m.mem)
	}
}

// ringCopy is ntcopy.Plain (from ntcopy.WideMin, 64-byte moves where the
// CPU has them), with the copies of small messages, most of them, made
// here rather than behind a call.
func ringCopy(dst, src []byte) int {
	if min(len(dst), len(src)) < ntcopy.WideMin {
		return copy(dst, src)
	}
	return ntcopy.Plain(dst, src)
}

// ringOut is this rank's ring in a peer's window. Guarded by ep.mu, but
// for the lines of the message claimed last, which its sender writes after
// it has let go of ep.mu (ringClaim, ringWrite).
type ringOut struct {
	ringMem
	tailW    *uint32 // lines the peer has read, as it last published
	sleepers *uint32 // the peer's sleepers word
	max      int     // largest message
	sent     uint32  // lines claimed
	tail     uint32  // *tailW at our last look
	light    bool    // publish with shmsync.PublishLight (both ends Asymmetric)
	ahead    uint32  // Options.RingAhead, resolved
	claims   uint32  // messages claimed
	settled  uint32  // claims known written (settle)
	// seen is how far this rank had read the peer's ring into it at the
	// last claim, and run how many claims in a row found it unchanged.
	seen, run uint32
	// written[c%ringClaimSlots] is c once the writer of claim c is done
	// with the ring's memory: stored by the writer without ep.mu (release
	// order), loaded atomically under it. A line each: a claim looks at
	// the slot written ringClaimSlots claims ago, never at one whose store
	// may still wait in the CPU behind the last stamp's (such a load cost
	// as much as the fence the light store saves).
	written [ringClaimSlots]struct {
		c uint32
		_ [ringLine - 4]byte
	}
}

// ringClaimSlots is how many claims of one ring may be in writing at once.
const ringClaimSlots = 16

// newRingOut is a ring with no claims yet: every slot holds the claim
// ringClaimSlots before the first one to use it (claims count from 1, so
// slot i first takes claim i, slot 0 claim ringClaimSlots).
func newRingOut(o ringOut) *ringOut {
	for i := 1; i < ringClaimSlots; i++ {
		o.written[i].c = uint32(i) - ringClaimSlots
	}
	return &o
}

// ringSlot is a message's place in a ring: claimed under ep.mu, written
// after it.
type ringSlot struct {
	o      *ringOut
	pos, k uint32 // first line, lines
	claim  uint32 // o.claims after this claim
	// ahead is how many messages of this one's length ahead its writer
	// prefetches the lines (0: none, not a burst; see ringWrite).
	ahead uint32
}

// ringIn is a peer's ring in this rank's window. Guarded by ep.pollMu and
// ep.mu (read under either, changed under both).
type ringIn struct {
	ringMem
	tailW *uint32
	head  uint32 // lines read
	pub   uint32 // head as last stored in *tailW
	end   uint32 // where the ring stood when the last poll began
}

// readRing is p's ring into this rank while it may be read: not once the
// link has broken. The caller holds pollMu.
func (p *peer) readRing() *ringIn {
	if p == nil || p.broken {
		return nil
	}
	return p.rin
}

func ringWord(b []byte) *uint32 { return (*uint32)(unsafe.Pointer(unsafe.SliceData(b))) }

// setupRings makes the ring window (a collective) when the endpoint has
// one device and it is shm. A rank whose window a peer cannot map simply
// gets no ring to it; its own rings are set before its window's key goes
// out, so no peer can write before this rank reads.
func (ep *Endpoint) setupRings(ctx context.Context) error {
	n := ep.opts.RingLines
	if n < 0 || ep.size < 2 || len(ep.devs) != 1 || !ep.devs[0].traits.SharesMemory {
		return nil
	}
	if n == 0 {
		n = defaultRingLines(ep.size)
	}
	blk := ringBlock(n)
	ahead := uint32(defaultRingAhead)
	if a := ep.opts.RingAhead; a != 0 {
		ahead = uint32(max(a, 1)) // negative: the next message only
	}
	size := ringWinHdr + ep.size*blk
	w, err := ep.newWindowWith(ctx, make([]byte, size), true, func(w *Window) {
		if mr := w.mrs[ep.devs[0]]; mr == nil || mr.Kind() != verbs.MemProvider {
			return // no provider memory (the heap is full): no rings
		}
		ep.pollMu.Lock()
		ep.mu.Lock()
		if shmsync.Asymmetric() {
			// Senders may publish lightly: this rank fences before it
			// sleeps (blockIn).
			ep.ringFence = true
			binary.LittleEndian.PutUint32(w.buf[ringFlagsOff:], ringFlagFences)
		}
		ep.setSleepers(ringWord(w.buf))
		for r, p := range ep.peers {
			if p != nil {
				b := w.buf[ringWinHdr+r*blk : ringWinHdr+(r+1)*blk]
				p.rin = &ringIn{ringMem: ringMem{mem: b[ringTailArea:], n: uint32(n)}, tailW: ringWord(b)}
			}
		}
		ep.mu.Unlock()
		ep.pollMu.Unlock()
	})
	if err != nil {
		return err
	}
	if ep.sleepers == nil { // no rings after all
		return nil
	}
	for r, p := range ep.peers {
		if p == nil {
			continue
		}
		m := w.Direct(r)
		if len(m) != size {
			continue // not mappable, or laid out for another RingLines
		}
		b := m[ringWinHdr+ep.rank*blk : ringWinHdr+(ep.rank+1)*blk]
		light := shmsync.Asymmetric() && binary.LittleEndian.Uint32(m[ringFlagsOff:])&ringFlagFences != 0
		ep.mu.Lock()
		p.rout = newRingOut(ringOut{ringMem: ringMem{mem: b[ringTailArea:], n: uint32(n)}, tailW: ringWord(b), sleepers: ringWord(m), max: min(ringMaxFor(uint32(n)), p.eager), light: light, ahead: ahead})
		ep.mu.Unlock()
	}
	return nil
}

// ringClaim claims room in p's ring for a message of n bytes on context
// ctxID into s, which the caller writes with ringWrite once it has let go
// of ep.mu (it holds it now, and has checked that nothing is queued to p:
// order), and counts it in p's stats; false, s untouched, when the message
// does not fit.
//
// The write happens outside the lock so that no locked instruction follows
// the store that publishes it: on x86 any of them (the next lock's
// acquisition, the request's done flag) waits until the line comes over
// from the receiver's core, which polls it, and in a window of Isends the
// sender paid that transfer once per message, in turn. After a light store
// (ringOut.light) the transfer overlaps the caller's next steps.
func (ep *Endpoint) ringClaim(p *peer, ctxID uint32, n int, s *ringSlot) bool {
	o := p.rout
	if o == nil || n > o.max {
		return false
	}
	k := ringLinesFor(n)
	if o.sent+k-o.tail > o.n {
		o.tail = atomic.LoadUint32(o.tailW)
		if o.sent+k-o.tail > o.n {
			return false
		}
	}
	c := o.claims + 1
	if atomic.LoadUint32(&o.written[c%ringClaimSlots].c) != c-ringClaimSlots {
		o.settle() // ringClaimSlots writers at once: wait for them
	}
	// A window of sends, not a ping-pong nor a message sent in two parts
	// (a collective's header and payload): see ringWrite.
	var read uint32
	if p.rin != nil {
		read = p.rin.head
	}
	if read != o.seen || c == 1 {
		o.seen, o.run = read, 0
	} else if o.run < 2 {
		o.run++
	}
	var ahead uint32
	if o.run == 2 {
		ahead = ringAheadFor(o.ahead, k)
	}
	pos := o.sent
	o.sent = pos + k
	o.claims = c
	p.sent = true
	p.stats.eagerSent(ctxID, n, true)
	// Into the caller's slot field by field: a ringSlot returned by value
	// was stored in words and copied in 16-byte loads, which wait for such
	// stores to retire (a failed store-to-load forwarding).
	s.o, s.pos, s.k, s.claim, s.ahead = o, pos, k, c, ahead
	return true
}

// ringAheadFor is how many messages of k lines ahead the writer of one in
// a burst prefetches, by Options.RingAhead ahead: ahead messages of one or
// two lines, fewer of longer ones, never less than the next. At 128 B (3
// lines) two ahead ran 1.2x the rate of one; from 256 B (5 lines) one was
// as fast as two or three (osu-compare bw, 7 rounds).
func ringAheadFor(ahead, k uint32) uint32 { return max(1, min(ahead, 2*ahead/k)) }

// ringWatch is how many more times a scan loads an empty ring's head
// stamp before it moves on (scanEnd).
const ringWatch = 4

// watchStamp loads *w up to ringWatch times and reports whether it became
// stamp.
func watchStamp(w *uint32, stamp uint32) bool {
	for range ringWatch {
		if atomic.LoadUint32(w) == stamp {
			return true
		}
	}
	return false
}

// settleSpins is how often settle looks before it yields between looks.
const settleSpins = 64

// settle waits until every claimed message is written (the caller holds
// ep.mu): before a frame takes sent as its mark, which promises the
// receiver every message up to it; before the ring's memory goes; and when
// a claim would reuse the slot of a claim still in writing. The writers
// need no lock to finish, so the wait ends; it is over at once unless
// goroutines send to one peer concurrently.
func (o *ringOut) settle() {
	// Claims before the last ringClaimSlots are written: each of those
	// claims found its slot's previous claim written.
	if o.claims-o.settled > ringClaimSlots {
		o.settled = o.claims - ringClaimSlots
	}
	for ; o.settled != o.claims; o.settled++ {
		c := o.settled + 1
		for i := 0; atomic.LoadUint32(&o.written[c%ringClaimSlots].c) != c; i++ {
			if i >= settleSpins {
				runtime.Gosched()
			}
		}
	}
}

// ringWrite writes the message claimed as s and publishes it; the caller
// does not hold ep.mu.
func (ep *Endpoint) ringWrite(p *peer, s *ringSlot, ctxID uint32, tag int32, head, buf []byte) {
	o := s.o
	// head (at most ringFirst bytes: see sendsParts) and the start of buf
	// share the first line; the rest of buf runs on from the next.
	if first := ringFirst - len(head); len(buf) > first {
		o.put(s.pos+1, buf[first:])
	}
	l := o.line(s.pos)
	binary.LittleEndian.PutUint32(l[4:], ctxID)
	binary.LittleEndian.PutUint32(l[8:], uint32(tag))
	binary.LittleEndian.PutUint32(l[12:], uint32(len(head)+len(buf)))
	copy(l[ringHdr+copy(l[ringHdr:], head):], buf)
	racesync.Release() // what the sender wrote before is the receiver's after
	var asleep bool
	if o.light {
		shmsync.PublishLight(ringWord(l), s.pos+1)
		asleep = shmsync.AsleepLight(o.sleepers)
	} else {
		// On x86 a full fence: it waits for the line the receiver polls.
		atomic.StoreUint32(ringWord(l), s.pos+1)
		asleep = shmsync.Asleep(o.sleepers)
	}
	if s.ahead > 0 {
		// A burst of sends (nothing read from the peer in between, as in
		// a window of Isends): start taking the lines of a message ahead,
		// if it is as long as this one, from the receiver's core now. The
		// next claim's lock waits until this message's stores are out, and
		// each would otherwise wait for its own lines in turn (1.4-1.6x
		// the rate at 8 B-2 KiB where lines move slowly); the next
		// message's lines alone came too late for short messages, whose
		// turns are shorter than a line's trip (Options.RingAhead). Not
		// in a ping-pong, where the receiver polls the next first line and
		// the prefetch would take it away. All of them: the first line
		// alone, which a longer message stores last, went back to the
		// polling receiver before its turn (256 B-1 KiB: 0.90-0.93x).
		next := s.pos + s.k*s.ahead
		for i := range s.k {
			ntcopy.PrefetchWrite(o.line(next + i))
		}
	}
	// The last touch of the ring's memory: from here settle lets it go.
	shmsync.PublishLight(&o.written[s.claim%ringClaimSlots].c, s.claim)
	if asleep {
		ep.mu.Lock()
		if p.rout == o && !p.broken {
			p.sendCtl(ep, header{kind: kPing})
		}
		ep.mu.Unlock()
	}
}

// ringScan notes in every ring where it stands now (end), before the
// caller polls the CQ, and reports whether any holds a message. The caller
// holds pollMu.
func (ep *Endpoint) ringScan() bool {
	any := false
	for _, p := range ep.peers {
		in := p.readRing()
		if in == nil {
			continue
		}
		in.end = in.scanEnd()
		any = any || in.end != in.head
	}
	return any
}

// scanEnd is where the messages published in the ring end now.
func (in *ringIn) scanEnd() uint32 {
	e := in.head
	for e-in.head < in.n {
		l := in.line(e)
		// An empty ring's head is watched for a few more loads: one
		// poll's round of the CQ, the other rings and the locks takes
		// long enough that a message published during it waited for the
		// next look; many more loads take the line from its writer.
		if w := ringWord(l); atomic.LoadUint32(w) != e+1 && (e != in.head || !watchStamp(w, e+1)) {
			break
		}
		size := binary.LittleEndian.Uint32(l[12:])
		if int(size) > ringMaxFor(in.n) {
			e++ // so that ringTo reaches it and breaks the link
			break
		}
		if size > ringFirst {
			// The further lines come from the sender's core only when
			// read: start that now, and the CQ poll, the matching and
			// the locks before ringTo copies them overlap it (a 2-line
			// message took 0.06 µs longer when the copy fetched them).
			in.prefetch(e+1, int(size)-ringFirst)
		}
		e += ringLinesFor(int(size))
	}
	return e
}

// settleLinksLocked judges the links whose completions failed during this
// poll, once the CQ is empty and the rings read: a peer whose QP is gone
// fails our sends to it, but what it published before it went still
// counts, and if that ends with its BYE it left on purpose and is not
// lost. Everything it sent is in the CQ or its ring by then (it can send
// nothing more), so reading its ring to the end keeps the order of its
// messages. The caller holds pollMu and ep.mu and has emptied the CQ.
func (ep *Endpoint) settleLinksLocked() {
	ep.unsettled = false
	for _, p := range ep.peers {
		if p == nil || p.linkFail == nil {
			continue
		}
		cause := p.linkFail
		p.linkFail = nil
		if in := p.readRing(); in != nil && !p.broken && !p.departed {
			if end := in.scanEnd(); end != in.head {
				ep.ringTo(p, end)
			}
		}
		ep.linkErrorLocked(p, cause)
	}
}

// ringPending reports whether a ring holds a message (for a goroutine
// about to block). The caller holds pollMu.
func (ep *Endpoint) ringPending() bool {
	for _, p := range ep.peers {
		if in := p.readRing(); in != nil && atomic.LoadUint32(ringWord(in.line(in.head))) == in.head+1 {
			return true
		}
	}
	return false
}

// ringDrainLocked handles what ringScan saw in every ring. The caller
// holds pollMu and ep.mu and has emptied the CQ since the scan.
func (ep *Endpoint) ringDrainLocked() int {
	n := 0
	for _, p := range ep.peers {
		if in := p.readRing(); in != nil && int32(in.end-in.head) > 0 {
			n += ep.ringTo(p, in.end)
		}
	}
	return n
}

// ringTo handles p's ring messages up to line mark (a frame's mark, or
// where a scan saw the ring end). Every one of them must be there: they
// were published before the frame, or seen by the scan. It returns how
// many it handled; a ring that breaks its rules breaks the link. The
// caller holds pollMu and ep.mu.
func (ep *Endpoint) ringTo(p *peer, mark uint32) int {
	in := p.rin
	if p.broken {
		return 0
	}
	if in == nil {
		ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: "a marked frame, but this rank has no ring from that peer"})
		return 0
	}
	if d := int32(mark - in.head); d <= 0 || uint32(d) > in.n {
		if d < 0 || uint32(d) > in.n {
			ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("ring mark %d, but the ring was read up to %d", mark, in.head)})
		}
		return 0
	}
	n := 0
	for in.head != mark {
		l := in.line(in.head)
		stamp := atomic.LoadUint32(ringWord(l)) // before the fields it publishes
		size := int(binary.LittleEndian.Uint32(l[12:]))
		k := ringLinesFor(size)
		if stamp != in.head+1 || size > ringMaxFor(in.n) || int32(mark-in.head) < int32(k) {
			ep.linkErrorLocked(p, &ProtocolError{Peer: p.rank, Detail: fmt.Sprintf("ring line %d is not the start of a message before mark %d", in.head, mark)})
			return n
		}
		racesync.Acquire()
		env := envelope{ctx: binary.LittleEndian.Uint32(l[4:]), src: p.rank, tag: int32(binary.LittleEndian.Uint32(l[8:]))}
		p.heard = true
		p.stats.eagerRecv(env.ctx, size, true)
		if ep.failErr == nil {
			if r := ep.m.arrive(env); r != nil && size <= r.capacity() && r.fold == nil {
				// Straight into the receive's buffers.
				if r.head == nil {
					in.copyOut(r.buf[:size], in.head)
				} else {
					in.copyOutParts(r.head, r.buf, size, in.head)
				}
				r.status = Status{Source: env.src, Tag: int(env.tag), Count: size}
				ep.completeLocked(r, nil)
			} else {
				data := make([]byte, size)
				in.copyOut(data, in.head)
				if r != nil {
					ep.deliverEagerLocked(r, env, data) // truncated, or a fold receive's
				} else {
					ep.m.addUnexpected(&inbound{env: env, size: size, data: data})
					ep.wakeArrivalsLocked()
				}
			}
		}
		// The further lines held payload, which a later lap's scan could
		// read as a first line's stamp (any four bytes equal to the line's
		// position+1+n would publish garbage): give each its own
		// position+1 back, which no later lap's scan takes for its own.
		for i := uint32(1); i < k; i++ {
			binary.LittleEndian.PutUint32(in.line(in.head+i), in.head+i+1)
		}
		in.head += k
		n++
		if in.head-in.pub >= in.n/4 {
			in.publishTail()
		}
	}
	// Tell the sender at once how far this rank has read: with the tail
	// published only every quarter of the ring, a window of sends found
	// up to that much of the ring still taken (a 2 KiB bibw window, 64
	// messages of 33 lines in 2048, sent 18-23% of them through the queue
	// pair; 1.13-1.20x the rate with the vCPUs close).
	if in.head != in.pub {
		in.publishTail()
	}
	return n
}

// publishTail tells the sender how far this rank has read. A light store:
// the sender only loads the word, never sleeps on it.
func (in *ringIn) publishTail() {
	in.pub = in.head
	shmsync.PublishLight(in.tailW, in.head)
}

// blockIn blocks in d's CQ (sleep: without spinning first), counted in
// the sleepers word while the endpoint has rings, so that a sender of a
// ring message rings the CQ too. It returns at once when a ring already
// holds a message. A goroutine that blocks before the rings exist (the
// background goroutines start before the ring window is set up) is
// counted when they appear (setSleepers).
func (ep *Endpoint) blockIn(ctx context.Context, d *device, sleep bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ep.pollMu.Lock()
	s := ep.sleepers
	if s != nil {
		shmsync.Announce(s)
		if ep.ringFence && !shmsync.FenceHeavy() {
			// A light publication may be out of sight: poll again
			// rather than sleep past it.
			shmsync.Withdraw(s)
			ep.pollMu.Unlock()
			return nil
		}
		if ep.ringPending() {
			shmsync.Withdraw(s)
			ep.pollMu.Unlock()
			return nil
		}
	} else {
		ep.blockedUncounted++
	}
	ep.pollMu.Unlock()
	var err error
	if sleep {
		err = d.waitSleep(ctx)
	} else {
		err = d.cq.Wait(ctx)
	}
	ep.pollMu.Lock()
	switch {
	case s != nil:
		if ep.sleepers == s { // the memory is still there
			shmsync.Withdraw(s)
		}
	case ep.blockedAdopted > 0:
		ep.blockedAdopted--
		if ep.sleepers != nil {
			shmsync.Withdraw(ep.sleepers)
		}
	default:
		ep.blockedUncounted--
	}
	ep.pollMu.Unlock()
	return err
}

// setSleepers installs the rings' sleepers word; the caller holds pollMu
// and mu, and no peer can write to the rings yet. Goroutines already
// blocked in a CQ are counted in it on their behalf: they re-check no
// ring before they sleep, and a ring message rings no CQ unless its
// sender sees a sleeper (PING). No re-check is needed either: the rings
// are empty until the window's key reaches a peer, after this.
func (ep *Endpoint) setSleepers(s *uint32) {
	ep.sleepers = s
	for ; ep.blockedUncounted > 0; ep.blockedUncounted-- {
		shmsync.Announce(s)
		ep.blockedAdopted++
	}
}

// copyOut copies the message at line pos (len(dst) bytes) into dst.
func (in *ringIn) copyOut(dst []byte, pos uint32) {
	if n := copy(dst, in.line(pos)[ringHdr:]); n < len(dst) {
		in.get(dst[n:], pos+1)
	}
}

// copyOutParts copies the size-byte message at line pos into head and then
// body (a parts receive): the payload runs on unbroken from its first
// line's header through the lines after it.
func (in *ringIn) copyOutParts(head, body []byte, size int, pos uint32) {
	if size <= len(head) {
		in.copyOut(head[:size], pos)
		return
	}
	in.copyOut(head, pos)
	at := ringHdr + len(head) // the body's offset from line pos's start
	line := pos + uint32(at/ringLine)
	body = body[:size-len(head)]
	if n := copy(body, in.line(line)[at%ringLine:]); n < len(body) {
		in.get(body[n:], line+1)
	}
}
