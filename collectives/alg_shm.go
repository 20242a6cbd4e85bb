package collectives

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/internal/thiscpu"
)

// The shared-memory algorithms (SharedMemory).
//
// When every rank of the group can load from and store to every other
// rank's memory (the SharedMemoryGroup capability: ranks on one host over
// shm),
// a call needs no messages at all. Each rank owns a region:
//
//	0    done     uint64  the last round this rank has finished reading
//	8    bell     a shmsync.Bell: its futex word, then at 12 the count of
//	              ranks asleep (or about to be) on it
//	16   left     uint64  0 while the Engine is open; at Close, 1 + the
//	                      counter of the last call this rank completed
//	24   fences   uint32  1: this rank's waits fence before they sleep
//	                      (see Light publishing)
//	64   entry 0: the call this rank is in (uint64 at 64) and its header
//	          (at 72; or its refusal, with the reason text at 128), for
//	          calls whose counter is 0 mod 4
//	320  entries 1-3: the same, for 1, 2 and 3 mod 4
//	1088 slot 0: line 0: round uint64 · call header (24 bytes) · up to 32
//	          bytes of data; line 1: second round word (allreduceShmRS);
//	          then the data of larger chunks (the slot size)
//	…    slot 1: the same
//
// A small call's chunk, header and round id share one cache line, so a
// reader fetches them in one transfer (a waiting reader of a chunk of up
// to Model.ShmPrefetchMax prefetches its lines: shmSlotFor), and its
// writer takes that line for writing (PREFETCHW) as it claims the slot,
// just before it writes it. (Not for a larger chunk: its copy gives the
// polling reader time to take the line back, and a 1 KiB bcast took
// 1.12-1.18 of the time so.) Chunks from
// 4 KiB go into the slots by whichever of non-temporal and cached stores
// has lately been faster (ntcopy.Chooser).
//
// A call moves its vector in rounds of at most a slot. A round has
// an id that every rank computes alike and that only grows: the Engine's
// call counter in the high bits, the chunk index in the low ones. In a
// round, each rank that contributes data
//  1. picks the slot it did not use last time, and waits until every rank
//     that reads it has finished the round it last held (done ≥ that
//     round), so nobody still reads what it overwrites;
//  2. copies its chunk into the slot, encodes the call's header next to
//     it, and then stores the round id into the slot's round word (an
//     atomic store: whoever sees the id sees the data);
//
// and each rank that needs data waits for the round id to appear in one of
// the peer's two slots, checks the peer's header against its own (a
// different count, op, type, root or collective is a MismatchError naming
// both ranks and values), and reads the data: allreduce and reduce fold the
// chunks in rank order, x0 ⊕ x1 ⊕ … ⊕ x(p−1), so every rank gets the same
// bits, which are also the Ordered algorithm's. It then stores the round id
// into its done word. Every call of the Engine ends by storing done = "all
// of this call", so a rank that left a call early (an error) never holds
// up the writers of later calls.
//
// Agreement. A rank that only writes in a call (a bcast root, a reduce
// sender) never reads a peer's header, and a bcast reader reads only the
// root's, so a peer that called with another root, count, op or type can
// go unseen. Every rank therefore announces its call's header in an entry
// of its region when the call begins (four entries, by the call counter
// mod 4, written seqlock-style: counter 0, header, counter), or its
// refusal of the call with the reason. Nobody waits for the others'
// announcements inside the call: a bcast root publishes and returns. A
// call that has compared every peer's header with its own (a barrier, an
// allreduce with data, a reduce at the root, a bcast reader of two ranks)
// is done; any other leaves its check pending for this rank's next call on
// the Engine (whatever its algorithm), which compares every peer's
// announcement of the pending call against the one most ranks announced,
// as Debug's fingerprint does. (A bcast reader skips the root, whose
// header it compared with the data: the root's entry stays in the root's
// cache, where its next announcement finds it.)
// If that next call reads every peer's header too, it checks at its end:
// every peer has published its data, so has announced the pending call,
// and nothing waits. Otherwise it checks when it begins, waiting until
// every peer has announced (or ended) the pending call, and announces
// itself only then. The entry read stays put: a peer overwrites it four
// calls later, and it cannot get that far ahead, since each of its calls
// either needs this rank's data or waits, when the next begins, for this
// rank's announcement; a peer that moved past the pending call anyway (it
// ran one-way calls on other paths ahead) is skipped. A difference or a
// refusal found there is the error the next call returns, after doing its
// own part (so nobody waits for this rank); Close checks a call left
// pending, waiting at most Options.StallProbe for peers that have not
// entered it. A rank that waits for a peer's data compares the peer's
// announcement with its own when the wait outlasts its spin (peerEntry),
// so a reader whose "root" never publishes fails by itself, even if no
// other rank calls again. So: the ranks that read a different header fail
// the call itself; every other rank fails it (an abort reached it in time)
// or its next call.
//
// A peer's check reads an entry's line from this rank's core, and the
// announcement four calls later stores into it again: the store then
// waits in the store buffer for the line to come back, and every store
// after it waits behind it (a two-rank bcast reader spent 13% of its
// samples there). So every call ends by taking the line of the next
// call's entry for writing (PREFETCHW, which waits for nothing): a peer
// read it for the call four back, calls ago, and it comes back while this
// rank is between calls.
//
// Light publishing. The words a peer waits for (a slot's round word, the
// done word, an entry's call word) are stored as shmsync's light
// publications, plain stores on amd64, once every rank of the region has
// said (its fences word) that its waits fence heavily before they sleep:
// an atomic store there is a full fence that waits for the line to come
// back from the peer polling it and for the data stored before it, a
// wait that a plain store leaves to the store buffer while this rank goes
// on to poll the peer's slot. Until every rank has said so, and for good
// once a rank that has published (seen) has not, they are atomic stores.
//
// Waits follow the region's WaitPolicy (internal/shmsync), without the
// spin when the region is Crowded (shmWaitPolicy): spin, yield
// the CPU, then sleep on the peer's bell, which the peer rings after it
// publishes a round or finishes reading one (shmsync's doc has the
// ordering argument). A waiter announces itself only when it is about to
// sleep: while it spins or yields, publishing costs no wake-up. With more ranks than cores, sleeping waiters leave the
// CPUs to the ranks that still have to arrive. Waits give up when the call
// is aborted (a peer's mismatch report, a stall probe),
// when the caller's ctx ends, when the group fails (a lost peer leaves its
// memory mapped but frozen: the p2p layer notices the loss), or when the
// Engine closes, or when a rank has closed its Engine without completing
// this call (its left word): a rank whose loop ended early must not leave
// the others waiting on memory that will never change. Its p2p Close says
// goodbye to the peers, but a shared-memory wait sends and receives
// nothing, so the departure is written where the waits look.

// Keeping the CPU. A crowded waiter yields after a few polls, since the
// rank it waits for is usually runnable on this very CPU. When that rank
// runs on another CPU and is about to publish, the yield only costs: the
// CPU goes to another rank for a whole turn (about 10 µs under Linux's
// EEVDF scheduler on the 2-vCPU VM these defaults were measured on: a
// yield hands the CPU over only once the yielder has had its share), and
// the waiter sees the data that much after it came. A 4-rank bcast of 8
// bytes whose root had a CPU to itself took 7-10 µs a call, every reader
// waiting out the other readers' turns for data that came 0.5 µs after
// the call began. So every crowded wait notes in line 1 of its rank's part
// the CPU it polls on, whom it waits for and when it last looked (at each
// check of its policy, and when it ends, as waiting for nobody), and a
// crowded waiter first polls without yielding, for at most
// Model.ShmKeepCPU, while its peer looks about to publish (keepsCPU): it
// looked within Model.ShmLiveWindow, on another CPU, waiting for nobody,
// for this rank, or for a rank that looked as lately on a third CPU. The
// notes are hints written with plain stores; a wrong one costs at most
// one ShmKeepCPU of polling.

const (
	shmSlotHdr   = 128 // lines 0 and 1 of a slot (see above); larger data after
	shmHdrOff    = 8   // a slot's call header follows its round word (an entry's: its call word)
	shmHdrLen    = 24  // the call header's length (putShmHeader)
	shmInline    = 32  // data of at most this many bytes sits in line 0, after the header
	shmLive      = 64  // line 1 of a rank's part: how its waits go (see Keeping the CPU)
	shmEntry0    = 128
	shmEntrySize = entReason + maxReason // the call's line, a refusal's reason
	shmEntries   = 4                     // entries by call counter mod 4 (see Agreement)
	shmSlot0     = shmEntry0 + shmEntries*shmEntrySize
	shmMinSlot   = 4 << 10
	shmChunkBits = 24 // chunks per call in a round id
	shmAllDone   = 1<<shmChunkBits - 1
)

// SharedRegionSize is the size of each rank's part of a SharedRegion whose
// slots hold slotBytes of data each: the largest chunk one round of a
// shared-memory algorithm moves (at least 4 KiB; a multiple of 64).
// Larger slots mean fewer rounds, which matters most when ranks outnumber
// cores (every round needs every rank to run).
func SharedRegionSize(slotBytes int) int { return shmSlot0 + 2*(shmSlotHdr+slotBytes) }

// shmState is the Engine's side of a SharedRegion.
type shmState struct {
	pr         PeerReader // single-copy reads of a peer's own buffer, nil without
	pw         PeerWriter // single-copy writes, nil without (or without pr)
	seen       []uint64   // per rank, the latest call this rank has seen it publish a round of or announce (look)
	waits      int        // claims that looked at a reader's done word (for tests)
	rounds     int        // rounds this rank published (for tests)
	stores     int        // stores of this rank's done word (for tests)
	quick      int        // calls ended by endQuick (for tests)
	prefetches int        // polls that prefetched a chunk's lines (shmSlotFor; for tests)
	kept       int        // waits that ended while keeping the CPU (keepCPU; for tests)
	ownedEntry int        // the entry whose line this rank last took for writing, -1 for none (ownNextEntry; for tests)
	line0Owns  int        // publications whose line 0 this rank took for writing first (shmPut; for tests)
	cpu        func() int // the CPU this thread runs on, -1 unknown (thiscpu.ID; tests fake it)
	crowded    bool       // the region is Crowded
	light      int8       // publish lightly: 1 yes, -1 no, 0 not known yet (lightNow)
	looks      int        // lightNow's looks at the fences words while it did not know
	r          SharedRegion
	failed     <-chan struct{} // r.Failed(), without two interface calls per call
	failFlag   *atomic.Bool    // r's FailFlag, if it has one: set before failed closes
	policy     shmsync.Policy  // r's, as shmWaitPolicy adapts it; Fenced where shmsync.Asymmetric
	mem        [][]byte        // per rank, its part of the region
	bells      []shmsync.Bell  // per rank, its bell (made once: every publish rings one)
	ownBell    shmsync.Bell    // bells[me], for publish's fast path (no bounds check)
	slot       int             // data bytes per slot
	slotShare  int             // slot / size: a rank's share of a piece-moving round (shmPublishPieces)
	slotSize   int             // bytes per slot, header included
	next       int             // the slot this rank writes next
	used       [2]uint64       // per slot, the round this rank last wrote into it
	table      []header        // the agreement checks' per-rank headers, reused
	known      []bool
	// pends[pendAt] is the call whose agreement the next call checks (see
	// Agreement), if its calls is not 0; a call fills the other entry
	// before it publishes anything and takes it as pending by flipping
	// pendAt (see Engine.execute for why not by copying it there).
	pends  [2]pendCall
	pendAt int
	// cp writes what other ranks will read (this rank's slots) by
	// whichever of non-temporal and cached stores has lately been faster
	// here (see ntcopy.Chooser).
	cp ntcopy.Chooser
}

// newShmState checks the region: every rank's part 8-byte aligned, and
// slots of at least shmMinSlot, sized by the smallest part (every rank
// sees the same parts, so every rank computes the same slots).
func newShmState(r SharedRegion, size, me int) *shmState {
	s := &shmState{r: r, failed: r.Failed(), mem: make([][]byte, size), seen: make([]uint64, size), cpu: thiscpu.ID, ownedEntry: -1}
	if f, ok := r.(FailFlagger); ok {
		s.failFlag = f.FailFlag()
	}
	least := -1
	for p := range s.mem {
		m := r.Mem(p)
		if len(m) == 0 || uintptr(unsafe.Pointer(unsafe.SliceData(m)))%8 != 0 {
			return nil
		}
		if least < 0 || len(m) < least {
			least = len(m)
		}
		s.mem[p] = m
	}
	// At most 1 GiB, so that a chunk's size fits the header's 32 bits.
	s.slot = min(((least-shmSlot0)/2-shmSlotHdr)/64*64, 1<<30)
	if s.slot < shmMinSlot {
		return nil
	}
	s.slotSize = shmSlotHdr + s.slot
	s.slotShare = s.slot / size
	s.bells = make([]shmsync.Bell, size)
	for p, m := range s.mem {
		s.bells[p] = shmsync.BellAt(m, shmBell)
	}
	s.ownBell = s.bells[me]
	if cr, ok := r.(Crowded); ok {
		s.crowded = cr.Crowded()
	}
	s.policy = shmWaitPolicy(r.WaitPolicy(), s.crowded)
	if shmsync.Asymmetric() {
		// Said before this rank publishes anything (see Light publishing).
		s.policy.Fenced = true
		atomic.StoreUint32(word32(s.mem[me], shmFences), 1)
	}
	if pr, ok := r.(PeerReader); ok && pr.CanReadPeer() {
		s.pr = pr
		s.pw, _ = r.(PeerWriter)
	}
	return s
}

// Polls between looks at stop (and, past the spin, yields) of a
// shared-memory wait: stop costs a channel poll and a few loads, so a
// spinning waiter amortizes it over many polls, while a crowded one looks
// soon, since its first look is its first yield.
const (
	shmCheckEvery        = 256
	shmCrowdedCheckEvery = 4
)

// shmWaitPolicy is how the shared-memory waits of a region whose policy
// is p wait. When the ranks outnumber their CPUs (crowded) the rank waited
// for is usually runnable but off-CPU, often behind this very waiter: a
// spin only burns the time slice it needs, and a futex sleep costs a
// wake-up (tens of µs in a VM) on the critical path. So a crowded waiter
// gives its CPU away (p's yield: sched_yield between processes) after a
// few polls, from the start, and sleeps only after p's whole yield phase,
// as Open MPI's shared-memory transport polls with sched_yield when
// oversubscribed.
func shmWaitPolicy(p shmsync.Policy, crowded bool) shmsync.Policy {
	p.CheckEvery = shmCheckEvery
	if crowded {
		if p.Yield < shmsync.Forever-p.Spin {
			p.Yield += p.Spin // the spin's time goes to yields
		}
		p.Spin, p.YieldInSpin, p.CheckEvery = 0, 0, shmCrowdedCheckEvery
		p.Contended = 0 // the rank waited for may need this CPU
	}
	return p
}

func word(m []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&m[off])) }

func word32(m []byte, off int) *uint32 { return (*uint32)(unsafe.Pointer(&m[off])) }

const (
	shmBell   = 8 // shmsync.BellSize bytes
	shmLeft   = 16
	shmFences = 24

	shmLiveOn = shmLive     // (CPU+1)<<32 | (the rank waited for)+1, as of shmLiveAt
	shmLiveAt = shmLive + 8 // when the rank last looked while waiting, or ended a wait (ns, wall clock)
)

// shmLightLooks bounds how many times a rank looks at the fences words
// of peers it has not seen publish yet before it publishes with atomic
// stores for good (each look may fetch a line the peer rewrites).
const shmLightLooks = 256

// pendCall is a shared-memory call whose agreement this rank has not
// checked yet (see Agreement above): calls is its counter, 0 for none.
type pendCall struct {
	calls uint64
	h     header
	op    string
	alg   Algorithm
	seen  int // a peer whose header the call compared with h (a bcast reader's root), or -1
}

// An entry's first line holds the call word (8 bytes), the call's header
// as a slot carries it (24 bytes, putShmHeader), and for a refusal a flag,
// its sentinel code and the length of its reason, whose text follows in
// the next lines: one line is what a check reads and an announcement
// writes.
const (
	entRefused = 40 // 1 for a refusal
	entCode    = 41 // the refusal's sentinel code (reasonInvalid, ...)
	entLen     = 42 // uint16: the reason's length
	entReason  = 64
)

// bell is rank r's bell.
func (s *shmState) bell(r int) shmsync.Bell { return s.bells[r] }

// announce writes the header of the call with counter calls into rank
// me's entry and rings its bell for peers waiting to compare. A refusal
// (h.kind == kindAbort, whatInvalid, see refusal) carries the refusing
// rank's reason.
func (s *shmState) announce(me int, calls uint64, h *header, reason []byte) {
	e := s.mem[me][shmEntry0+int(calls%shmEntries)*shmEntrySize:]
	w := word(e, 0)
	s.store(w, 0)
	// The load keeps the compiler from dropping a light store of 0 as one
	// the store of calls below overwrites, and (an acquire load where
	// stores are not kept in order, arm64, whose atomic store is a release
	// store only) the header's stores from passing the store of 0.
	atomic.LoadUint64(w)
	putShmHeader(e, h, int(h.payload))
	e[entRefused], e[entCode] = 0, 0
	if h.kind == kindAbort {
		n := copy(e[entReason:entReason+maxReason], reason)
		e[entRefused], e[entCode] = 1, uint8(h.valA)
		binary.LittleEndian.PutUint16(e[entLen:], uint16(n))
	}
	s.publish(w, calls)
}

// ownNextEntry starts taking the line of rank me's entry for the call
// with counter calls for writing (PREFETCHW), at the end of the call
// before it (see Agreement).
func (s *shmState) ownNextEntry(me int, calls uint64) {
	k := int(calls % shmEntries)
	ntcopy.PrefetchWrite(s.mem[me][shmEntry0+k*shmEntrySize:])
	s.ownedEntry = k
}

// entry reads rank r's header for the call with counter calls: state is
// 0 while r has not announced it, 1 when h holds it, 2 when r has moved
// past it. A refusal is h.kind == kindAbort (as refusal makes it), with
// reason its text.
func (s *shmState) entry(r int, calls uint64, h *header) (state int, reason string) {
	e := s.mem[r][shmEntry0+int(calls%shmEntries)*shmEntrySize:]
	w := word(e, 0)
	got := atomic.LoadUint64(w)
	switch {
	case got == calls:
		var b [entReason]byte
		copy(b[:], e[:entReason])
		getShmHeader(b[:], h)
		h.kind = kindFingerprint
		if b[entRefused] == 1 {
			n := min(int(binary.LittleEndian.Uint16(b[entLen:])), maxReason)
			reason = string(e[entReason : entReason+n])
			*h = header{kind: kindAbort, seq: h.seq, what: whatInvalid, rankA: int32(r), valA: int64(b[entCode]), payload: int64(n)}
		}
		if atomic.LoadUint64(w) != calls {
			return 2, "" // rewritten under us: r is past this call
		}
		return 1, reason
	case got > calls:
		return 2, ""
	}
	return 0, ""
}

// finished says whether rank r has ended the call with counter calls
// (every call ends by storing its done word, whatever its algorithm).
func (s *shmState) finished(r int, calls uint64) bool {
	return atomic.LoadUint64(word(s.mem[r], 0)) >= roundID(calls, shmAllDone)
}

// tables returns the per-rank scratch of the agreement checks.
func (s *shmState) tables(size int) ([]header, []bool) {
	if s.table == nil {
		s.table, s.known = make([]header, size), make([]bool, size)
	}
	clear(s.known)
	return s.table, s.known
}

// look fills table[r] from rank r's entry for the pending call p once it
// can tell: done is false while r has neither announced that call nor
// ended it. A refusal's error is returned as refused.
//
// The entry comes first, and r's done word (another line, which r rewrites
// every call) only when r has not announced the call: a rank that has
// announced a call has finished every earlier one (seen), which spares
// this rank's next claim of a slot the look at r's done word too.
func (s *shmState) look(r int, p *pendCall, table []header, known []bool) (done bool, refused error) {
	st, reason := s.entry(r, p.calls, &table[r])
	if st == 0 {
		if !s.finished(r, p.calls) {
			return false, nil
		}
		// r may have announced the call and ended it since the look at
		// its entry (it announces before it ends a call): look again.
		if st, reason = s.entry(r, p.calls, &table[r]); st == 0 {
			return true, nil // ended it without announcing it (it failed before it began, or took another path)
		}
	}
	s.seen[r] = max(s.seen[r], p.calls)
	switch {
	case st == 1 && table[r].kind == kindAbort:
		return true, mismatchFromAbort(&table[r], []byte(reason))
	case st == 1:
		known[r] = true
	}
	return true, nil // st == 2: moved past it, nothing to compare
}

// verdict is the error of the pending call p, given what look found:
// the first refusal, else the first difference from the call most ranks
// made (tableMismatch), else nil.
func (e *Engine) verdict(p *pendCall, table []header, known []bool, refused []error) error {
	for r, err := range refused {
		if err != nil {
			return &Error{Op: p.op, Algorithm: p.alg.String(), Seq: p.h.seq, Rank: e.rank, Peer: r, Err: err}
		}
	}
	table[e.rank], known[e.rank] = p.h, true
	table[e.rank].kind = kindFingerprint
	if p.seen >= 0 {
		table[p.seen], known[p.seen] = table[e.rank], true
	}
	if m := tableMismatch(table, known, func(r int) int { return r }); m != nil {
		return &Error{Op: p.op, Algorithm: p.alg.String(), Seq: p.h.seq, Rank: e.rank, Peer: m.otherThan(e.rank), Err: m}
	}
	return nil
}

// shmEnter is a call's part in the agreement, when it begins: it checks
// the agreement of this rank's previous call if that is pending, then
// announces this call, or this rank's refusal of it (bad). The check waits
// until every peer has announced (or ended) the previous call, unless this
// call will read every peer's header with its data (readsAll): every peer
// has announced the previous call by then, so the check is left to the
// end of this call (after: the call is s.pend(), which the caller then
// checks with shmVerify and drops) and costs no wait. late is the previous
// call's disagreement, which this call reports once it has done its part;
// err is why this call cannot go on.
func (c *call) shmEnter(bad error, readsAll bool) (late error, after bool, err error) {
	e := c.e
	s := e.shm
	if !c.shmHeld {
		if !e.shmMu.TryRLock() {
			return nil, false, nil // Close is under way
		}
		defer e.shmMu.RUnlock()
	}
	if e.shmGone {
		return nil, false, nil
	}
	if p := s.pend(); p.calls != 0 {
		switch {
		case p.calls != c.calls-1: // a call in between failed before it began
		case bad != nil: // this call fails with its own reason (which wins)
		case readsAll:
			// The peers have most likely announced p by now (this rank's
			// call was one-way, they read it): one look without waiting
			// checks it, and the seen it gives may spare this call's claim
			// of a slot its look at their done words.
			var ok bool
			late, ok = c.shmVerifyNow(p)
			after = !ok
		default:
			late, err = c.shmVerify(p)
		}
		if !after {
			p.calls = 0
		}
		if err != nil {
			return nil, false, err
		}
	}
	if bad == nil {
		s.announce(e.rank, c.calls, c.h, nil)
		return late, after, nil
	}
	h, reason := refusal(c.seq, e.rank, bad)
	s.announce(e.rank, c.calls, &h, reason)
	return nil, after, nil
}

// pend is the call whose agreement this rank's next call checks, if its
// calls is not 0 (see Agreement).
func (s *shmState) pend() *pendCall { return &s.pends[s.pendAt] }

// nextPend is where a call records itself before it publishes anything,
// in case it ends pending (see Engine.execute); pendNext makes it so.
func (s *shmState) nextPend() *pendCall { return &s.pends[s.pendAt^1] }

// pendNext makes the call nextPend holds the pending one; the one pend
// held has been checked.
func (s *shmState) pendNext() {
	s.pends[s.pendAt].calls = 0
	s.pendAt ^= 1
}

// shmVerify waits until every peer has announced (or ended) the pending
// call p and returns its verdict.
func (c *call) shmVerify(p *pendCall) (late, err error) {
	late, _, err = c.shmVerifyAs(p, true)
	return late, err
}

// shmVerifyNow is shmVerify without waiting: ok is false (and late nil)
// if a peer has not announced or ended p yet.
func (c *call) shmVerifyNow(p *pendCall) (late error, ok bool) {
	late, ok, _ = c.shmVerifyAs(p, false)
	return late, ok
}

func (c *call) shmVerifyAs(p *pendCall, wait bool) (late error, ok bool, err error) {
	e, s := c.e, c.e.shm
	table, known := s.tables(e.size)
	var refused []error
	for r := range e.size {
		if r == e.rank || r == p.seen {
			continue // p.seen's header is p.h (see verdict)
		}
		var bad error
		cond := func() bool {
			var done bool
			done, bad = s.look(r, p, table, known)
			return done
		}
		if !wait {
			if !cond() {
				return nil, false, nil
			}
		} else if err := c.shmWait(r, cond); err != nil {
			return nil, false, err
		}
		if bad != nil {
			if refused == nil {
				refused = make([]error, e.size)
			}
			refused[r] = bad
		}
	}
	return e.verdict(p, table, known, refused), true, nil
}

// closeVerify is shmVerify for Close: it waits for the peers of the
// pending call at most Options.StallProbe (a peer that has not entered
// the call by then is not compared), and less if one leaves or the group
// fails.
func (e *Engine) closeVerify() error {
	s := e.shm
	p := *s.pend()
	if p.calls == 0 {
		return nil
	}
	s.pend().calls = 0
	table, known := s.tables(e.size)
	refused := make([]error, e.size)
	seen := make([]bool, e.size)
	seen[e.rank] = true
	if p.seen >= 0 {
		seen[p.seen] = true
	}
	deadline := time.Now().Add(e.opts.stallProbe())
	for {
		all := true
		for r := range e.size {
			if seen[r] {
				continue
			}
			done, bad := s.look(r, &p, table, known)
			if l := atomic.LoadUint64(word(s.mem[r], shmLeft)); done || l != 0 {
				seen[r], refused[r] = true, bad
				continue
			}
			all = false
		}
		if all || time.Now().After(deadline) {
			break
		}
		select {
		case <-s.failed:
			return nil // the group's failure is reported elsewhere
		default:
		}
		time.Sleep(20 * time.Microsecond)
	}
	return e.verdict(&p, table, known, refused)
}

// leave records in rank me's region that its Engine is closing, after ok,
// the counter of the last call it completed, and wakes its sleepers.
func (s *shmState) leave(me int, ok uint64) {
	atomic.StoreUint64(word(s.mem[me], shmLeft), ok+1)
	s.bell(me).Kick()
}

// gone returns a rank that closed its Engine without completing the call
// with counter calls, or -1.
func (s *shmState) gone(me int, calls uint64) int {
	for r, m := range s.mem {
		if r == me {
			continue
		}
		if l := atomic.LoadUint64(word(m, shmLeft)); l != 0 && l-1 < calls {
			return r
		}
	}
	return -1
}

// publish stores v into w, a word of this rank's part that peers wait for,
// and wakes the sleepers on its bell (see Light publishing). The light
// path, every publication's once the ranks have said they fence, is
// written out here: through store and RingLight it was three calls deep
// for a store and a load.
func (s *shmState) publish(w *uint64, v uint64) {
	if s.light > 0 {
		shmsync.PublishLight64(w, v)
		if !s.ownBell.AsleepLight() {
			return
		}
	}
	s.publishSlow(w, v)
}

// publishSlow is publish's rest: a light publication that found a sleeper
// rings; any other stores and rings.
func (s *shmState) publishSlow(w *uint64, v uint64) {
	if s.light > 0 {
		s.ownBell.Kick()
		return
	}
	if s.store(w, v) {
		s.ownBell.RingLight()
	} else {
		s.ownBell.Ring()
	}
}

// store stores v into w, a word peers wait for, lightly where this rank
// publishes lightly (see Light publishing), and reports whether it did.
func (s *shmState) store(w *uint64, v uint64) (light bool) {
	if s.lightNow() {
		shmsync.PublishLight64(w, v)
		return true
	}
	atomic.StoreUint64(w, v)
	return false
}

// lightNow says whether this rank publishes lightly (see Light
// publishing).
func (s *shmState) lightNow() bool {
	if s.light != 0 {
		return s.light > 0
	}
	if !s.policy.Fenced { // this process's waits do not fence before they sleep
		s.light = -1
		return false
	}
	for p, m := range s.mem {
		if atomic.LoadUint32(word32(m, shmFences)) != 0 {
			continue
		}
		// A rank stores its word before it publishes: one this rank has
		// seen publish without it never fences.
		if s.seen[p] > 0 || s.looks >= shmLightLooks {
			s.light = -1
		}
		s.looks++
		return false
	}
	s.light = 1
	return true
}

func (s *shmState) slotOff(k int) int { return shmSlot0 + k*s.slotSize }

// roundID is the id of chunk i of the call with counter calls.
func roundID(calls uint64, i int) uint64 { return calls<<shmChunkBits | uint64(i) }

// setDone stores round id into rank me's done word and rings its bell.
func (s *shmState) setDone(me int, id uint64) {
	s.stores++
	s.publish(word(s.mem[me], 0), id)
}

// finish marks the call with counter calls over on rank me (see the
// narrative).
func (s *shmState) finish(me int, calls uint64) { s.setDone(me, roundID(calls, shmAllDone)) }

// shmWait polls cond, a condition on peer's memory, until it holds. It
// fails when the call is stopped, ctx ends, the group fails or the Engine
// closes; peer is whom the call waits for, and whose bell it sleeps on.
func (c *call) shmWait(peer int, cond func() bool) error {
	if cond() {
		return nil
	}
	if c.background() {
		if ok, err := c.shmNap(peer, cond); ok || err != nil {
			return err
		}
	}
	e := c.e
	live := e.shm.crowded && e.model.ShmKeepCPU > 0
	if live {
		cpu, now := e.shm.cpu(), time.Now().UnixNano()
		e.shm.noteAt(e.rank, peer, cpu, now)
		defer e.shm.note(e.rank, -1)
		if c.keepCPU(peer, cond, cpu, now) {
			return nil
		}
	}
	started := false
	stop := func() error {
		if live {
			e.shm.note(e.rank, peer)
		}
		if err := c.shmStopped(peer); err != nil {
			return err
		}
		if !started {
			started = true
			c.armProbe()
			c.noteWait(peer)
		}
		return nil
	}
	err := e.shm.bell(peer).Wait(c.parent, cond, stop, e.shm.policy)
	if err != nil && err == c.parent.Err() {
		return c.fail(peer, err) // the parent ended between two checks of stop
	}
	return err
}

// note writes into rank me's line 1 that it runs on this CPU and waits
// for peer (-1: for nobody) as of now (see Keeping the CPU).
func (s *shmState) note(me, peer int) { s.noteAt(me, peer, s.cpu(), time.Now().UnixNano()) }

// noteAt is note on CPU cpu at time now (ns).
func (s *shmState) noteAt(me, peer, cpu int, now int64) {
	m := s.mem[me]
	shmsync.PublishLight64(word(m, shmLiveOn), uint64(cpu+1)<<32|uint64(peer+1))
	shmsync.PublishLight64(word(m, shmLiveAt), uint64(now))
}

// keepsCPU says whether rank me, on CPU cpu, should poll for peer
// without yielding at time now (ns): peer noted within window that it
// polls on another CPU and waits for nobody, for me, or for a rank that
// noted within window that it polls on a third CPU (see Keeping the CPU).
// A rank that waits for one that shares its CPU waits for a turn of that
// CPU's scheduler.
func (s *shmState) keepsCPU(me, peer, cpu int, now, window int64) bool {
	if cpu < 0 {
		return false
	}
	pc, w, ok := s.liveOn(peer, now, window)
	if !ok || pc == cpu {
		return false
	}
	switch {
	case w < 0 || w == me:
		return true
	case w >= len(s.mem):
		return false
	}
	xc, _, ok := s.liveOn(w, now, window)
	return ok && xc != cpu && xc != pc
}

// liveOn reads rank r's note: the CPU it polls on and whom it waits for
// (-1: nobody), if it noted them within window of now on a known CPU.
func (s *shmState) liveOn(r int, now, window int64) (cpu, waitsFor int, ok bool) {
	m := s.mem[r]
	on := atomic.LoadUint64(word(m, shmLiveOn))
	at := int64(atomic.LoadUint64(word(m, shmLiveAt)))
	cpu, waitsFor = int(on>>32)-1, int(uint32(on))-1
	return cpu, waitsFor, cpu >= 0 && now-at <= window
}

// keepCPU polls cond without yielding for at most Model.ShmKeepCPU while
// peer looks about to publish (keepsCPU); it reports whether cond came
// to hold. This rank is on CPU cpu at time now (ns), as it noted.
func (c *call) keepCPU(peer int, cond func() bool, cpu int, now int64) bool {
	s, me := c.e.shm, c.e.rank
	keep, window := int64(c.e.model.ShmKeepCPU), int64(c.e.model.ShmLiveWindow)
	for start := now; now-start <= keep; {
		if !s.keepsCPU(me, peer, cpu, now, window) {
			return false
		}
		for range 16 {
			if cond() {
				s.kept++
				return true
			}
		}
		// Still polling: this rank is live too.
		cpu, now = s.cpu(), time.Now().UnixNano()
		s.noteAt(me, peer, cpu, now)
	}
	return false
}

// shmStopped is why a shared-memory wait for peer must end other than by
// its condition: the call was aborted, the group failed, the caller's ctx
// ended or the Engine is closing; nil to go on waiting.
func (c *call) shmStopped(peer int) error {
	e := c.e
	if c.halted.Load() {
		return c.failAbort()
	}
	select {
	case <-e.shm.failed:
		return c.fail(peer, e.shm.r.Err())
	default:
	}
	if err := c.parent.Err(); err != nil {
		return c.fail(peer, err)
	}
	if e.closing.Load() {
		return c.fail(peer, ErrClosed)
	}
	if err := c.peerEntry(peer); err != nil {
		return err
	}
	if r := e.shm.gone(e.rank, c.calls); r >= 0 {
		if ab := c.abortErr(); ab != nil {
			return c.failAbort()
		}
		// The group may have failed since the look above, and r left
		// because of it: the loss is the cause, not r's departure.
		select {
		case <-e.shm.failed:
			return c.fail(peer, e.shm.r.Err())
		default:
		}
		// r may have left because it found this call's arguments differ
		// from its own (a mismatch it reported, whose abort may not be
		// here yet): its entry for the call tells, and the disagreement
		// is the cause, not the departure.
		if err := c.peerEntry(r); err != nil {
			return err
		}
		return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: e.rank, Peer: r, Err: &PeerClosedError{Rank: r}}
	}
	return nil
}

// peerEntry compares the call peer announced for this call with this
// rank's: a rank waiting for a peer that called with other arguments (and
// may never publish what this rank waits for: a bcast reader whose root
// is a reader) fails by itself, even if no other rank calls again.
func (c *call) peerEntry(peer int) error {
	if peer < 0 || peer == c.e.rank {
		return nil
	}
	var h header
	st, reason := c.e.shm.entry(peer, c.calls, &h)
	switch {
	case st != 1:
		return nil
	case h.kind == kindAbort:
		return c.peerFailed(peer, mismatchFromAbort(&h, []byte(reason)))
	}
	if m := compareCall(c.e.rank, c.h, peer, &h); m != nil {
		return c.mismatch(m)
	}
	return nil
}

// shmPut publishes data as this rank's chunk i: it waits until the slot is
// free, copies, writes the header and stores the round id.
func (c *call) shmPut(i int, data []byte) error {
	slot, err := c.shmClaim()
	if err != nil {
		return err
	}
	if len(data) <= shmInline {
		c.e.shm.ownLine0(slot)
	}
	c.e.shm.cp.Copy(dataOf(slot, len(data)), data)
	c.shmPublish(slot, i, len(data))
	return nil
}

// ownLine0 starts taking the first line of this rank's slot for writing
// (PREFETCHW), for a publication that goes all into that line, which the
// peers poll: its trip here starts a little before the first store.
func (s *shmState) ownLine0(slot []byte) {
	ntcopy.PrefetchWrite(slot)
	s.line0Owns++
}

// shmPutRaw is shmPut that always places data after the slot's header
// (never inline in line 0) and leaves data[hs:he] out; it returns this
// rank's slot.
func (c *call) shmPutRaw(i int, data []byte, hs, he int) ([]byte, error) {
	slot, err := c.shmClaim()
	if err != nil {
		return nil, err
	}
	c.e.shm.cp.Copy(slot[shmSlotHdr:], data[:hs])
	c.e.shm.cp.Copy(slot[shmSlotHdr+he:], data[he:])
	c.shmPublish(slot, i, len(data))
	return slot, nil
}

// shmClaim takes this rank's next slot, once every rank that read it has
// finished the round it held.
func (c *call) shmClaim() ([]byte, error) {
	s, me := c.e.shm, c.e.rank
	k := s.next
	if prev := s.used[k]; prev != 0 {
		for p := range s.mem {
			// A rank seen in a later call than prev's (publishing, or
			// announcing it) has finished prev's call, and its reading of
			// this slot.
			if p == me || s.seen[p] > prev>>shmChunkBits {
				continue
			}
			s.waits++
			if err := c.waitDone(p, prev); err != nil {
				return nil, err
			}
		}
	}
	s.next ^= 1
	return s.mem[me][s.slotOff(k):][:s.slotSize:s.slotSize], nil
}

// shmPublish writes the header of chunk i (n bytes) into slot and stores
// its round id.
func (c *call) shmPublish(slot []byte, i, n int) {
	s := c.e.shm
	putShmHeader(slot, c.h, n)
	id := roundID(c.calls, i)
	s.rounds++
	s.used[s.next^1] = id
	s.publish(word(slot, 0), id)
}

// shmGet waits for peer's chunk i and returns it (valid until this rank
// marks the round done), after checking peer's header against this call's.
func (c *call) shmGet(peer, i int, n int) ([]byte, error) {
	slot, err := c.shmSlot(peer, i, n)
	if err != nil {
		return nil, err
	}
	return dataOf(slot, n), nil
}

// dataOf is where a slot holds a chunk of n bytes.
func dataOf(slot []byte, n int) []byte {
	if n <= shmInline {
		return slot[shmHdrOff+shmHdrLen : shmHdrOff+shmHdrLen+n]
	}
	return slot[shmSlotHdr : shmSlotHdr+n]
}

// putShmHeader and getShmHeader are the 24-byte header of a slot (or an
// entry), at shmHdrOff of line: the call's fingerprint and the chunk's
// size (at most a slot, so 32 bits), compared like a message header. 24
// bytes leave 32 of line 0 for data: a 32-byte allreduce then moves one
// cache line per rank, not two. The size put is payload's, not h's (a
// publication's chunk's: h is the call's, which it need not copy).
func putShmHeader(line []byte, h *header, payload int) {
	b := line[shmHdrOff : shmHdrOff+shmHdrLen]
	b[0], b[1], b[2], b[3] = h.coll, uint8(h.op), uint8(h.dtype), h.alg
	binary.LittleEndian.PutUint32(b[4:], uint32(h.root))
	binary.LittleEndian.PutUint64(b[8:], uint64(h.count))
	binary.LittleEndian.PutUint32(b[16:], uint32(payload))
	binary.LittleEndian.PutUint32(b[20:], h.seq)
}

// getShmHeader fills h in place: a header returned by value is built
// field by field and then copied with 16-byte loads, which wait for those
// stores to reach the cache (see call.h).
func getShmHeader(line []byte, h *header) {
	b := line[shmHdrOff : shmHdrOff+shmHdrLen]
	*h = header{}
	h.kind, h.coll, h.op, h.dtype, h.alg = kindData, b[0], reduce.OpCode(b[1]), reduce.DType(b[2]), b[3]
	h.root = int32(binary.LittleEndian.Uint32(b[4:]))
	h.count = int64(binary.LittleEndian.Uint64(b[8:]))
	h.payload = int64(binary.LittleEndian.Uint32(b[16:]))
	h.seq = binary.LittleEndian.Uint32(b[20:])
}

// shmSlot is shmGet returning peer's whole slot.
func (c *call) shmSlot(peer, i int, n int) ([]byte, error) { return c.shmSlotFor(peer, i, n, 0, n) }

// shmSlotFor is shmSlot for a reader that will read bytes [off, off+m) of
// the n-byte chunk. While it waits for the round id in line 0 it
// prefetches those bytes' lines, when they lie past line 0 and m is at
// most Model.ShmPrefetchMax, in both of peer's slots (which one the round
// comes in is not known yet). Without it a reader fetches line 0 when the
// round id arrives and only then the data's lines, two trips between
// cores one after the other; polled along, the data's lines mostly come
// over with line 0 (the writer stores them before the id): a two-rank
// bcast or reduce of 64-512 B took 0.74-0.88 of the time, allreduce,
// allgather, alltoall and reduce_scatter 0.87-0.97.
func (c *call) shmSlotFor(peer, i, n, off, m int) ([]byte, error) {
	s := c.e.shm
	id := roundID(c.calls, i)
	mem := s.mem[peer]
	w0, w1 := word(mem, s.slotOff(0)), word(mem, s.slotOff(1))
	var d0, d1 []byte
	if n > shmInline && m > 0 && m <= c.e.model.ShmPrefetchMax {
		d0 = mem[s.slotOff(0)+shmSlotHdr+off:][:m]
		d1 = mem[s.slotOff(1)+shmSlotHdr+off:][:m]
	}
	k := -1
	if err := c.shmWait(peer, func() bool {
		switch id {
		case atomic.LoadUint64(w0):
			k = 0
		case atomic.LoadUint64(w1):
			k = 1
		default:
			if d0 != nil {
				ntcopy.Prefetch(d0)
				ntcopy.Prefetch(d1)
				s.prefetches++
			}
			return false
		}
		return true
	}); err != nil {
		return nil, err
	}
	s.seen[peer] = c.calls
	slot := mem[s.slotOff(k):]
	var h header
	getShmHeader(slot, &h)
	if mm := compareCall(c.e.rank, c.h, peer, &h); mm != nil {
		return nil, c.mismatch(mm)
	}
	if h.payload != int64(n) {
		return nil, c.fail(peer, fmt.Errorf("%w: rank %d's chunk %d has %d bytes, want %d", ErrProtocol, peer, i, h.payload, n))
	}
	return slot[:s.slotSize:s.slotSize], nil
}

// shmDone marks chunk i read. In the call's last round (shmLast) it
// marks the whole call read instead, as end would right after: one store
// of the done word, and one look at the bell, a call fewer.
func (c *call) shmDone(i int) {
	id := roundID(c.calls, i)
	if c.shmLast {
		id = roundID(c.calls, shmAllDone) // shmDoneAll's, one call shallower
		c.shmFinished = true
	}
	c.e.shm.setDone(c.e.rank, id)
}

// shmDoneAll marks every round of the call read (end's finish), for a
// rank that reads nothing more of it.
func (c *call) shmDoneAll() {
	c.e.shm.finish(c.e.rank, c.calls)
	c.shmFinished = true
}

// waitDone waits until rank p's done word has reached round id.
func (c *call) waitDone(p int, id uint64) error {
	done := word(c.e.shm.mem[p], 0)
	return c.shmWait(p, func() bool { return atomic.LoadUint64(done) >= id })
}

// pieces is the chunk size that pipelines a vector of n bytes: an eighth,
// at least least bytes, at most a slot, in whole elements (at least one).
// When the ranks outnumber the CPUs (Crowded) nothing overlaps and every
// piece is a hand-off that waits for a rank to be scheduled: the chunks
// are whole slots then.
func (c *call) pieces(n, least int) int {
	if c.e.shm.crowded {
		least = c.e.shm.slot
	}
	return max(c.whole(min(max(n/8, least), c.e.shm.slot)), c.esize)
}

// whole is n rounded down to whole elements. Every element type's size is
// a power of two, which a mask rounds to: the division (IDIV, tens of
// cycles) was 7% of a small bcast's software.
func (c *call) whole(n int) int {
	if c.esize&(c.esize-1) == 0 {
		return n &^ (c.esize - 1)
	}
	return n / c.esize * c.esize
}

// shmChunksOf calls f for every chunk of a vector of nbytes, chunks of
// per bytes (whole elements); a vector of 0 bytes still has one, empty,
// chunk, so that a barrier and empty calls synchronise like the others.
// (A call of one chunk, every small one, may run its round's body itself
// instead, with shmLast set, then roundOver: the closure's indirect call,
// which nothing inlines, and this loop's frame were a tenth of a small
// bcast's software.)
func (c *call) shmChunksOf(nbytes, per int, f func(i, off, n int) error) error {
	if nbytes > per<<shmChunkBits-1 {
		return fmt.Errorf("%w: %d bytes exceed the shared-memory algorithms' %d-chunk limit", ErrInvalidArgument, nbytes, shmAllDone)
	}
	for i, off := 0, 0; i == 0 || off < nbytes; i++ {
		n := min(per, nbytes-off)
		c.shmLast = off+n >= nbytes
		err := f(i, off, n)
		c.shmLast = false
		if err != nil {
			return err
		}
		off += n
	}
	return nil
}

// roundOver ends the one round of a call whose body ran without
// shmChunksOf, as shmChunksOf ends each: err is the body's.
func (c *call) roundOver(err error) error {
	c.shmLast = false
	return err
}

// allreduceShm: every rank publishes its chunk, folds all chunks in rank
// order into buf, and marks the chunk done.
func (c *call) allreduceShm(buf []byte) error {
	// Large vectors go in pieces (Model.ShmPipeBytes) so that one rank
	// copies the next piece in while another folds this one.
	per := c.whole(c.e.shm.slot)
	if len(buf) > c.e.model.ShmPipeBytes {
		per = c.pieces(len(buf), c.e.model.ShmPieceMin)
	}
	if len(buf) <= per {
		c.shmLast = true // one round, its body called straight (see shmChunksOf)
		return c.roundOver(c.allreduceChunk(0, buf))
	}
	return c.shmChunksOf(len(buf), per, func(i, off, n int) error {
		return c.allreduceChunk(i, buf[off:off+n])
	})
}

// allreduceChunk is allreduceShm's round i: chunk, its part of buf.
func (c *call) allreduceChunk(i int, chunk []byte) error {
	if err := c.shmPut(i, chunk); err != nil {
		return err
	}
	return c.shmFold(i, chunk)
}

// reduceShm: every rank publishes its chunk; root folds them. A root that
// folds in place (shmFold) reads no chunk of its own, so it publishes
// none: nobody else reads it. Large vectors go in pieces, as in
// allreduceShm, so that the root folds one piece while the others copy
// the next one in.
func (c *call) reduceShm(buf []byte, root int) error {
	per := c.whole(c.e.shm.slot)
	if len(buf) > c.e.model.ShmPipeBytes {
		per = c.pieces(len(buf), c.e.model.ShmPieceMin)
	}
	if len(buf) <= per {
		c.shmLast = true // one round, its body called straight (see shmChunksOf)
		return c.roundOver(c.reduceChunk(0, buf, root))
	}
	return c.shmChunksOf(len(buf), per, func(i, off, n int) error {
		return c.reduceChunk(i, buf[off:off+n], root)
	})
}

// reduceChunk is reduceShm's round i: chunk, its part of buf.
func (c *call) reduceChunk(i int, chunk []byte, root int) error {
	me := c.e.rank
	if me != root || !c.foldsInPlace() {
		if err := c.shmPut(i, chunk); err != nil {
			return err
		}
	}
	if me != root {
		c.shmDone(i)
		return nil
	}
	return c.shmFold(i, chunk)
}

// foldsInPlace says whether this rank's fold of every rank's data may
// start from its own, x(me) ⊕ the others in rank order: rank 0, and rank
// 1 of two when the op commutes and Deterministic is off (x1 ⊕ x0 is
// x0 ⊕ x1 then, bit for bit).
func (c *call) foldsInPlace() bool { return c.rootFoldsInPlace(c.e.rank) }

// rootFoldsInPlace is foldsInPlace for rank root, the same on every rank.
func (c *call) rootFoldsInPlace(root int) bool { return root == 0 || c.pairCommutes() }

// pairCommutes says whether the call is of two ranks whose fold x1 ⊕ x0
// is x0 ⊕ x1 bit for bit: the op commutes and Deterministic is off.
func (c *call) pairCommutes() bool {
	return c.e.size == 2 && c.kern.Op.Commutative() && !c.e.opts.Deterministic
}

// readsForReduce says whether a shared-memory reduce of n bytes may
// read the other ranks' buffers: where the region can and the ranks have
// CPUs of their own (the others wait for the root's reads), within
// Model.ShmReduceReadMin/Max, and not folding blocks.
func (c *call) readsForReduce(n int) bool {
	return c.e.shm.pr != nil && !c.e.shm.crowded && c.e.model.reduceReads(n) && !c.e.model.reduceFolds(n)
}

// reducesRead says whether a shared-memory reduce of n bytes to root
// reads the other ranks' buffers (reduceShmRead): readsForReduce, where
// root folds in place (rootFoldsInPlace).
func (c *call) reducesRead(n, root int) bool { return c.readsForReduce(n) && c.rootFoldsInPlace(root) }

// reducesReadInto says whether ReduceInto's root of n bytes reads the
// other rank's buffer straight into recv (reduceShmRead with into): two
// ranks that pairCommutes, which any root may, and readsForReduce.
func (c *call) reducesReadInto(n int) bool { return c.pairCommutes() && c.readsForReduce(n) }

// reduceSplitMin is the smallest reduce of two ranks that splits the work
// (reduceShmSplit) where the region can write a peer's memory too: on the
// Intel VM the split took 0.71-0.89 of the root-only read's time at 128
// KiB-512 KiB and 1.05 at 64 KiB (osu-compare, 5 rounds, 2 ranks bound),
// where the second rank's write and the mark the root waits for cost
// about what the half of the root's reads and folds they spare does.
const reduceSplitMin = 128 << 10

// reducesSplit says whether a shared-memory reduce of n bytes splits the
// work between its two ranks (reduceShmSplit): reducesReadInto's
// conditions, a region that can write a peer's memory, and at least
// reduceSplitMin bytes. Every rank decides alike, whichever of Reduce and
// ReduceInto it called.
func (c *call) reducesSplit(n int) bool {
	return n >= reduceSplitMin && c.e.shm.pw != nil && c.reducesReadInto(n)
}

// reduceShmSplit is the single-copy reduce of two ranks with both ranks
// working (reducesSplit): the root publishes own's and dst's addresses
// (dst is own for Reduce, recv for ReduceInto), the other rank own's. The
// root reads the other's first half and folds own's into it in dst (into
// dst straight when dst is not own, through scratch when it is); the
// other reads the root's own's second half into
// scratch, folds its own second half into that and writes it into the
// root's dst (process_vm_writev), then stores a mark (the round id, its
// complement if the write failed) in its slot's second round word. The
// root returns once it has the mark, the other once the root is done
// with its buffer. x1 ⊕ x0 is x0 ⊕ x1 bit for bit here (reducesReadInto),
// so either rank may fold either half.
func (c *call) reduceShmSplit(own, dst []byte, root int) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	s, me := c.e.shm, c.e.rank
	peer := 1 - me
	n := len(own)
	h := n / 2 &^ 63
	id := roundID(c.calls, 0)
	if me != root {
		if err := c.publishBuf(0, own, &pin); err != nil {
			return err
		}
		a, err := c.shmGet(root, 0, 16)
		if err != nil {
			return err
		}
		src, to := binary.LittleEndian.Uint64(a), binary.LittleEndian.Uint64(a[8:])
		piece := min(n-h, reduceReadPiece)
		tmp := c.get(piece)
		var failed error
		for off := h; off < n && failed == nil; off += piece {
			k := min(piece, n-off)
			if err := s.pr.ReadPeer(root, src+uint64(off), tmp[:k]); err != nil {
				failed = c.fail(root, err)
				break
			}
			c.kern.Combine(tmp[:k], own[off:off+k])
			if err := s.pw.WritePeer(root, to+uint64(off), tmp[:k]); err != nil {
				failed = c.fail(root, err)
			}
		}
		mark := id
		if failed != nil {
			mark = ^id
		}
		s.publish(word(s.mem[me][s.slotOff(s.next^1):], 64), mark)
		c.shmDone(0)
		if err := c.waitDone(root, id); failed == nil {
			failed = err // the root has read its half of own
		}
		return failed
	}
	var a [16]byte
	pin.Pin(unsafe.SliceData(own))
	pin.Pin(unsafe.SliceData(dst))
	binary.LittleEndian.PutUint64(a[:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(own)))))
	binary.LittleEndian.PutUint64(a[8:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(dst)))))
	if err := c.shmPut(0, a[:]); err != nil {
		return err
	}
	addr, err := c.peerBuf(peer, 0)
	if err != nil {
		return err
	}
	var tmp []byte
	into := &own[0] != &dst[0]
	if !into {
		tmp = c.get(min(h, reduceReadPiece))
	}
	failed := c.readFold(peer, addr, own[:h], dst[:h], tmp, into)
	// The other rank's mark: it has read own's second half and written
	// dst's (or failed to).
	mark, werr := c.waitMark(peer, id)
	c.shmDone(0)
	switch {
	case failed != nil:
		return failed
	case werr != nil:
		return werr
	case mark != id:
		return c.fail(peer, fmt.Errorf("%w: rank %d did not fold its half of the reduce into this rank's buffer", ErrProtocol, peer))
	}
	return nil
}

// reduceReadPiece bounds what reduceShmRead's root reads at once before
// folding it: large enough that a read's fixed cost (about a µs) is a few
// percent of its copy, small enough that the piece stays in the cache for
// the fold.
const reduceReadPiece = 256 << 10

// reduceShmRead is the single-copy reduce (a PeerReader region): every
// rank but the root publishes own's address and returns once the root is
// done with it; the root reads each other rank's buffer straight out, in
// rank order, a piece at a time, and folds it. Without into, the root
// folds in place (own is dst, and rootFoldsInPlace holds): each piece
// goes into scratch and is folded into dst. With into (ReduceInto of two
// ranks, reducesReadInto), the other rank's piece goes straight into dst
// and own's piece is folded into it: x1 ⊕ x0, which is x0 ⊕ x1 bit for
// bit there, and no copy of own into dst first. One kernel copy of a
// rank's data where the slots take a copy in and one out. The root marks
// the round done even when a read fails, so that the others do not wait
// for it.
func (c *call) reduceShmRead(own, dst []byte, root int, into bool) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	me := c.e.rank
	if me != root {
		if err := c.publishBuf(0, own, &pin); err != nil {
			return err
		}
		c.shmDone(0)
		return c.waitDone(root, roundID(c.calls, 0))
	}
	var failed error
	if n := len(dst); n > 0 {
		var tmp []byte
		if !into {
			tmp = c.get(min(n, reduceReadPiece))
		}
		for q := 0; q < c.e.size && failed == nil; q++ {
			if q == me {
				continue
			}
			addr, err := c.peerBuf(q, 0)
			if err != nil {
				failed = err
				break
			}
			failed = c.readFold(q, addr, own, dst, tmp, into)
		}
	}
	c.shmDone(0)
	return failed
}

// readFold reads rank q's buffer at addr, len(dst) bytes, a
// reduceReadPiece at a time, and folds each piece into dst: with into,
// the piece goes straight into dst and own's piece is folded into it
// (x_q ⊕ own, for a pair whose fold commutes: pairCommutes); without,
// it goes into tmp (a piece long at least) and is folded into dst.
func (c *call) readFold(q int, addr uint64, own, dst, tmp []byte, into bool) error {
	for off := 0; off < len(dst); off += reduceReadPiece {
		k := min(reduceReadPiece, len(dst)-off)
		d, in := dst[off:off+k], dst[off:off+k]
		if !into {
			in = tmp[:k]
		}
		if err := c.e.shm.pr.ReadPeer(q, addr+uint64(off), in); err != nil {
			return c.fail(q, err)
		}
		if into {
			c.kern.Combine(d, own[off:off+k])
		} else {
			c.kern.Combine(d, in)
		}
	}
	return nil
}

// shmFold sets dst to the rank-order fold of every rank's chunk i. This
// rank's own chunk is read from its slot (where shmPut published it), so
// dst may be its input. Rank 0 folds the others into dst as it is (dst
// still holds its chunk), and so does rank 1 of two when the op commutes
// and Deterministic is off.
func (c *call) shmFold(i int, dst []byte) error {
	me, n := c.e.rank, len(dst)
	if c.foldsInPlace() {
		for p := 0; p < c.e.size; p++ {
			if p == me {
				continue
			}
			x, err := c.shmGet(p, i, n)
			if err != nil {
				return err
			}
			if n > 0 {
				c.kern.Combine(dst, x)
			}
		}
		c.shmDone(i)
		return nil
	}
	mine, err := c.shmOwn(i, n)
	if err != nil {
		return err
	}
	for p := 0; p < c.e.size; p++ {
		x := mine
		if p != me {
			if x, err = c.shmGet(p, i, n); err != nil {
				return err
			}
		}
		switch {
		case p == 0:
			ntcopy.Plain(dst, x)
		case n > 0:
			c.kern.Combine(dst, x)
		}
	}
	c.shmDone(i)
	return nil
}

// allreduceShmRS is the shared-memory allreduce for large vectors, where
// reading every rank's whole chunk (allreduceShm) would cost p times the
// vector per rank. A round cuts the chunk into p blocks, block r being
// rank r's to reduce:
//  1. every rank publishes its chunk except its own block (nobody else
//     reads that);
//  2. rank r folds block r of every chunk, in rank order, into its own
//     buf, copies the result into the hole its own block left in its slot
//     and publishes it with the slot's second round word;
//  3. every rank copies every other reduced block out.
//
// Per rank that is a copy in, a fold and two copies of 1/p of the chunk
// each, against p−1 folds and a copy of the whole chunk for allreduceShm.
// Rank 0, and rank 1 of two ranks when the op commutes and Deterministic
// is off, fold in place into buf (x1 ⊕ x0 is x0 ⊕ x1 then); the others
// fold into the slot and copy out. Each element is folded once, in rank
// order, so the bits are allreduceShm's.
func (c *call) allreduceShmRS(buf []byte) error { return c.foldBlocksShm(buf, -1) }

// shmOwn is this rank's published chunk i (in the slot it last wrote).
func (c *call) shmOwn(i, n int) ([]byte, error) {
	s := c.e.shm
	k := s.next ^ 1
	if s.used[k] != roundID(c.calls, i) {
		return nil, fmt.Errorf("%w: this rank's chunk %d is not in its slot", ErrProtocol, i)
	}
	return dataOf(s.mem[c.e.rank][s.slotOff(k):], n), nil
}

// bcastShm: root publishes each chunk; the others copy it out.
//
// Large vectors go in pieces of an eighth (at least Model.ShmPieceMin, at
// most a slot), so that the readers copy one piece out while the root
// copies the next one in: with two slots the root runs one piece ahead.
// Smaller pieces cost more hand-offs than they overlap (and when the
// ranks outnumber the CPUs, pieces are whole slots: see pieces).
func (c *call) bcastShm(buf []byte, root int) error {
	per := c.pieces(len(buf), c.e.model.ShmPieceMin)
	if len(buf) <= per {
		c.shmLast = true // one round, its body called straight (see shmChunksOf)
		return c.roundOver(c.bcastChunk(0, buf, root))
	}
	return c.shmChunksOf(len(buf), per, func(i, off, n int) error {
		return c.bcastChunk(i, buf[off:off+n], root)
	})
}

// bcastChunk is bcastShm's round i: chunk, its part of buf.
func (c *call) bcastChunk(i int, chunk []byte, root int) error {
	if c.e.rank == root {
		if err := c.shmPut(i, chunk); err != nil {
			return err
		}
	} else {
		x, err := c.shmGet(root, i, len(chunk))
		if err != nil {
			return err
		}
		ntcopy.Plain(chunk, x)
	}
	c.shmDone(i)
	return nil
}

// barrierShm: every rank publishes an empty chunk and waits for all others'.
func (c *call) barrierShm() error {
	if err := c.shmPut(0, nil); err != nil {
		return err
	}
	for p := 0; p < c.e.size; p++ {
		if p == c.e.rank {
			continue
		}
		if _, err := c.shmGet(p, 0, 0); err != nil {
			return err
		}
	}
	c.shmDoneAll()
	return nil
}

// The single-copy form (with a PeerReader). A rank publishes the address
// of its own buffer as its chunk (8 bytes in the slot's first line), the
// others read what they need straight out of that buffer with ReadPeer
// (process_vm_readv: one copy by the kernel, no staging through the
// slots), and the owner keeps the buffer unchanged, and pinned, until
// every reader's done word says it has finished.

// publishBuf publishes buf's address as this rank's chunk i; the caller
// keeps buf pinned (pin) until waitReaders returns.
func (c *call) publishBuf(i int, buf []byte, pin *runtime.Pinner) error {
	var a [8]byte
	if len(buf) > 0 {
		pin.Pin(unsafe.SliceData(buf))
		binary.LittleEndian.PutUint64(a[:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(buf)))))
	}
	return c.shmPut(i, a[:])
}

// peerBuf waits for rank's published buffer address (chunk i).
func (c *call) peerBuf(rank, i int) (uint64, error) {
	a, err := c.shmGet(rank, i, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(a), nil
}

// waitReaders waits until every other rank has marked chunk i done.
func (c *call) waitReaders(i int) error {
	id := roundID(c.calls, i)
	for p := range c.e.shm.mem {
		if p == c.e.rank {
			continue
		}
		if err := c.waitDone(p, id); err != nil {
			return err
		}
	}
	return nil
}

// bcastShmRead: the root publishes its buffer; every other rank reads it
// whole; the root returns once all have.
func (c *call) bcastShmRead(buf []byte, root int) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	if c.e.rank == root {
		if err := c.publishBuf(0, buf, &pin); err != nil {
			return err
		}
		c.shmDone(0)
		return c.waitReaders(0)
	}
	addr, err := c.peerBuf(root, 0)
	if err != nil {
		return err
	}
	if err := c.e.shm.pr.ReadPeer(root, addr, buf); err != nil {
		return c.fail(root, err)
	}
	c.shmDone(0)
	return nil
}

// waitMark waits for the mark peer stores in its round-0 slot's second
// round word after writing into this rank's memory (bcastShmSplit,
// reduceShmSplit): id, or ^id where its write failed. A peer that
// finished the call without a mark failed before it could write (the
// mark is stored before done): the mark read then is neither.
func (c *call) waitMark(peer int, id uint64) (uint64, error) {
	slot, err := c.shmSlot(peer, 0, 8)
	if err != nil {
		return 0, err
	}
	w, done := word(slot, 64), word(c.e.shm.mem[peer], 0)
	var mark uint64
	err = c.shmWait(peer, func() bool {
		if mark = atomic.LoadUint64(w); mark == id || mark == ^id {
			return true
		}
		if atomic.LoadUint64(done) >= roundID(c.calls, shmAllDone) {
			mark = atomic.LoadUint64(w) // load it again: stored before done
			return true
		}
		return false
	})
	return mark, err
}

// bcastShmSplit is the two-rank bcast with single-copy reads and writes:
// both ranks publish their buffer's address; the reader reads the first
// half of the root's buffer while the root writes the second half into
// the reader's, so both cores copy. The root then stores the round id
// into its slot's second round word (its complement if the write failed),
// and each rank returns once the other is done with its buffer.
func (c *call) bcastShmSplit(buf []byte, root int) error {
	var pin runtime.Pinner
	defer pin.Unpin()
	s, me := c.e.shm, c.e.rank
	peer := 1 - me
	if err := c.publishBuf(0, buf, &pin); err != nil {
		return err
	}
	addr, err := c.peerBuf(peer, 0)
	if err != nil {
		return err
	}
	h := len(buf) / 2 &^ 63
	id := roundID(c.calls, 0)
	if me == root {
		werr := s.pw.WritePeer(peer, addr+uint64(h), buf[h:])
		mark := id
		if werr != nil {
			mark = ^id
		}
		s.publish(word(s.mem[me][s.slotOff(s.next^1):], 64), mark)
		c.shmDone(0)
		if werr != nil {
			return c.fail(peer, werr)
		}
		return c.waitDone(peer, id) // the reader has read its half
	}
	rerr := s.pr.ReadPeer(root, addr, buf[:h])
	c.shmDone(0)
	if rerr != nil {
		return c.fail(root, rerr)
	}
	mark, err := c.waitMark(root, id)
	if err != nil {
		return err
	}
	if mark != id {
		return c.fail(root, fmt.Errorf("%w: rank %d did not write its half of the bcast into this rank's buffer", ErrProtocol, root))
	}
	return nil
}
