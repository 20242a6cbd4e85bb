package verbs

import (
	"context"
	"log/slog"
	"time"
)

// Provider opens devices of one kind ("tcp", "shm", "ibv", ...) and says
// what they are like, so that the layers above choose and tune from that
// rather than from the name.
type Provider interface {
	Name() string
	// Open opens a device. It returns an error wrapping ErrUnavailable when
	// the provider cannot run here (not built in, no hardware).
	Open(ctx context.Context, opts DeviceOptions) (Device, error)
	// Traits describes the provider (see Traits). It is constant.
	Traits() Traits
	// CanConnect reports whether the provider can connect a rank described
	// by local with one described by remote. It must be symmetric, so that
	// both ends of a pair reach the same answer.
	CanConnect(local, remote PeerInfo) bool
}

// DeviceOptions are the provider-neutral settings for opening a device.
// Providers have their own Options for everything else.
type DeviceOptions struct {
	// Name selects a device where a provider has several (ibv: "rxe0"). Empty
	// picks the first.
	Name string
	// Listen is where the device accepts connections, for providers that
	// listen on a socket: "host:port" (tcp). Empty means the provider's
	// default (loopback, any port).
	Listen string
	// Advertise is the host other ranks use to reach Listen, when it differs
	// (Listen on 0.0.0.0, advertise the chosen interface's address).
	Advertise string
	// Token is the job secret. Connections between devices prove knowledge
	// of it before anything else is exchanged. Empty disables authentication
	// (tests only).
	Token []byte
	// ConnectTimeout bounds how long a queue pair's connection attempt to its
	// peer may take before outstanding work fails with RETRY_EXC_ERR. Zero
	// means 30 s.
	ConnectTimeout time.Duration
	// PollSpin is how long a goroutine waiting on a completion queue polls
	// the device's connections without blocking before it sleeps in the
	// kernel, for providers whose waiters read their connections themselves
	// (tcp): a reply that arrives within it is read without a wake-up. With
	// a CPU to itself the process polls flat out; where ranks outnumber the
	// CPUs, only with PollYield. Zero or negative means block at once.
	PollSpin time.Duration
	// PollYield makes that polling give the CPU to other processes
	// (sched_yield) between polls: for ranks that outnumber the CPUs, where
	// the reply's sender needs the core this waiter holds, and a sleep
	// costs a wake-up per message.
	PollYield bool
	// Logger receives diagnostics (dropped connections, failed handshakes).
	// Nil means silent.
	Logger *slog.Logger
}

// Caps describes what a device can do, plus the link estimates the
// collectives' cost model uses.
type Caps struct {
	MaxMsgSize uint64 // largest message one work request may move
	MaxMRSize  uint64
	MaxQP      int
	MaxQPWR    int // largest queue depth per QP
	MaxSGE     int // scatter/gather elements per work request
	MaxInline  int // largest inline payload
	MaxCQE     int
	MaxRdAtom  int // largest MaxQPRdAtomic / MaxDestRdAtomic
	Atomics    AtomicCap
	// UserMemAtomics says whether remote atomics may target memory the caller
	// registered (MemUser). Provider memory always supports them when
	// Atomics is not AtomicNone.
	UserMemAtomics bool
	// Latency is an estimate of the one-way latency of a small message.
	Latency time.Duration
	// Bandwidth is an estimate of the link bandwidth in bytes per second.
	Bandwidth float64
	// ReadServed says the device's queue pairs, as READ responders, can
	// report when they have handed a response whole to their transport, so
	// that the memory it was read from may change: an RDMA READ posted
	// with SendReportServed makes the peer's queue pair complete a
	// WCReadServed, carrying the READ's CompareAdd as its ID, on its send
	// CQ once the response is written (never for a READ that fails, nor
	// one whose response could not be written). Responses are written in
	// request order, so the report of a QP's last READ covers the earlier
	// ones. A stream transport copies a response into the kernel, where
	// RC hardware reads the memory as the response goes out and tells the
	// responder nothing.
	ReadServed bool
}

// Device is an opened RDMA device (ibv_context). All methods are safe for
// concurrent use. Close fails outstanding work on every queue pair of the
// device with WR_FLUSH_ERR and releases everything it created.
type Device interface {
	Name() string
	Provider() string
	Caps() Caps
	AllocPD() (PD, error)
	// CreateCQ creates a completion queue with room for at least depth entries.
	CreateCQ(depth int) (CQ, error)
	Close() error
}

// PD is a protection domain: memory regions and queue pairs of one PD work
// only with each other. Safe for concurrent use.
type PD interface {
	// AllocMR allocates n bytes of provider memory (off the Go heap, zeroed)
	// and registers it. It supports every operation, atomics included.
	AllocMR(n int, access Access) (MR, error)
	// RegMR registers the caller's memory. buf stays pinned and referenced
	// until the MR is closed; the caller must not let it go before that.
	RegMR(buf []byte, access Access) (MR, error)
	CreateQP(attr QPInitAttr) (QP, error)
	// Close fails with ErrInUse while MRs or QPs of the PD are open.
	Close() error
}

// MR is a registered memory region. Safe for concurrent use; the memory
// itself is shared with the device and remote peers, so synchronising access
// to Bytes is the caller's business (completions order it).
type MR interface {
	// Bytes is the region's memory. For provider memory it is valid until Close.
	Bytes() []byte
	Addr() uint64 // virtual address of Bytes()[0], as in ibv_mr.addr
	Len() int
	LKey() uint32
	RKey() uint32
	Access() Access
	Kind() MemKind
	// SupportsAtomics says whether remote atomics may target this region.
	SupportsAtomics() bool
	// Close deregisters the region (and frees provider memory). Later use of
	// its keys fails: locally at post time, remotely with REM_ACCESS_ERR.
	Close() error
}

// CQ is a completion queue. Poll and Wait may be called from several
// goroutines, but completions are handed out once each, in FIFO order.
type CQ interface {
	// Poll moves up to len(wc) completions into wc and returns how many. It never blocks.
	Poll(wc []WC) int
	// Wait blocks until Poll would return at least one completion, ctx ends
	// (ctx.Err()), or the CQ is closed (ErrClosed). Idle waiting does not
	// spin: it costs no CPU.
	Wait(ctx context.Context) error
	Close() error
}

// QP is a reliable-connected queue pair. Modify, PostSend and PostRecv may be
// called from different goroutines; requests posted from several goroutines
// at once are ordered as the provider received them.
type QP interface {
	Num() uint32
	// PSN is the QP's initial send packet sequence number, carried in Address.
	PSN() uint32
	// Address is the opaque, self-describing address a peer passes as
	// QPAttr.Remote (see address.go for its envelope). At most MaxAddressLen bytes.
	Address() []byte
	State() QPState
	// Cap is what the provider granted at creation.
	Cap() QPCap
	// Modify moves the QP through RESET→INIT→RTR→RTS (or to ERR / RESET from
	// any state). It checks the attributes each transition needs; a failed
	// Modify changes nothing, not even the state.
	Modify(attr *QPAttr, mask AttrMask) error
	// PostSend checks each request when posted and stops at the first bad
	// one: the error is a *Error whose Index says which, wrapping
	// ErrInvalidArgument, ErrQueueFull, ErrInvalidState or ErrBadKey. Earlier
	// requests were posted.
	PostSend(wrs ...SendWR) error
	// PostRecv is PostSend's twin for the receive queue. Receives may be
	// posted from INIT on.
	PostRecv(wrs ...RecvWR) error
	// Close destroys the QP; its outstanding work completes with WR_FLUSH_ERR.
	Close() error
}

// Disconnector is implemented by queue pairs whose provider can simulate the
// loss of the link to the peer (the fault-injecting wrapper and peer-loss
// tests use it): the connection drops as if the network failed, so both
// sides' outstanding and later work fails with RETRY_EXC_ERR and the QPs go
// to ERR. It is an optional capability, found by type assertion.
type Disconnector interface {
	Disconnect() error
}

// ConnectErrorer is implemented by queue pairs whose provider connects them
// over a network of its own (tcp): once the connection to the peer could
// not be made, ConnectError says why (the address tried and the cause), so
// that the layer above can report that rather than only the flushed work
// requests. It is nil while no connection attempt has failed. An optional
// capability, found by type assertion.
type ConnectErrorer interface {
	ConnectError() error
}

// DirectAccess is implemented by queue pairs whose peer shares memory with
// this process (the shm provider): MapRemote returns the peer's registered
// memory [addr, addr+n), checked against rkey and access like a one-sided
// operation, as a slice this process loads from and stores to directly,
// with no work request at all. Latency-bound collectives on one host use
// it to exchange small vectors through flags in shared memory.
//
// Loads and stores through the slice are not ordered with the QP's work
// requests: synchronise with atomic operations on words in the memory
// itself. The slice stays valid until the QP or its device is closed (a
// later access faults); a peer that dies leaves it mapped but no longer
// changing, so waits on it must also watch for the peer's loss by other
// means. It returns an error wrapping ErrUnsupported when the region is
// not memory both processes map (e.g. ordinary registered Go memory).
type DirectAccess interface {
	MapRemote(addr uint64, rkey uint32, n int, access Access) ([]byte, error)
}

// SleepWaiter is an optional CQ capability for providers whose Wait spins
// or yields before it sleeps (shm): WaitSleep is Wait that goes to sleep at
// once. A background goroutine that only keeps things moving while nobody
// else polls uses it, so that it never holds a CPU (with GOMAXPROCS=1, the
// only one) that a latency-bound goroutine of the same process needs.
//
// WaitSleep may also return once a completion was published that another
// goroutine polled first (the caller polls, finds nothing, and decides
// again whether to sleep).
type SleepWaiter interface {
	WaitSleep(ctx context.Context) error
}

// Arrivals is an optional CQ capability for providers whose completions
// are made from bytes their own goroutines read from the kernel (tcp). A
// poller that keeps its thread while it polls (with sched_yield, where
// ranks outnumber the CPUs) would keep those goroutines from running:
// Arrived has the caller handle, on its own goroutine, what has arrived
// and can be handled without waiting (took: completions may be in the CQ
// now), and reports bytes that only the provider's goroutines can take
// (waiting): the poller should block then, and Go's scheduler, finding
// nothing else to run, runs them at once. Arrived may be called
// concurrently with anything; it costs a system call per connection, and
// it never waits for the network, only (until ctx ends) for a goroutine
// of the provider to hand the connection over.
type Arrivals interface {
	Arrived(ctx context.Context) (took, waiting bool)
}

// PeerReader is an optional QP capability of providers whose peer is
// another process on this host that this one may read (the shm provider,
// through process_vm_readv): ReadPeer copies len(dst) bytes at address
// addr of the peer's memory into dst, in one copy by the kernel. It is for
// memory the peer has published for the purpose (the collectives'
// shared-memory algorithms publish a buffer's address next to a flag) and
// keeps alive and unchanged until the reader says it is done. It fails with
// an error wrapping ErrUnsupported when the peer is not another process or
// the kernel does not allow the read, and with ErrInvalidArgument when the
// range is not mapped in the peer.
type PeerReader interface {
	ReadPeer(addr uint64, dst []byte) error
}

// PeerWriter is PeerReader's counterpart (process_vm_writev): WritePeer
// copies src to address addr of the peer's memory, which the peer has
// published for the purpose and does not touch until the writer says it
// is done. Errors are as for ReadPeer.
type PeerWriter interface {
	WritePeer(addr uint64, src []byte) error
}

// PostBatcher is an optional QP capability of providers whose doorbell is
// a system call (software transports): between HoldPosts and ReleasePosts
// the send requests posted are handed to the transport together, at
// ReleasePosts, as one ibv_post_send of a list would be: a stream of small
// frames then costs one write instead of one each. Holds nest; every
// HoldPosts must be followed by its ReleasePosts on the same goroutine
// before it waits for anything, or the requests held never leave. Posts
// from other goroutines meanwhile are held too. Validation and errors are
// PostSend's, at post time.
type PostBatcher interface {
	HoldPosts()
	ReleasePosts()
}

// RunWriter is an optional QP capability of software providers: a run of
// small RDMA WRITEs posted as one send request, which the provider checks,
// sends and completes once instead of once a write (a window of 64 small
// Puts over tcp spent as long in its requests' bookkeeping as in its
// system calls). PostWriteRun copies the run's bytes, so the caller may
// reuse it on return; the writes are placed in order, each as an inline,
// unsignaled RDMA WRITE would be, and are complete once a later signaled
// request of the QP completes. A failed write fails the run: its error
// completion carries id (the writes before it in the run are placed, none
// after it). RunLimits bounds a run: at most writes writes, of bytes
// bytes in all (a wrapper whose QP takes no runs reports 0 writes). Both
// may be called from any goroutine, as PostSend may, and a run takes its
// place among the QP's posts when PostWriteRun is called. Errors are
// PostSend's (ErrInvalidArgument for a run beyond the limits, an empty
// one or one whose Data does not add up; ErrQueueFull; ErrClosed), at
// post time.
type RunWriter interface {
	PostWriteRun(id uint64, run *WriteRun) error
	RunLimits() (writes, bytes int)
}

// WriteRun is a run of RDMA WRITEs for RunWriter: Writes says where each
// goes, Data holds their bytes one after the other. Not safe for
// concurrent use.
type WriteRun struct {
	Writes []RunWrite
	Data   []byte
}

// RunWrite is one write of a WriteRun: Len bytes to RemoteAddr under RKey.
type RunWrite struct {
	RemoteAddr uint64
	RKey       uint32
	Len        uint32
}

// Add appends a write of src to raddr under rkey (src is copied).
func (r *WriteRun) Add(raddr uint64, rkey uint32, src []byte) {
	r.Writes = append(r.Writes, RunWrite{RemoteAddr: raddr, RKey: rkey, Len: uint32(len(src))})
	r.Data = append(r.Data, src...)
}

// Reset empties the run, keeping its memory.
func (r *WriteRun) Reset() { r.Writes, r.Data = r.Writes[:0], r.Data[:0] }

// Len is the number of writes in the run.
func (r *WriteRun) Len() int { return len(r.Writes) }

// InlinePairPoster is an optional QP capability: PostSendInlinePair posts
// one inline request (wr has SendInline, its Inline is the first part)
// whose payload is wr.Inline followed by tail, both copied at post time,
// so that a caller with a header and a body in separate buffers need not
// first join them in one (a copy of the body). Validation, limits
// (MaxInline bounds both parts together) and errors are PostSend's.
type InlinePairPoster interface {
	PostSendInlinePair(wr SendWR, tail []byte) error
}

// LentPairPoster is an optional QP capability: PostSendLentPair posts the
// inline SEND request wr (SendInline, wr.Inline its first part, within
// MaxInline) followed by tail, of any length a message may have, if the
// provider can write it out at once; otherwise it posts nothing and
// returns false, and the caller posts the request another way. tail is
// lent for the call only: the provider writes it out, or copies what it
// could not, before returning, so the caller may reuse it then, and a
// provider that writes to a socket moves a message's body into the kernel
// without first copying it into memory of its own. As tail is not kept, a
// request that has to be sent again after a receiver-not-ready NAK (its
// own, or an earlier request's) completes with StatusLocLenErr instead:
// for callers that post a SEND only where the receiver has a receive
// posted (credits, as p2p's eager protocol). Validation and errors are
// PostSend's.
type LentPairPoster interface {
	PostSendLentPair(wr SendWR, tail []byte) (posted bool, err error)
}

// SendSteerer is an optional QP capability of providers that move an
// inbound SEND's payload into memory themselves (software transports,
// which read it from a socket): with a SendSteer set, the provider reads
// the first prefix bytes of every SEND longer than prefix into its receive
// buffer as usual, then asks the steer where the rest goes, so that a
// consumer whose SENDs carry a header saying which buffer of its own the
// body belongs to (a fragment of a larger message) has the body placed
// there, with no copy through the receive buffer. The receive completes as
// it would have (its byte count the whole SEND's); its buffer holds the
// prefix only. SteerSends(0, nil) stops steering; call it before the QP
// carries traffic, or the SENDs in flight may or may not be steered.
type SendSteerer interface {
	SteerSends(prefix int, s SendSteer)
}

// SendSteer decides where a steered SEND's body goes (SendSteerer). Its
// methods run on the goroutine that reads the QP's inbound stream, one
// SEND at a time per QP, so they must not block or wait for the
// consumer's own progress (its locks), and may not post work. (A SEND
// whose read a provider suspends mid-body is finished, and Steered
// called, by whichever goroutine reads the stream next, or by the one
// that drops its connection, under the provider's locks.)
//
// Steer gets the ID of the receive request the SEND consumed, the SEND's
// first prefix bytes (at the start of that receive's buffer) and the
// length of the rest; it returns nil to leave the rest in the receive
// buffer, or buffers of exactly rest bytes together to read it into, in
// order (several where the consumer's own destination is in pieces: a
// message's small head apart from its body). The slice, and the buffers,
// are the steer's until Steered: every Steer that returns buffers is
// followed by Steered once the provider is done with them: ok if the
// whole rest is in them, false if the read failed (the connection broke;
// they hold some of it).
type SendSteer interface {
	Steer(id uint64, head []byte, rest int) [][]byte
	Steered(ok bool)
}
