package comm

import (
	"context"
	"encoding/binary"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/p2p"
)

// sharedSlot is the data size of each rank's two slots. Large slots mean
// few rounds for large vectors, which matters when ranks outnumber cores
// (a round needs every rank to run); only the pages a call touches cost
// memory.
const sharedSlot = 1 << 20

// maxSharedRanks bounds the jobs that get a shared region: its algorithms
// read every rank's slot, which stops paying well before this.
const maxSharedRanks = 64

// sharedRegion is the world communicator's collectives.SharedRegion: a p2p
// window of provider memory that every rank maps (p2p.Window.Direct), when
// every rank of the job is on one host and reaches every other through a
// provider that shares memory (verbs.Traits.SharesMemory). Only the world's
// Engine uses it (one Engine per region: its round ids start at 1).
type sharedRegion struct {
	ep   *p2p.Endpoint
	mem  [][]byte
	spin time.Duration
	// contended is the endpoint's ContendedPoll: how long a waiter polls
	// on a CPU other threads want before it sleeps.
	contended time.Duration
	cma       bool // every rank can read every other's memory (ReadPeer)
	// crowded: the ranks outnumber the CPUs of some rank's host view
	// (p2p.Endpoint.Crowded), agreed by every rank.
	crowded bool
}

// newSharedRegion makes the region (a collective over the world), or
// returns nil when the job does not qualify. Every rank reaches the same
// answer: transports are symmetric, and whether every mapping worked is
// agreed on through the store.
func newSharedRegion(ctx context.Context, ep *p2p.Endpoint, store bootstrap.Store, name string) (*sharedRegion, error) {
	n, me := ep.Size(), ep.Rank()
	if n < 2 || n > maxSharedRanks {
		return nil, nil
	}
	for r := range n {
		if r != me && !ep.Traits(r).SharesMemory {
			return nil, nil
		}
	}
	// The window is never closed on its own: its memory goes with the
	// endpoint, after the Engine that uses it.
	size := collectives.SharedRegionSize(sharedSlot)
	win, err := ep.AllocWindow(ctx, size)
	if err != nil {
		return nil, err
	}
	s := &sharedRegion{ep: ep, mem: make([][]byte, n)}
	s.spin, _ = ep.WaitPolicy()
	s.contended = ep.ContendedPoll()
	ok := byte(1)
	for r := range n {
		if s.mem[r] = win.Direct(r); len(s.mem[r]) < size {
			ok = 0
		}
	}
	// The vote also publishes a probe: 8 known bytes whose address every
	// peer reads with ReadPeer, to learn whether single-copy reads of a
	// peer's own buffers work (process_vm_readv may be forbidden).
	probe := make([]byte, 8)
	binary.LittleEndian.PutUint64(probe, sharedProbe^uint64(me))
	vote := binary.LittleEndian.AppendUint64([]byte{ok}, uint64(uintptr(unsafe.Pointer(&probe[0]))))
	votes, err := bootstrap.Allgather(ctx, store, "comm/"+name+"/shared", vote)
	if err != nil {
		return nil, err
	}
	cma := byte(1)
	for r, v := range votes {
		if len(v) != 9 || v[0] != 1 {
			return nil, nil
		}
		if r == me {
			continue
		}
		got := make([]byte, 8)
		if ep.ReadPeer(r, binary.LittleEndian.Uint64(v[1:]), got) != nil || binary.LittleEndian.Uint64(got) != sharedProbe^uint64(r) {
			cma = 0
		}
	}
	// Every rank must agree (the algorithms differ): a second round, which
	// also agrees on crowding (any rank that sees more ranks than CPUs).
	crowded := byte(0)
	if ep.Crowded() {
		crowded = 1
	}
	cmas, err := bootstrap.Allgather(ctx, store, "comm/"+name+"/shared-cma", []byte{cma, crowded})
	runtime.KeepAlive(probe) // peers read it until the second round
	if err != nil {
		return nil, err
	}
	s.cma = true
	for _, v := range cmas {
		s.cma = s.cma && len(v) == 2 && v[0] == 1
		s.crowded = s.crowded || len(v) == 2 && v[1] == 1
	}
	return s, nil
}

func (s *sharedRegion) Mem(rank int) []byte { return s.mem[rank] }

// sharedProbe is the probe's pattern (xor the rank).
const sharedProbe = 0x5348_4d50_524f_4245

// ReadPeer reads rank's memory in one copy (collectives.PeerReader); it is
// offered only when every rank probed that it works.
func (s *sharedRegion) ReadPeer(rank int, addr uint64, dst []byte) error {
	if !s.cma {
		return fmt.Errorf("%w: single-copy reads between the ranks were not possible", ErrUnsupported)
	}
	return s.ep.ReadPeer(rank, addr, dst)
}

// WritePeer writes rank's memory in one copy (collectives.PeerWriter),
// under the same condition as ReadPeer: process_vm_writev needs the same
// permission as process_vm_readv, which the ranks probed.
func (s *sharedRegion) WritePeer(rank int, addr uint64, src []byte) error {
	if !s.cma {
		return fmt.Errorf("%w: single-copy writes between the ranks were not possible", ErrUnsupported)
	}
	return s.ep.WritePeer(rank, addr, src)
}

// CanReadPeer reports whether ReadPeer works (collectives.PeerReader).
func (s *sharedRegion) CanReadPeer() bool       { return s.cma }
func (s *sharedRegion) Crowded() bool           { return s.crowded }
func (s *sharedRegion) Failed() <-chan struct{} { return s.ep.Failed() }
func (s *sharedRegion) FailFlag() *atomic.Bool  { return s.ep.FailFlag() }
func (s *sharedRegion) Err() error              { return s.ep.Err() }

// WaitPolicy follows the endpoint's wait policy: spin while a rank has a
// core to itself, then give the CPU away (sched_yield) for a moment, then
// sleep on the bell (collectives.SharedRegion). The sleep is bounded so
// that the waiter re-checks ctx and the group's failure.
func (s *sharedRegion) WaitPolicy() shmsync.Policy {
	return shmsync.Policy{Spin: s.spin, Yield: sharedYield, Nap: sharedSleep, Contended: s.contended}
}

const (
	// sharedYield is how long a waiter yields before it sleeps. With more
	// ranks than cores a sleep costs a wake-up (tens of µs on a VM, where
	// an idle vCPU halts), while a yield hands the core straight to a rank
	// that has work, so a long yield (Open MPI only yields) serves
	// oversubscribed barriers best.
	sharedYield = 2 * time.Millisecond
	sharedSleep = time.Millisecond // the longest sleep between checks
)
