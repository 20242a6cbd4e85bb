package verbs

import (
	"slices"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/hostid"
)

// Traits describe a provider to the layers above it. p2p chooses the
// provider for each pair of ranks and tunes its protocols and waits from
// these and from CanConnect, never from the provider's name, so a new
// provider is its own package plus one registration.
//
// The size and wait fields are hints measured for the provider; zero means
// "no hint" and the caller's own default applies.
type Traits struct {
	// Preference places the provider in the automatic choice: for each
	// peer, the providers with a Preference above zero are asked in
	// increasing order (Preferred) and the first that can connect the pair
	// carries it. Zero means the provider is used only when named.
	Preference int
	// SharesMemory: the provider connects only processes of one host, and
	// its provider memory (PD.AllocMR) is mapped by every connected peer, so
	// its queue pairs implement DirectAccess and a peer's loads and stores
	// reach that memory without a work request.
	SharesMemory bool
	// Hardware: a device exists only where an adapter is present. The
	// automatic choice opens one on every rank to learn whether it may pick
	// the provider (PeerInfo.Devices), and a device selection by name
	// (p2p.Options.IBDevices) applies to it.
	Hardware bool
	// InlineSends: SENDs posted inline cost no more than from registered
	// memory (over shm small ones travel in the completion's own cache
	// line; over tcp the bytes are copied once either way), so callers may
	// post control frames, and messages up to the device's MaxInline,
	// inline, without a staging buffer or a signaled send.
	InlineSends bool

	// EagerSize is the largest message worth copying through pre-posted
	// buffers rather than moving with a zero-copy rendezvous.
	EagerSize int
	// PipelineSize is the largest message worth sending as a train of eager
	// fragments rather than a rendezvous (0: never).
	PipelineSize int
	// ReadChunk is the largest RDMA READ worth posting for a message under
	// a MiB; a larger one is read in several, posted at once (0: no limit
	// below the device's).
	ReadChunk int
	// ReadChunkCrowded replaces ReadChunk where the host's ranks outnumber
	// its CPUs (0: ReadChunk there too).
	ReadChunkCrowded int
	// SlotGrowth is how many times its initial receive buffers a peer may
	// grow to when its sender waits for credits (0 or 1: no growth).
	SlotGrowth int
	// Wait is how a waiter for this provider's completions should poll.
	Wait WaitHint
	// RegCache is how many unused memory registrations a cache of them
	// (p2p's, for rendezvous buffers) should keep by default (0: the
	// cache's own default). Where registering pins pages in the kernel,
	// many; where it is a table entry, a few: a cached registration keeps
	// its buffer alive, and a program that sends from new buffers (a Go
	// program that allocates them) then carries that many dead ones.
	RegCache int
	// PollSpin is DeviceOptions.PollSpin's default, for providers whose
	// waiters read their connections themselves (0: the provider does not
	// poll); where the ranks on the host outnumber the CPUs it comes with
	// DeviceOptions.PollYield.
	PollSpin time.Duration
}

// SoftRegCache is the RegCache of providers whose registration is a table
// entry (no pages pinned): enough for a few buffers in rotation, whose
// misses cost a lookup and a table insert. With 64, 2 MiB Send/Recv pairs
// over shm between buffers allocated anew for every message took 1.6-2.9
// ms each, against 0.33-0.46 with 4 and 0.07 between the same buffers.
const SoftRegCache = 4

// WaitHint is how long a waiter for completions polls before it sleeps.
// A zero Spin says a spinning waiter only starves the provider (its
// completions are made by its own goroutines), so none should spin.
type WaitHint struct {
	// Spin is the busy-poll time when the ranks on this host have a CPU
	// each; SpinShared when they outnumber the CPUs.
	Spin, SpinShared time.Duration
	// Yield is how long to go on polling between yields of the processor
	// after Spin, before blocking.
	Yield time.Duration
}

// PeerInfo is what one rank tells the others about itself so that
// providers can say whether they connect two ranks (Provider.CanConnect).
// The zero value knows nothing: only a provider that reaches any rank
// connects it.
type PeerInfo struct {
	// Host is the rank's host identity (internal/hostid: kernel boot id
	// and network namespace), "" when unknown.
	Host string
	// Process identifies the rank's process, "" when unknown.
	Process string
	// Devices names the Hardware providers whose device opened on the rank.
	Devices []string
}

// SameHost reports whether two ranks run on one kernel in one network
// namespace; an unknown identity never matches.
func (p PeerInfo) SameHost(o PeerInfo) bool { return hostid.Same(p.Host, o.Host) }

// SameProcess reports whether two ranks run in one process; an unknown
// identity never matches.
func (p PeerInfo) SameProcess(o PeerInfo) bool { return p.Process != "" && p.Process == o.Process }

// String shows what is known: "host <id>, devices ibv" ("host unknown",
// "no devices" where so).
func (p PeerInfo) String() string {
	h, d := p.Host, strings.Join(p.Devices, ",")
	if h == "" {
		h = "unknown"
	}
	if d == "" {
		return "host " + h + ", no devices"
	}
	return "host " + h + ", devices " + d
}

// HasDevice reports whether the rank opened a device of the named provider.
func (p PeerInfo) HasDevice(provider string) bool { return slices.Contains(p.Devices, provider) }
