package shm

import (
	"errors"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// UserMemPath says how a peer process reaches memory the caller registered
// with RegMR (an ordinary Go slice, which no other process has mapped).
type UserMemPath uint8

const (
	// UserMemAuto probes cross-memory attach when a queue pair connects and
	// uses it where the kernel permits, else the copy path.
	UserMemAuto UserMemPath = iota
	// UserMemDirect: the peer is in the same process and copies directly.
	// It is what Auto picks for goroutine ranks; it cannot be forced.
	UserMemDirect
	// UserMemCMA: process_vm_readv / process_vm_writev into the owner's
	// address space. One-sided: the owner's CPU does nothing. Needs the same
	// user and ptrace rights (Yama ptrace_scope 0, or root).
	UserMemCMA
	// UserMemCopy: the owner's device copies on the initiator's behalf,
	// through the queue pair's control socket. Always works; the owner's
	// process (a goroutine of its device, not the application) takes part.
	UserMemCopy
)

func (p UserMemPath) String() string {
	switch p {
	case UserMemAuto:
		return "auto"
	case UserMemDirect:
		return "direct"
	case UserMemCMA:
		return "cma"
	case UserMemCopy:
		return "copy"
	}
	return "UserMemPath(?)"
}

// Options configure a shared-memory device.
type Options struct {
	verbs.DeviceOptions

	// HostID overrides the same-host identity this device puts in its queue
	// pair addresses (default: HostID(), the kernel boot id plus the network
	// namespace inode). Connecting to an address with another identity fails
	// with ErrNotSameHost. Setting different values on two devices makes them
	// refuse each other (tests that treat one machine as several hosts);
	// setting equal values cannot make shm work across network namespaces,
	// as the abstract sockets it uses are per namespace.
	HostID string
	// UserMem selects how peers reach RegMR memory (see UserMemPath). Zero
	// means UserMemAuto.
	UserMem UserMemPath
	// KeepPages leaves the page size of registered memory alone. By
	// default, once a queue pair of the device reaches its peer by
	// cross-memory attach (UserMemCMA), memory registered for remote
	// access is collapsed into transparent huge pages (MADV_COLLAPSE,
	// Linux 6.1 and later), each huge page of address space once: a peer's
	// process_vm_readv or _writev pins every page of the range before it
	// copies, which with 4 KiB pages cost more than the copy from 64 KiB
	// up. Collapsing copies the region's memory once, and may back the
	// rest of its huge page with memory of its own (up to 2 MiB each).
	KeepPages bool
	// HeapSize is the virtual size of the device's shared heap, which holds
	// every provider-allocated MR and queue-pair ring; only touched pages
	// cost memory. Zero means 64 GiB.
	HeapSize int64
	// SpinDuration is how long CQ.Wait polls before it starts yielding the
	// core; YieldDuration how long it then polls with sched_yield before it
	// sleeps on a futex. A cross-core wake-up costs tens of microseconds, so
	// the spin is what keeps latency low; the sleep is what keeps an idle
	// rank at zero CPU. Zero means 20 µs and 200 µs; negative means none.
	SpinDuration  time.Duration
	YieldDuration time.Duration
	// ContendedDuration is how long CQ.Wait polls, without sched_yield,
	// once the process finds its CPU shared with another runnable thread
	// (shmsync.Policy.Contended): a CPU given away then comes back only
	// after the other thread's time slice. Zero means 3 ms, or none with
	// PollYield (the peer may need this CPU); negative means none.
	ContendedDuration time.Duration
}

// ErrNotSameHost is returned (wrapped, with verbs.ErrInvalidArgument) when a
// queue pair is connected to an address from another kernel or network
// namespace: shared memory cannot reach it.
var ErrNotSameHost = errors.New("shm: peer is not on the same host (kernel boot id and network namespace differ)")

const providerName = "shm"

type provider struct{}

func (provider) Name() string { return providerName }

// Traits: shm is the first choice between ranks of one host.
func (provider) Traits() verbs.Traits {
	return verbs.Traits{
		Preference:   10,
		SharesMemory: true,
		RegCache:     verbs.SoftRegCache, // registering is a table entry here
		// A SEND of up to 48 bytes lands in the completion's own line anyway.
		InlineSends: true,
		// process_vm_readv costs a few µs a call before it copies anything,
		// so two copies through eager buffers win up to 32 KiB: against
		// 16 KiB ones (a 32 KiB message as two fragments), a ping-pong
		// took 0.82 of the time at 32 KiB and 0.81 at 64 KiB (two
		// fragments instead of four), a window of sends ran 1.48 times as
		// fast at 32 KiB and 0.86 at 16 KiB (osu-compare, 7 rounds). p2p
		// halves it where a host has many ranks (its eagerMemBudget).
		EagerSize: 32 << 10,
		// Up to 64 KiB, fragments through those buffers beat the
		// rendezvous: process_vm_readv costs about 3 µs a call before it
		// copies anything (on the VM measured; 4.6 µs for 32 KiB against
		// 0.4 µs for a copy). At 64 KiB a ping-pong took 0.77 of the
		// rendezvous's time and a window of sends one way ran 1.37-1.45
		// times its rate, each way (bibw) 0.97-1.00; at 128 KiB the
		// fragments lost (latency 1.21, bw 0.90).
		PipelineSize: 64 << 10,
		// A window of sends (OSU bw: 64) waits for credits with 32 buffers;
		// posting more from the start would slow ping-pongs, whose buffers
		// would then span more cache, hence growth for peers that run out.
		SlotGrowth: 4,
		// With a core per rank, spin long: a reply delayed by a peer that was
		// descheduled for a moment is still caught without a sched_yield or a
		// futex wake-up. With more ranks than cores the peer may need this
		// very core: poll briefly, then yield the core with sched_yield (p2p
		// does, between its polls) before CQ.Wait, which yields some more
		// and sleeps; no yield phase above it otherwise.
		Wait: verbs.WaitHint{Spin: 100 * time.Microsecond, SpinShared: 2 * time.Microsecond},
	}
}

// CanConnect: shm connects ranks of one host only (one kernel, one network
// namespace).
func (provider) CanConnect(local, remote verbs.PeerInfo) bool { return local.SameHost(remote) }

func init() { verbs.Register(provider{}) }
