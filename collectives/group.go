package collectives

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/shmsync"
)

// Group is what the collectives need from the layer below: a rank, a size
// and tagged byte messages to every peer. comm adapts the p2p layer to it;
// coltest provides an in-memory fake.
//
// Contract the algorithms rely on:
//   - Tags 0 ≤ tag ≤ MaxTag are the collectives' private tag space: they
//     never match messages of the user or of another Group.
//   - Messages from one sender to one receiver with the same tag are
//     matched in the order they were sent (non-overtaking).
//   - A receive buffer smaller than the message fails that receive with an
//     error (the message is consumed); Wait returns the received byte count.
//   - Isend's buffer is not modified and must not be modified by the caller
//     until Wait returns; Irecv's buffer belongs to the group until Wait
//     returns.
//   - Cancel ends a request that has not matched promptly (its Wait then
//     returns an error); one that already matched completes normally.
//     Requests are not tied to a context: the collectives cancel what they
//     abandon and wait for it before reusing its buffer. (A per-request
//     context would cost a registration on every message.)
//   - When a peer is lost, every pending and later request of every rank of
//     the group fails with an error naming the lost rank (the p2p layer's
//     communicator-wide failure rule); the collectives wrap that error.
//
// Isend and Irecv may be called from several goroutines at once (the
// mismatch watchers receive concurrently with a running collective).
type Group interface {
	Rank() int
	Size() int
	Isend(peer, tag int, buf []byte) (Request, error)
	Irecv(peer, tag int, buf []byte) (Request, error)
}

// MaxTag is the largest tag the collectives use.
const MaxTag = 1<<31 - 1

// Request is a pending Isend or Irecv. Wait returns the byte count sent or
// received. When Wait returns because its ctx ended, the request may still
// be in flight (an implementation may also cancel it, as p2p does), and
// Wait may be called again; the collectives then Cancel it and wait once
// more before reusing its buffer. Cancel does not wait and may be called
// from any goroutine, also after the request completed (it then does
// nothing).
type Request interface {
	Wait(ctx context.Context) (n int, err error)
	Cancel()
}

// PassiveWaiter is an optional Request capability: a wait that sleeps
// until other goroutines' progress completes the request, instead of
// polling for it. The Engine's mismatch watchers, whose receives stay
// pending for the Engine's whole life, use it when a Request has it, so
// that they never take a CPU from the collective running beside them.
type PassiveWaiter interface {
	WaitPassive(ctx context.Context) (n int, err error)
}

// Releaser is an optional Request capability: Release hands a completed
// request back to the group for reuse. The Engine calls it once per
// request, after the last Wait, and never touches the request again.
type Releaser interface {
	Release()
}

// SharedMemoryGroup is an optional Group capability: memory that every rank of
// the group loads from and stores to directly, which ranks on one host
// share over the shm transport. The SharedMemory algorithms move small
// vectors through it with flags, without any message.
type SharedMemoryGroup interface {
	// Shared returns the group's region, or nil when not every pair of
	// ranks can reach each other's memory. The region must outlive every
	// Engine on the group; only one Engine may use a region.
	Shared() SharedRegion
}

// SharedRegion is memory of every rank of a group, mapped into each.
type SharedRegion interface {
	// Mem is rank's part, 8-byte aligned and of the same size for every
	// rank, at least SharedRegionSize(4096), as this process sees it;
	// Mem(Rank()) is this rank's own.
	// Another rank's part changes under the reader (atomics order it).
	Mem(rank int) []byte
	// Failed is closed when the group fails (a peer lost, the transport
	// closed); Err then says why. A lost peer's memory stays mapped but
	// frozen, so waits on flags watch Failed. It returns the same channel
	// every time (the Engine keeps it).
	Failed() <-chan struct{}
	Err() error
	// WaitPolicy is how a rank waits for a flag in another rank's memory:
	// it polls (spinning while a rank has a core to itself, then
	// yielding), then sleeps on that rank's bell, a shmsync.Bell in the
	// region that the writer rings after it publishes, a Nap at a time
	// (the waiter re-checks its ctx and Failed between naps). A region
	// whose writers are goroutines of this process yields with Gosched
	// and never sleeps (Yield: shmsync.Forever).
	WaitPolicy() shmsync.Policy
}

// FailFlagger is an optional SharedRegion capability: FailFlag is a flag,
// read only, that the region sets before it closes Failed, and may set
// earlier (as it begins to close). Every shared-memory call looks at
// Failed when it begins; with the flag it looks only once the flag is
// set, a load where a receive from the channel is two calls into the
// runtime (5% of a small call's software).
type FailFlagger interface {
	FailFlag() *atomic.Bool
}

// Crowded is an optional SharedRegion capability: Crowded reports, the
// same on every rank, whether the ranks outnumber the CPUs they run on.
// Then a round of the shared-memory algorithms is a hand-off between
// processes that take turns on a CPU, and a pipeline of pieces overlaps
// nothing: a bcast moves whole slots, and its root never waits for the
// readers (it does not lend them its buffer).
type Crowded interface {
	Crowded() bool
}

// PeerReader is an optional SharedRegion capability: ReadPeer copies
// len(dst) bytes at address addr of rank's process into dst in one copy
// (process_vm_readv), so that large vectors move without going through the
// slots. CanReadPeer says whether it works, the same on every rank.
type PeerReader interface {
	CanReadPeer() bool
	ReadPeer(rank int, addr uint64, dst []byte) error
}

// PeerWriter is an optional capability of a SharedRegion that is a
// working PeerReader: WritePeer copies src to address addr of rank's
// process in one copy (process_vm_writev). A two-rank bcast then splits
// the copy: the reader reads one half while the root writes the other.
type PeerWriter interface {
	WritePeer(rank int, addr uint64, src []byte) error
}

// OneSided is an optional Group capability: windows that peers write into
// with a notification (RDMA WRITE_WITH_IMM). The one-sided ring allreduce
// needs it.
type OneSided interface {
	// Expose makes buf writable by every peer. It is collective: every rank
	// calls it in the same order (keys are exchanged), and returns when all
	// ranks' windows are usable.
	Expose(ctx context.Context, buf []byte) (Window, error)
}

// Window is one rank's exposed buffer plus handles to every peer's window.
// Put and WaitNotify may run concurrently with each other.
type Window interface {
	// Put copies src into peer's window at byte offset off and then delivers
	// imm to peer: when the peer's WaitNotify returns imm, the data is in
	// place. A zero-length Put only notifies. Puts to one peer arrive in
	// order. src must not change until the request's Wait returns.
	Put(peer, off int, src []byte, imm uint32) (Request, error)
	// WaitNotify returns the next notification from peer to this window,
	// in order. The collectives use bit 31 and bits 0..15 of imm only:
	// an adapter whose transport queues notifications per endpoint rather
	// than per window (p2p does) may put a window id in bits 16..30 and
	// demultiplex on it, so that Engines of Dup'ed communicators never take
	// each other's notifications.
	WaitNotify(ctx context.Context, peer int) (imm uint32, err error)
	// Close releases the window (collective, like Expose).
	Close() error
}

// Topology is an optional Group capability for hierarchical algorithms:
// which ranks share a host (and therefore a fast link).
type Topology interface {
	// HostOf returns a host index; ranks with the same index share a host.
	HostOf(rank int) int
}

// LinkInfo is an optional Group capability feeding the cost model.
type LinkInfo interface {
	// Link estimates the one-way latency of a small message to peer and the
	// bandwidth (bytes per second) of the link to it.
	Link(peer int) (latency time.Duration, bandwidth float64)
}

// Crowding is an optional Group capability feeding the cost model:
// Crowding reports the ranks per CPU on the job's most crowded host (at
// least 1; the ranks of every group on that host count, not only this
// group's), the same on every rank of the group. Where ranks outnumber
// CPUs they take turns, so the messages that every rank of a host sends
// at once are paid one after another.
type Crowding interface {
	Crowding() float64
}

// SingleCopy is an optional Group capability feeding the cost model:
// SingleCopyMin reports the size above which one copy by the kernel
// between two ranks of a host (PeerReader) was measured to beat two
// copies through shared memory, or 0 when that was not measured or the
// two copies won. It must be the same on every rank of the group. Where
// it is set, the shared-memory algorithms that read a peer's buffer
// (ShmSplitMin, ShmReadMin, ShmReadBlockMin) do so above it, unless their
// own threshold is lower or the Model sets it.
type SingleCopy interface {
	SingleCopyMin() int
}

// NowSender is an optional Group capability: SendNow sends head and then
// body to peer with tag, as one message (head nil: body alone; head set:
// as PartsSender's IsendParts sends it), if it can go at once, eager and
// without a Request (nothing queued before it to that peer), and reports
// whether it did; both buffers may be reused as soon as it returns. false
// did nothing: the Engine then sends with Isend or IsendParts. It must
// not block. A message the Engine sends in one message (its payload
// inline, or in parts) then takes no request, nor its tracking under the
// Engine's lock, its wait and its release.
type NowSender interface {
	SendNow(peer, tag int, head, body []byte) (bool, error)
}

// EagerLimiter is an optional Group capability: EagerLimit reports the
// largest message the group's transport sends to peer in one piece,
// copied through buffers the receiver posted in advance (p2p's eager
// protocol), or 0 when it cannot say. It must be the same figure on both
// ranks of a pair, since it decides how a payload travels between them
// (see Options.InlineBytes).
type EagerLimiter interface {
	EagerLimit(peer int) int
}

// FoldReceiver is an optional Group capability: a receive that folds the
// message into buf (buf = buf ⊕ message, by fold, an element-wise reduction
// over unit-byte elements) as it arrives, as p2p.Channel.IrecvFold does.
// A reduction step then makes no pass of its own over a scratch copy of
// the message after the whole message is in: the engine's binomial reduce,
// ring reduce-scatter and Rabenseifner's halving steps receive this way.
// fold runs wherever the group makes progress and must not block; a
// message shorter than buf folds into its prefix, a longer one fails the
// request as a receive's would. FoldLimit is the largest message from peer
// the group folds as it arrives; a larger one it would first receive
// whole into memory of its own, so the engine receives those into its
// scratch memory and folds them itself, as without the capability.
type FoldReceiver interface {
	IrecvFold(peer, tag int, buf []byte, unit int, fold func(dst, src []byte)) (Request, error)
	FoldLimit(peer int) int
}

// PartsReceiver is an optional Group capability: a receive whose message's
// first len(head) bytes land in head and the rest in body (a scatter list
// of two entries), as p2p.Channel.IrecvParts does. The engine receives a
// payload that travels with its header (one at most the pair's inline
// limit) this way: the header apart, the payload straight into its place,
// where it would otherwise receive both into a staging buffer and copy the
// payload again from there. A message longer than both fails the request
// as a receive's would; where the group placed what fits (a message it
// took whole), the engine reads the header from head to name the peer's
// disagreement.
type PartsReceiver interface {
	IrecvParts(peer, tag int, head, body []byte) (Request, error)
}

// PartsSender is an optional Group capability: one message made of head
// and then body, sent from both where they are (a gather list of two
// entries), as p2p.Channel.IsendParts does. The engine sends a payload
// that travels with its header this way instead of copying both into a
// staging buffer first.
type PartsSender interface {
	IsendParts(peer, tag int, head, body []byte) (Request, error)
}

// AnySourceReceiver is an optional Group capability: a receive that
// matches a message from any peer. With it an Engine watches for mismatch
// aborts and stall probes with one goroutine and one posted receive,
// instead of one of each per peer (which matters at thousands of ranks).
type AnySourceReceiver interface {
	IrecvAny(tag int, buf []byte) (Request, error)
}
