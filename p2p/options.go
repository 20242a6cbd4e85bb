package p2p

import (
	"context"
	"log/slog"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// Rendezvous is what the endpoint needs from the out-of-band store to
// exchange queue pair addresses: bootstrap.Store satisfies it (and so does
// any PMI-style store). New uses keys under "p2p/<Options.Name>/" only.
type Rendezvous interface {
	Rank() int
	Size() int
	Put(ctx context.Context, key string, value []byte) error
	Get(ctx context.Context, key string) ([]byte, error)
	Fence(ctx context.Context) error
}

// Options configure an endpoint. The zero value works: every field has a
// default, chosen by measurement where it matters (see docs/p2p.md).
type Options struct {
	// Name separates the keys of several endpoints in one job ("p2p/<Name>/...").
	// Empty means "world".
	Name string
	// Provider is the verbs provider for every peer: "tcp", "shm", "ibv",
	// "loop" or any other registered one; New fails, naming both ranks,
	// where it cannot connect a pair. Empty or "auto" means: for each peer
	// the first registered provider, in order of preference, that can
	// connect the pair (shm on one host, ibv between hosts that both have a
	// device, else tcp; see verbs.Preferred). Ranks must agree.
	Provider string
	// Device is passed to verbs.Open (token, listen address, logger...).
	Device verbs.DeviceOptions
	// IBDevices selects the device and port of the hardware providers
	// (verbs.Traits.Hardware: ibv), in NCCL_IB_HCA's syntax
	// ("mlx5_0:1,mlx5_1", "^mlx5_2", "=rxe1"; see ibv.ParseDevices): their
	// devices are opened with it as DeviceOptions.Name, the other
	// providers' devices are not. Empty means Device.Name. Because it asks
	// for hardware, a selection that opens no device fails New, naming the
	// devices present, rather than leaving the automatic choice to tcp.
	IBDevices string
	// OpenDevice, when set, opens devices instead of verbs.Open (tests wrap
	// devices with verbs/faulty this way). It is called once per provider.
	OpenDevice func(ctx context.Context, provider string, o verbs.DeviceOptions) (verbs.Device, error)
	// Connect overrides the queue pair connection attributes; nil means
	// verbs.DefaultConnectOptions with as many outstanding READs as the
	// device allows (up to 16).
	Connect *verbs.ConnectOptions

	// EagerLimit is the largest message sent eagerly (copied through
	// pre-posted buffers); larger ones use the zero-copy rendezvous
	// protocol. Zero means the provider's measured default
	// (verbs.Traits.EagerSize, else 32 KiB) and 64 bytes more, room for
	// the header of a layer above (a collective's) before a payload of
	// that size (Endpoint.EagerLimit reports the sum): 32 KiB over shm
	// (its single-copy READ, process_vm_readv, has a fixed cost of a few
	// µs that two copies beat up to there), halved down to 16 KiB while
	// a rank's eager buffers for its host's other ranks would pass 8 MiB
	// (from 10 ranks on a host with 32 buffers a peer), 8 KiB over ibv,
	// 256 KiB over tcp, halved down to 64 KiB while a rank's eager buffers
	// for the job's other ranks would pass 256 MiB (128 KiB from 34 ranks
	// with 32 buffers a peer, 64 KiB from 66), and 32 KiB over loop (where
	// each protocol round trip costs goroutine hand-offs, so eager wins up
	// to 64 KiB; over tcp a rendezvous also costs three more trips through
	// the kernel, and one frame fewer per message than the pipeline). See
	// docs/p2p.md.
	EagerLimit int
	// PipelineLimit is the largest message sent as a train of eager
	// fragments (each one receive buffer, the first matched like an eager
	// message) instead of the rendezvous: one trip where the rendezvous
	// takes three, at the price of two copies and of buffering a message
	// that arrives before its receive in memory of the receiver's (as an
	// eager message is). It applies to messages above EagerLimit. Zero
	// means the provider's default: 256 KiB over tcp, where every
	// rendezvous trip goes through both kernels (see docs/p2p.md for the
	// figures; it takes effect where EagerLimit is lower than that); 64
	// KiB over shm, whose READ (process_vm_readv) costs about 3 µs
	// before it copies anything, and 256 KiB there where the
	// host's ranks outnumber its CPUs (a rendezvous there waits for the
	// receiver's turn and then the sender's); none elsewhere, whose READ
	// copies once. Negative means none; at most 64 MiB. Over shared
	// memory with a CPU per rank, a message of 48 KiB or more whose sender
	// has a receive posted for a message of its receiver's (traffic both
	// ways, where both cores copy already) takes the rendezvous's single
	// copy instead; so does, over a network, one of more than twice
	// EagerLimit or 128 KiB, whichever is less, pipelined or eager, sent
	// while earlier messages' frames to the same peer wait for credits (a
	// window of large sends, where the rendezvous streams better).
	PipelineLimit int
	// SingleCopyMin, where positive, makes every message of more than this
	// many bytes to a peer on shared memory with a CPU of its own take the
	// rendezvous (one copy by the kernel) rather than the eager protocol
	// or the pipeline (two copies through a receive buffer); negative
	// never. Zero leaves it to Endpoint.SetSingleCopyMin, which comm
	// feeds with what Endpoint.MeasureCopy found at Init (on the 2-vCPU
	// Intel VM measured, about 6 KiB; on an AMD one the eager path won up
	// to its limit, so nothing changed there).
	SingleCopyMin int
	// EagerSlots is the number of receive buffers posted per peer, which is
	// also the number of eager messages and rendezvous requests a sender
	// may have in flight to one receiver (its credits, less one reserved
	// for credit returns). Default 32.
	EagerSlots int
	// EagerSlotsMax is how many receive buffers a peer may grow to: a
	// sender that had to wait for credits says so, and its receiver posts
	// twice as many buffers, up to this. Zero means the provider's default:
	// 4x EagerSlots over shm, where a window of 64 sends waited for credits
	// (see docs/p2p.md), and no growth elsewhere. Memory for the most is
	// reserved up front but only touched as buffers come into use: the
	// providers map a buffer's pages when it is first posted (within
	// their PrefaultBytes), so that its first message does not take a
	// page fault per page.
	EagerSlotsMax int
	// RingLines is the size, in 64-byte lines, of the ring each sender
	// writes small messages into over shm (up to 4144 bytes, and half
	// the ring, without a work request: see ring.go), a power of two from
	// 64 to 65536. Zero means 2048 (128 KiB per peer, room for 64
	// messages of up to 2000 bytes in flight) up to 8 ranks, fewer lines
	// above so that a rank's rings stay near 1 MiB, and never under 256;
	// negative means no rings. Ranks must agree.
	RingLines int
	// RingAhead is how many messages ahead a burst of ring sends (a
	// window of Isends) starts taking the ring's lines from the receiving
	// core (a prefetch for writing), counting a message of k lines as k/2
	// messages, and never less than the next one: the line a store waits
	// for then came over while the sender did the messages before it. A
	// hint, with no effect on what is sent. Zero means 3: on the
	// development machine messages of up to 48 bytes went at 1.5x the
	// rate of the next message alone, and 6 or 12 ahead, where the
	// receiver's own reads take the lines back first, at 1.1x and 0.7x.
	// Negative means the next message only; at most 16.
	RingAhead int
	// RegCacheEntries and RegCacheBytes bound the registration cache of
	// rendezvous buffers (LRU), per device. Defaults: the provider's
	// verbs.Traits.RegCache (4 over shm, tcp and loop, where registering
	// pins nothing and a cached registration only keeps its buffer
	// alive), else 64 entries; 1 GiB.
	RegCacheEntries int
	RegCacheBytes   int64

	// Heartbeat is how often an idle link sends a liveness frame; default 1 s.
	Heartbeat time.Duration
	// LivenessTimeout is how long a peer may stay silent before it is
	// declared lost; default 10 s. Negative disables liveness checks.
	LivenessTimeout time.Duration
	// Spin and Yield shape a blocking wait: poll the completion queues in a
	// tight loop for Spin, then yielding between polls (runtime.Gosched)
	// until Spin+Yield, then block (in the CQ's own Wait when the endpoint
	// has one device). Zero means the provider's default (verbs.Traits.Wait;
	// with several devices 20 µs and 200 µs, or none when one of them asks
	// for no spin): over shm no yield, because the shm CQ.Wait itself spins
	// on its ring, yields the core to other processes with sched_yield and
	// then sleeps on a futex, and a spin of 100 µs when this machine's
	// kernel (its network namespaces together: Endpoint.Crowded) has no
	// more ranks than CPUs (a reply delayed by a briefly descheduled peer is
	// still caught without a sched_yield or a futex wake-up); when it has
	// more, a spin of 2 µs (the peer may need this core) and then polls
	// with sched_yield between them for 20 ms, as a crowded waiter over
	// several devices does (blocking costs a reader of the shm rings a
	// heavy fence before the CQ's yields start); over ibv 20 µs and 200 µs
	// (crowded: 20 µs, then 20 ms of polls with sched_yield);
	// over tcp and loop none, because their completions are made by the
	// provider's own goroutines, which a spinning waiter only starves on a
	// busy machine; over tcp the waiter in the CQ polls its socket instead
	// (verbs.DeviceOptions.PollSpin, which defaults to the provider's
	// Traits.PollSpin, 1 ms for tcp, when every rank on this kernel has a
	// CPU; where they outnumber the CPUs it gives the CPU away between
	// polls, PollYield, for 20 ms, as a crowded waiter over several devices
	// yields). Negative means none.
	Spin, Yield time.Duration
	// Contended is how long a blocking wait polls, without giving its CPU
	// to other processes, once this process finds its CPU shared with
	// another runnable thread (a CPU hog, another job): a CPU given away
	// then comes back only after the other's time slice (shmsync.Policy.
	// Contended). Zero means 3 ms where every rank on this kernel has a CPU,
	// none where the ranks outnumber the CPUs (the peer may need this
	// very CPU); negative means none.
	Contended time.Duration
	// CloseTimeout bounds how long Close waits for messages still in flight
	// (a receiver still reading a rendezvous buffer). Default 5 s.
	CloseTimeout time.Duration
	// Logger receives diagnostics (peer loss, revokes). Nil means silent.
	Logger *slog.Logger
}

func (o *Options) setDefaults() {
	if o.Name == "" {
		o.Name = "world"
	}
	if o.EagerSlots <= 0 {
		o.EagerSlots = 32
	}
	if o.RegCacheBytes <= 0 {
		o.RegCacheBytes = 1 << 30
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.LivenessTimeout == 0 {
		o.LivenessTimeout = 10 * time.Second
	}
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = 5 * time.Second
	}
}
