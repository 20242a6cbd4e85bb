package p2p

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/lightmu"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

// Wildcards and limits of the matching envelope.
const (
	AnySource = -1            // Recv / Probe: a message from any rank
	AnyTag    = -1            // Recv / Probe: a message with any tag
	MaxTag    = math.MaxInt32 // user tags are 0..MaxTag
)

// Context ids at and above FirstReservedContext belong to this package
// (window set-up); Channel refuses them.
const FirstReservedContext uint32 = 0xffff0000

const ctxWindow = FirstReservedContext // window key exchange

// Endpoint is one rank's end of the point-to-point network: a queue pair to
// every other rank, the matching engine and the progress engine. Its own
// methods (Send, Recv, ...) use matching context 0; Channel gives the same
// methods on other contexts.
//
// Concurrency: every method may be called from many goroutines at once.
// Close may be called once all other calls have returned or concurrently
// with them (they then fail with ErrClosed).
type Endpoint struct {
	ch0 *Channel // matching context 0, the endpoint's own methods

	rank, size int
	opts       Options
	log        *slog.Logger

	devs     []*device
	provider []verbs.Provider // per rank
	peers    []*peer          // peers[rank]; nil for this rank

	// mu guards the endpoint's state. Its Unlock is a plain store
	// (lightmu): a message on the shm fast path takes it two or three
	// times, and sync.Mutex's Unlock, a locked instruction, also waits
	// each time for every store before it to leave the store buffer.
	mu        lightmu.Mutex
	m         matcher
	spare     spareBufs // copies of unexpected eager payloads, for reuse
	nextID    uint64
	rndvSends map[uint64]*Request   // RTS sent, waiting for FIN
	splits    map[splitKey]*Request // split rendezvous receives waiting for WDONE
	pipes     map[splitKey]*pipeIn  // pipelined messages whose fragments are arriving
	reads     map[uint32]*Request   // READ posted, waiting for completion
	writes    map[uint32]*Request   // window writes waiting for completion
	// steerParked: failed pipelined receives the provider may still be
	// reading into (see Steering in pipe.go).
	steerParked []steerParked
	// nwrites is len(writes), and down is set once the endpoint fails or
	// closes, for IwriteNow's copy without ep.mu (see Window.fast).
	nwrites  atomic.Int32
	down     atomic.Bool
	notes    []Notification
	arrivals []chan struct{} // Probe / WaitNotify waiters, woken on arrival
	wakers   []*waker        // spare wakers of blocking waits (waitCQ)
	dirty    []*peer         // peers whose queues or credits changed
	// While batching (handlePolledLocked, flushDirtyLocked), the posts to
	// a peer whose QP can hold them (verbs.PostBatcher) wait until the
	// batch ends, so that the frames leave together.
	batching bool
	heldQPs  []*peer
	// Posts held past the call that made them (deferPostsLocked): how
	// many, deferOn set while there are any (read without ep.mu by the
	// pollers, which release them), and the timer that releases them if
	// no poll comes.
	deferred    int
	deferring   bool // a deferred post is under way (holdPosts leaves the others held)
	deferOn     atomic.Bool
	deferTimer  *time.Timer
	noPollBatch bool          // tests: handlePolledLocked does not batch, flushDirtyLocked still does (see SetPollBatching)
	failErr     error         // set once: *PeerLostError or closedErr
	failed      chan struct{} // closed when failErr is set
	closing     bool
	policy      shmsync.Policy // how a blocking call polls before it blocks (waitPolicy)
	localRanks  int            // ranks of this endpoint on this host, this one included
	kernelRanks int            // ranks of this endpoint on this kernel (any network namespace), this one included
	kernelCPUs  int            // CPUs the ranks on this kernel may run on together (0: unknown)
	crowding    float64        // ranks per CPU on the job's most crowded host (Crowding)
	windowSeq   uint32
	winSlots    map[uint32]*Window // live windows by signal slot (window_signal.go)
	opSeq       uint32
	selfStats   PeerStats
	freeReqs    []*Request // recycled requests (putReq)
	unclean     *Request   // a recycled request not cleared yet (putReqLaterLocked)
	freeColds   []*reqCold // their cold parts, recycled apart (coldLocked)

	// The progress engine.
	// pollMu stays a sync.Mutex: as a lightmu.Mutex (a plain store at
	// each poll's end) the 2-rank latency over shm at 64-512 B read
	// 1.03-1.11 of this, with ep.mu's gain kept either way.
	pollMu    sync.Mutex
	unsettled bool // a peer's linkFail waits for settleLinksLocked; under pollMu
	// Polls started while the caller held ep.mu (progressHeldLocked),
	// counted under pollMu with a plain store rather than an atomic add on
	// polling, which the background goroutine looks at beside it.
	heldPolls uint32
	wcs       []verbs.WC // guarded by pollMu
	// Goroutines polling now (the low 32 bits) and polls started (the high
	// 32, wrapping), so the background goroutine sees activity: one word,
	// so that entering a poll is one atomic add rather than two.
	polling atomic.Uint64
	// Peers with a batch of consumed receive buffers to post again when
	// the endpoint is idle (see repostLocked); due is set while the list
	// is not empty, for lock-free looks from the poll loops.
	duePeers []*peer // guarded by mu
	due      atomic.Bool
	// The CQs whose completions come from the provider's own goroutines
	// (verbs.Arrivals), when the policy keeps the thread while it polls
	// (crowded, several devices): a poll that finds nothing takes what has
	// arrived for them itself, and blocks when only those goroutines can
	// take it, so that they run (see poll). Set by New.
	incoming []verbs.Arrivals

	// The rings (ring.go): the sleepers word of the window holding the
	// ones peers write to this rank; nil without rings. Set under pollMu
	// and mu.
	sleepers *uint32
	// ringFence: this rank fences heavily before it blocks, and says so
	// in its window, so that Asymmetric senders publish lightly.
	ringFence bool
	stop      context.CancelFunc
	bgCtx     context.Context
	wg        sync.WaitGroup

	// Goroutines blocked in a CQ (blockIn) while sleepers was nil, and of
	// those, how many setSleepers counted in the word. Under pollMu.
	blockedUncounted, blockedAdopted int
}

type device struct {
	provider string       // the provider's name, to show
	traits   verbs.Traits // what policy is made from
	dev      verbs.Device
	pd       verbs.PD
	cq       verbs.CQ
	caps     verbs.Caps
	cache    *regCache
	wakeCh   chan struct{}
	crowded  bool // the host's ranks outnumber its CPUs (Endpoint.Crowded)
}

// New creates this rank's endpoint: it opens the device, creates a queue
// pair per peer, exchanges their addresses through rv (keys
// "p2p/<Name>/qp/<from>/<to>"), connects them and waits (rv.Fence) until
// every rank has done the same. It is a collective: every rank of rv calls
// it with the same Name.
func New(ctx context.Context, rv Rendezvous, opts Options) (*Endpoint, error) {
	opts.setDefaults()
	rank, size := rv.Rank(), rv.Size()
	fail := func(err error) (*Endpoint, error) {
		return nil, &Error{Op: "New", Rank: rank, Peer: NoPeer, Tag: NoTag, Err: err}
	}
	if size < 1 || rank < 0 || rank >= size {
		return fail(fmt.Errorf("%w: rank %d of %d", ErrInvalidRank, rank, size))
	}
	if opts.EagerLimit > 1<<20 {
		return fail(fmt.Errorf("%w: EagerLimit %d exceeds 1 MiB", ErrInvalidArgument, opts.EagerLimit))
	}
	if r := opts.RingLines; r > 0 && (r&(r-1) != 0 || r < ringMinLines || r > 1<<16) {
		return fail(fmt.Errorf("%w: RingLines %d is not a power of two from %d to 65536", ErrInvalidArgument, r, ringMinLines))
	}
	if opts.RingAhead > maxRingAhead {
		return fail(fmt.Errorf("%w: RingAhead %d exceeds %d", ErrInvalidArgument, opts.RingAhead, maxRingAhead))
	}
	if opts.EagerSlots > 4096 || opts.EagerSlotsMax > 4096 {
		return fail(fmt.Errorf("%w: EagerSlots %d or EagerSlotsMax %d exceeds 4096", ErrInvalidArgument, opts.EagerSlots, opts.EagerSlotsMax))
	}
	ep := &Endpoint{
		rank: rank, size: size, opts: opts, log: opts.Logger,
		peers:     make([]*peer, size),
		rndvSends: map[uint64]*Request{},
		splits:    map[splitKey]*Request{},
		pipes:     map[splitKey]*pipeIn{},
		reads:     map[uint32]*Request{},
		writes:    map[uint32]*Request{},
		failed:    make(chan struct{}),
	}
	if ep.log == nil {
		ep.log = slog.New(slog.DiscardHandler)
	}
	ep.ch0 = &Channel{ep: ep, id: 0}
	ep.selfStats.Rank = rank
	ep.selfStats.Transport = "self"
	if err := ep.setup(ctx, rv); err != nil {
		ep.teardown()
		return fail(err)
	}
	ep.policy = waitPolicy(opts, ep.devs, ep.kernelRanks, ep.cpus())
	if ep.policy.OSYield {
		for _, d := range ep.devs {
			if a, ok := d.cq.(verbs.Arrivals); ok {
				ep.incoming = append(ep.incoming, a)
			}
		}
	}
	ep.bgCtx, ep.stop = context.WithCancel(context.Background())
	for _, d := range ep.devs {
		ep.wg.Add(1)
		go ep.background(d)
	}
	if opts.LivenessTimeout > 0 && size > 1 {
		ep.wg.Add(1)
		go ep.liveness()
	}
	if err := ep.setupRings(ctx); err != nil {
		_ = ep.Close()
		return fail(fmt.Errorf("setting up the rings: %w", err))
	}
	return ep, nil
}

func (ep *Endpoint) device(ctx context.Context, p verbs.Provider) (*device, error) {
	for _, d := range ep.devs {
		if d.provider == p.Name() {
			return d, nil
		}
	}
	t := p.Traits()
	o := ep.deviceOptions(p)
	if o.PollSpin == 0 {
		// Waiters that read their connections themselves poll them before
		// they sleep; where the ranks here outnumber the CPUs, they give the
		// core away between polls, as the reply's sender may need it, and
		// go on doing so for crowdedYield, as a waiter over several devices
		// does (see waitPolicy): there the sender of a reply is often a rank
		// that shares this core and computes first, so a short poll ran
		// out and every step paid a sleep and a wake-up.
		o.PollSpin = t.PollSpin
		o.PollYield = ep.Crowded()
		if o.PollYield && o.PollSpin > 0 {
			o.PollSpin = max(o.PollSpin, crowdedYield)
		}
	}
	dev, err := ep.openDevice(ctx, p, o)
	if err != nil {
		return nil, err
	}
	d := &device{provider: p.Name(), traits: t, dev: dev, caps: dev.Caps(), wakeCh: make(chan struct{}, 1), crowded: ep.Crowded()}
	ep.devs = append(ep.devs, d)
	if d.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	slots := ep.eagerSlotsMax(t)
	depth := (ep.size - 1) * (2*slots + sqDepth(slots) + 8)
	if depth < 64 {
		depth = 64
	}
	if d.cq, err = dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	d.cache = newRegCache(d.pd, verbs.AccessLocalWrite|verbs.AccessRemoteRead, regCacheEntries(ep.opts.RegCacheEntries, t), ep.opts.RegCacheBytes)
	return d, nil
}

// defaultRegCache is the registration cache's size over a provider that
// gives no hint (verbs.Traits.RegCache).
const defaultRegCache = 64

// regCacheEntries is the registration cache's size over a provider of
// traits t: Options.RegCacheEntries if set, else the provider's hint,
// else defaultRegCache.
func regCacheEntries(set int, t verbs.Traits) int {
	switch {
	case set > 0:
		return set
	case t.RegCache > 0:
		return t.RegCache
	}
	return defaultRegCache
}

func (ep *Endpoint) setup(ctx context.Context, rv Rendezvous) error {
	if err := ep.chooseProviders(ctx, rv); err != nil {
		return err
	}
	prefix := "p2p/" + ep.opts.Name + "/qp/"
	for r := 0; r < ep.size; r++ {
		if r == ep.rank {
			continue
		}
		prov := ep.provider[r]
		d, err := ep.device(ctx, prov)
		if err != nil {
			return fmt.Errorf("opening %s device for rank %d: %w", prov.Name(), r, err)
		}
		p, err := ep.newPeer(d, r)
		if err != nil {
			return fmt.Errorf("queue pair for rank %d: %w", r, err)
		}
		ep.peers[r] = p
		if err := rv.Put(ctx, fmt.Sprintf("%s%d/%d", prefix, ep.rank, r), p.qp.Address()); err != nil {
			return err
		}
	}
	if len(ep.devs) == 0 {
		// A job of one rank still needs a device for windows.
		prov := ep.provider[ep.rank]
		if _, err := ep.device(ctx, prov); err != nil {
			return fmt.Errorf("opening %s device: %w", prov.Name(), err)
		}
	}
	// Publish every address before anyone reads: a PMI key-value space makes
	// puts visible only at a fence.
	if err := rv.Fence(ctx); err != nil {
		return err
	}
	for r, p := range ep.peers {
		if p == nil {
			continue
		}
		addr, err := rv.Get(ctx, fmt.Sprintf("%s%d/%d", prefix, r, ep.rank))
		if err != nil {
			return err
		}
		co := ep.connectOptions(p.dev)
		if err := verbs.Connect(p.qp, addr, co); err != nil {
			return fmt.Errorf("connecting to rank %d: %w", r, err)
		}
	}
	// Nobody sends before everybody's queue pairs are connected and their
	// receive buffers posted.
	return rv.Fence(ctx)
}

// teardown releases everything; the background goroutines must be stopped.
func (ep *Endpoint) teardown() {
	// No poll may look at the rings once their memory is gone.
	ep.pollMu.Lock()
	ep.mu.Lock()
	ep.sleepers = nil
	for _, p := range ep.peers {
		if p != nil {
			if p.rout != nil {
				p.rout.settle() // a sender may still be writing into it
			}
			p.rin, p.rout = nil, nil
		}
	}
	ep.mu.Unlock()
	ep.pollMu.Unlock()
	for _, p := range ep.peers {
		if p != nil {
			p.close()
		}
	}
	for _, d := range ep.devs {
		if d.cache != nil {
			d.cache.close()
		}
		if d.cq != nil {
			_ = d.cq.Close()
		}
		if d.pd != nil {
			_ = d.pd.Close()
		}
		_ = d.dev.Close()
	}
}

// Rank is this endpoint's rank; Size the number of ranks.
func (ep *Endpoint) Rank() int { return ep.rank }
func (ep *Endpoint) Size() int { return ep.size }

// Transport names the provider carrying traffic to peer ("self" for this rank).
func (ep *Endpoint) Transport(peer int) string {
	if peer < 0 || peer >= ep.size {
		return ""
	}
	if p := ep.peers[peer]; p != nil {
		return p.dev.provider
	}
	return "self"
}

// EagerLimit is the largest message sent to peer with the eager protocol
// (messages to this rank itself are always copied).
func (ep *Endpoint) EagerLimit(peer int) int {
	if peer < 0 || peer >= ep.size || ep.peers[peer] == nil {
		return 0
	}
	return ep.peers[peer].eager
}

// FoldLimit is the largest message from peer a fold receive (IrecvFold)
// folds as it arrives: what peer sends eagerly or as pipelined fragments
// (its pipeline limit, or its eager limit where that is larger). A larger
// message comes by rendezvous, placed whole into memory of the endpoint's
// and folded once complete, which a caller with scratch memory of its own
// does as cheaply. 0 for this rank or a rank out of range.
func (ep *Endpoint) FoldLimit(peer int) int {
	if peer < 0 || peer >= ep.size || ep.peers[peer] == nil {
		return 0
	}
	return ep.peers[peer].pipedMax()
}

// Traits returns what the provider carrying traffic to peer says of itself
// (verbs.Traits: whether it shares memory, its size and wait hints), for
// layers that choose their own algorithms by it; the zero Traits for this
// rank or a rank out of range.
func (ep *Endpoint) Traits(peer int) verbs.Traits {
	if peer < 0 || peer >= ep.size || ep.peers[peer] == nil {
		return verbs.Traits{}
	}
	return ep.peers[peer].dev.traits
}

// eagerSlotsMax is how many receive buffers a peer over a provider with
// traits t may grow to: Options.EagerSlotsMax or its default (growth by
// t.SlotGrowth, up to 4096), and at least EagerSlots.
func (ep *Endpoint) eagerSlotsMax(t verbs.Traits) int {
	n := ep.opts.EagerSlots
	m := ep.opts.EagerSlotsMax
	if m <= 0 && t.SlotGrowth > 1 {
		// Growth only for peers that run out (an RTS takes a buffer, and
		// the receiver's FINs take the sender's).
		m = min(t.SlotGrowth*n, 4096)
	}
	return max(m, n)
}

// eagerDefault is Options.EagerLimit's default over a provider with traits
// t: its hint, else 32 KiB.
func eagerDefault(t verbs.Traits) int {
	if t.EagerSize > 0 {
		return t.EagerSize
	}
	return 32 << 10
}

// eagerFor is the provider's part of Options.EagerLimit's default over
// device d (the default is this and eagerHeadroom): the provider's size
// (eagerDefault), halved over shared memory, down to minSharedEager, while
// the eager buffers this rank posts for the host's other ranks would pass
// eagerMemBudget (as the rings' depth shrinks with the rank count), and
// over a network, down to minNetEager, while those for all the job's
// other ranks would pass netEagerBudget. Both ends of a pair agree: they
// count the same ranks.
func (ep *Endpoint) eagerFor(d *device) int {
	e := eagerDefault(d.traits)
	if !d.traits.SharesMemory {
		return halvedWithin(e, minNetEager, ep.size-1, ep.opts.EagerSlots, netEagerBudget)
	}
	return halvedWithin(e, minSharedEager, ep.localRanks-1, ep.opts.EagerSlots, eagerMemBudget)
}

// halvedWithin halves the eager limit e, down to least, while peers ×
// slots buffers of that size would pass budget bytes.
func halvedWithin(e, least, peers, slots, budget int) int {
	for e > least && peers*slots*e > budget {
		e /= 2
	}
	return e
}

// eagerHeadroom is what the default eager limit allows beyond the
// provider's size: room for the header of a layer above (a collective's
// message is 32 bytes of header before its payload), so that a payload of
// the provider's size itself, a power of two as most are, travels in one
// eager message with its header instead of a header message and then the
// payload. Over tcp that second message is a second write and read: a
// 2-host broadcast of 64 KiB took 24.5 us as two messages, 15 as one.
// Pipelined fragments still carry the provider's size (peer.frag), so
// that a message of k times it still takes k of them.
const eagerHeadroom = 64

const (
	// eagerMemBudget bounds the eager buffers a rank posts for the other
	// ranks of its host by default: with 32 buffers a peer, 32 KiB ones
	// up to 9 ranks on a host.
	eagerMemBudget = 8 << 20
	// minSharedEager is the smallest default eager limit over shared memory
	// (the 16 KiB that was the default at any rank count before).
	minSharedEager = 16 << 10
	// netEagerBudget bounds the eager buffers a rank posts for the job's
	// other ranks over a network by default, reserved up front and touched
	// only as messages land in them (a matched message's body is steered
	// past them): tcp's 256 KiB ones up to 33 ranks with 32 buffers a
	// peer, 128 KiB up to 65.
	netEagerBudget = 256 << 20
	// minNetEager is the smallest default eager limit a network's budget
	// halves to (tcp's default before it was 256 KiB).
	minNetEager = 64 << 10
)

// pipelineDefault is Options.PipelineLimit's default over a provider with
// traits t: its hint, else no pipelining.
func pipelineDefault(t verbs.Traits) int { return max(t.PipelineSize, 0) }

// crowdedShmPipe is the PipelineLimit default over shared memory where the
// host's ranks outnumber its CPUs. A rendezvous there costs the sender a
// turn of the receiver (to read) and then one of its own (the FIN), each a
// wait for the scheduler; fragments through the eager slots need none.
// At 4 hosts of 2 ranks on one CPU each, the hierarchical alltoall of 4 to
// 32 KiB blocks (32 to 256 KiB messages to and from the host's leader)
// took 0.64-0.79 of the time (median per size over four osu-compare runs
// of 9-11 rounds, load 10-18; single rounds range 0.2-7).
const crowdedShmPipe = 256 << 10

// pipelineFor is pipelineDefault for device d, which may be crowded: over
// shared memory there it is at least crowdedShmPipe.
func pipelineFor(d *device) int {
	p := pipelineDefault(d.traits)
	if d.crowded && d.traits.SharesMemory {
		p = max(p, crowdedShmPipe)
	}
	return p
}

// Err returns the error the endpoint failed with (a *PeerLostError, or
// ErrClosed after Close), or nil while it is healthy.
func (ep *Endpoint) Err() error {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.failErr
}

// Failed is closed when the endpoint fails (Err is then non-nil).
func (ep *Endpoint) Failed() <-chan struct{} { return ep.failed }

// FailFlag is set before Failed is closed, and as Close begins: a look
// at it is one load, where a receive from Failed is a call into the
// runtime. The caller only reads it.
func (ep *Endpoint) FailFlag() *atomic.Bool { return &ep.down }

var errEndpointClosed = fmt.Errorf("endpoint %w", ErrClosed)

// Close tells every peer that this rank is leaving on purpose (so they do
// not take it for a lost peer), waits up to Options.CloseTimeout for
// messages in flight (a peer still reading a rendezvous buffer of ours),
// then fails whatever is pending with ErrClosed and releases the device.
func (ep *Endpoint) Close() error {
	ep.mu.Lock()
	if ep.closing {
		ep.mu.Unlock()
		return nil
	}
	ep.closing = true
	ep.down.Store(true)
	if ep.deferred > 0 {
		// Deferred writes leave now (and their timer stops): on a failed
		// endpoint no poll below would release them.
		ep.releasePostsLocked()
	}
	healthy := ep.failErr == nil
	if healthy {
		for _, p := range ep.peers {
			if p != nil && !p.departed {
				p.sendUncredited(ep, &header{kind: kBye, aux: uint32(ep.rank)})
			}
		}
	}
	ep.mu.Unlock()
	if healthy {
		// Let what we sent drain: RTS buffers being read, frames not yet
		// completed, sends waiting for credits.
		deadline := time.Now().Add(ep.opts.CloseTimeout)
		for time.Now().Before(deadline) {
			ep.progress()
			ep.mu.Lock()
			busy := len(ep.rndvSends) > 0 || len(ep.reads) > 0 || len(ep.writes) > 0 || len(ep.splits) > 0
			for _, p := range ep.peers {
				if p != nil && !p.departed && !p.broken && (p.sqOut > 0 || len(p.queue) > 0) {
					busy = true
				}
			}
			ep.mu.Unlock()
			if !busy {
				break
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	ep.stop()
	ep.wg.Wait()
	ep.mu.Lock()
	ep.failLocked(errEndpointClosed)
	ep.mu.Unlock()
	ep.teardown()
	// Requests that were waiting for a completion that will now never come
	// (READs in flight) are failed last, once the queue pairs are gone and
	// nothing can write into their buffers any more.
	ep.mu.Lock()
	for id, r := range ep.reads {
		delete(ep.reads, id)
		ep.completeLocked(r, ep.opErr(r, errEndpointClosed))
	}
	ep.unparkLocked(true)
	for id, r := range ep.writes {
		ep.dropWriteLocked(id)
		ep.completeLocked(r, ep.opErr(r, errEndpointClosed))
	}
	for k, r := range ep.splits {
		delete(ep.splits, k)
		ep.completeLocked(r, ep.opErr(r, errEndpointClosed))
	}
	ep.mu.Unlock()
	return nil
}

// opErr wraps cause for request r.
func (ep *Endpoint) opErr(r *Request, cause error) error {
	var pe *Error
	if errors.As(cause, &pe) {
		return cause
	}
	return &Error{Op: r.op.String(), Rank: ep.rank, Peer: r.peer, Tag: int(r.pattern.tag), Err: cause}
}

// failLocked makes err the endpoint's failure (the first one wins) and
// fails every pending request with it, except those whose buffers a queue
// pair may still be writing (they fail when that completion arrives).
func (ep *Endpoint) failLocked(err error) {
	if ep.failErr == nil {
		ep.failErr = err
		ep.down.Store(true)
		close(ep.failed)
		if !errors.Is(err, ErrClosed) {
			ep.log.Warn("p2p: endpoint failed", "rank", ep.rank, "err", err)
		}
	}
	err = ep.failErr
	for _, r := range ep.m.posted.items() {
		ep.completeLocked(r, ep.opErr(r, err))
	}
	ep.m.posted.reset()
	ep.m.unexp.reset()
	for _, p := range ep.peers {
		if p == nil {
			continue
		}
		for _, it := range p.queue {
			if it.req != nil {
				ep.dropQueuedLocked(it)
				ep.completeLocked(it.req, ep.opErr(it.req, err))
			}
		}
		clear(p.queue)
		p.queue = p.queue[:0]
	}
	for k, pi := range ep.pipes {
		delete(ep.pipes, k)
		pi.fail(ep, err)
	}
	for _, r := range ep.rndvSends {
		ep.dropRndvSendLocked(r)
		ep.completeLocked(r, ep.opErr(r, err))
	}
	ep.wakeArrivalsLocked()
}

// checkLocked returns the error a new operation fails with, if any.
func (ep *Endpoint) checkLocked() error {
	if ep.closing && ep.failErr == nil {
		return errEndpointClosed
	}
	return ep.failErr
}

func (ep *Endpoint) wakeArrivalsLocked() {
	for _, ch := range ep.arrivals {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	ep.arrivals = ep.arrivals[:0]
}

// Revoke fails the endpoint on every rank as if lost had died: use it when
// a layer above learns of a failure by its own means. lost may be this rank.
func (ep *Endpoint) Revoke(lost int, cause error) {
	ep.mu.Lock()
	defer ep.mu.Unlock()
	ep.loseLocked(lost, cause)
}

// loseLocked declares rank lost: fail locally, then tell every other rank.
func (ep *Endpoint) loseLocked(lost int, cause error) {
	if ep.failErr != nil {
		return
	}
	ep.failLocked(&PeerLostError{Rank: lost, Reporter: ep.rank, Cause: cause})
	ep.broadcastRevokeLocked(lost)
}

// broadcastRevokeLocked tells every peer, the lost one included: the link
// to it may be fine (the failure may have been a local post error), and if
// it is not the frame is simply lost.
func (ep *Endpoint) broadcastRevokeLocked(lost int) {
	for _, p := range ep.peers {
		if p != nil && !p.departed && (!p.broken || p.rank == lost) {
			p.sendUncredited(ep, &header{kind: kRevoke, size: uint64(lost), aux: uint32(ep.rank)})
		}
	}
}

// connectOptions are the queue pair attributes: the caller's, or verbs'
// defaults with as many outstanding READs as the device allows (up to 16)
// and a 1 s ACK timeout retried 7 times. The software providers' ACK timer
// runs on a busy machine's scheduler, and verbs' default half second
// mistakes a stalled peer (a GC pause, -race) for a dead one; a dead peer
// is still noticed within seconds, and sooner by a broken connection.
func (ep *Endpoint) connectOptions(d *device) verbs.ConnectOptions {
	if ep.opts.Connect != nil {
		return *ep.opts.Connect
	}
	co := verbs.DefaultConnectOptions()
	rd := min(d.caps.MaxRdAtom, 16)
	co.MaxQPRdAtomic, co.MaxDestRdAtomic = uint8(rd), uint8(rd)
	co.Timeout = 18
	return co
}

// Default spin and yield for a waiter over several devices (see waitPolicy).
const (
	mixedSpin  = 20 * time.Microsecond
	mixedYield = 200 * time.Microsecond
	// crowdedYield is how long a waiter over several devices yields where
	// the ranks outnumber the CPUs: a yield gives the core to whoever needs
	// it, so it costs little, while a sleep costs a wake-up on both sides
	// (a datagram or futex to wake it, the scheduler's latency). Waits on
	// a host crowded further (four ranks to a core) outlast 2 ms often,
	// and the sleeps then cost a 4x2 alltoall or allgather up to 3x; Open
	// MPI's oversubscribed ranks yield without end.
	crowdedYield = 20 * time.Millisecond
	// contendedPoll is Options.Contended's default where every rank has a
	// CPU (see shmsync.ContendedPoll).
	contendedPoll = shmsync.ContendedPoll
)

// cpus is the number of CPUs the ranks on this kernel may run on
// together (kernelCPUs), or every CPU of the machine when that is unknown.
func (ep *Endpoint) cpus() int {
	if ep.kernelCPUs > 0 {
		return ep.kernelCPUs
	}
	return runtime.NumCPU()
}

// Crowded reports whether the ranks of this endpoint on this machine's
// kernel, in any network namespace, outnumber the CPUs they may run on
// together (the union of their affinity masks): then a rank that waits for
// another holds a CPU that one needs, and the waits default to a short
// spin. Containers or namespaces of one machine are hosts of their own to
// the transports but share its CPUs.
func (ep *Endpoint) Crowded() bool { return ep.kernelRanks > ep.cpus() }

// Crowding reports the ranks per CPU on the job's most crowded host: for
// every host, its ranks over the CPUs of their affinity masks together,
// the largest of these, at least 1. Every rank computes it from the same
// host records, so every rank reports the same figure (a host whose ranks
// published no mask counts as not crowded: a rank cannot count another
// host's CPUs).
func (ep *Endpoint) Crowding() float64 { return max(ep.crowding, 1) }

// WaitPolicy reports the effective Options.Spin and Yield (the defaults
// resolved for this endpoint's transports and CPUs), for layers that wait
// on something other than requests (shared-memory flags) and should poll
// the same way.
func (ep *Endpoint) WaitPolicy() (spin, yield time.Duration) { return ep.policy.Spin, ep.policy.Yield }

// ContendedPoll reports the effective Options.Contended, for the same
// layers as WaitPolicy.
func (ep *Endpoint) ContendedPoll() time.Duration { return ep.policy.Contended }

// Every how many polls a blocking call looks at the clock and ctx, and
// every how many looks it yields within its spin too (every 256 polls).
// Reading the clock costs about 60 ns on this kind of VM, a sixth of an
// 8-byte message's software cost (BenchmarkOverhead), and a wait on the
// hot path usually ends within 16 polls.
const (
	pollCheckEvery  = 16
	pollYieldInSpin = 16
)

// waitPolicy resolves Options.Spin and Yield (see there) into the policy
// of a blocking call's polling phase (internal/shmsync); its sleep is the
// CQ's own Wait or the request's channel (Endpoint.wait). local is the
// number of ranks on this host (this one included), cpus the number of
// CPUs those ranks may run on together. With one device the defaults are
// its provider's wait hint; a waiter over several devices cannot sleep in
// one CQ's Wait, so it polls them all for mixedSpin and then yields for
// mixedYield, unless one of them makes its completions in its own
// goroutines (a hint of no spin), which a spinning waiter only starves.
// Where the ranks outnumber the CPUs, a waiter over several devices yields
// after every poll that finds nothing, to other processes (sched_yield:
// the sender may need this core) and to this one's goroutines, for
// crowdedYield; a spin there would only delay the sender, and a sleep
// costs a wake-up per message (tens of µs). What has arrived for the CQs
// whose provider's goroutines read the kernel (verbs.Arrivals) the poller
// takes itself, and it stops polling when only those goroutines can take
// it (see poll).
//
// The yields are runtime.Gosched, and come within the spin too (every
// pollYieldInSpin looks): the completion may have to come from a
// goroutine waiting for this P (another rank of this process with
// GOMAXPROCS=1; a provider's goroutine), and Gosched costs little when
// nothing else is runnable.
func waitPolicy(o Options, devs []*device, local, cpus int) shmsync.Policy {
	defSpin, defYield := time.Duration(0), time.Duration(0)
	crowded := local > cpus && o.Spin == 0 && o.Yield == 0
	switch {
	case crowded && (len(devs) > 1 || len(devs) == 1 && devs[0].traits.Wait.Spin > 0):
		// One device whose waiters poll yields here too, after its
		// SpinShared, rather than in its CQ's Wait: a block costs a ring
		// reader a heavy fence (membarrier(2): IPIs to every CPU under a
		// kernel-wide mutex) before the CQ's yields even start.
		var spin time.Duration
		if len(devs) == 1 {
			spin = devs[0].traits.Wait.SpinShared
		}
		return shmsync.Policy{Spin: spin, Yield: crowdedYield, Gosched: true, OSYield: true, CheckEvery: 1,
			Contended: pick(o.Contended, 0)}
	case len(devs) == 1:
		w := devs[0].traits.Wait
		defSpin, defYield = w.SpinShared, w.Yield
		if local <= cpus {
			defSpin = w.Spin
		}
	case len(devs) > 1:
		defSpin, defYield = mixedSpin, mixedYield
		for _, d := range devs {
			if d.traits.Wait.Spin <= 0 {
				defSpin, defYield = 0, 0
			}
		}
	}
	defContended := time.Duration(0)
	if local <= cpus {
		defContended = contendedPoll
	}
	return shmsync.Policy{Spin: pick(o.Spin, defSpin), Yield: pick(o.Yield, defYield),
		Gosched: true, CheckEvery: pollCheckEvery, YieldInSpin: pollYieldInSpin,
		Contended: pick(o.Contended, defContended)}
}

// pick is an Options duration: v, or def when v is zero, or none when v is
// negative.
func pick(v, def time.Duration) time.Duration {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return def
	}
	return v
}

// Link is the device's estimate of the one-way latency of a small message to
// peer and of the link's bandwidth in bytes per second (the collectives'
// cost model uses it). For this rank itself it reports zero latency and no
// bandwidth figure (0).
func (ep *Endpoint) Link(peer int) (latency time.Duration, bandwidth float64) {
	if peer < 0 || peer >= ep.size || ep.peers[peer] == nil {
		return 0, 0
	}
	c := ep.peers[peer].dev.caps
	return c.Latency, c.Bandwidth
}

// addWriteLocked records window operation r, numbered id, in ep.writes.
func (ep *Endpoint) addWriteLocked(id uint32, r *Request) {
	ep.writes[id] = r
	ep.nwrites.Add(1)
}

// dropWriteLocked removes window operation id from ep.writes.
func (ep *Endpoint) dropWriteLocked(id uint32) {
	if _, ok := ep.writes[id]; ok {
		delete(ep.writes, id)
		ep.nwrites.Add(-1)
	}
}

// dropQueuedLocked forgets a request whose item is being removed from a
// peer's queue unposted: nothing refers to it afterwards.
func (ep *Endpoint) dropQueuedLocked(it *outItem) {
	r := it.req
	switch {
	case it.read:
		delete(ep.reads, r.readID)
	case it.write:
		ep.dropWriteLocked(r.readID)
	case it.h.kind == kRTS:
		delete(ep.rndvSends, r.id)
	}
	if r.reg != nil {
		r.dev.cache.put(r.reg)
		r.reg = nil
	}
}
