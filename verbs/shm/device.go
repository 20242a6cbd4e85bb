//go:build linux

package shm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/verbs"
)

var errUnavailable = verbs.ErrUnavailable

// HostID is this process's same-host identity (internal/hostid.ID): the
// running kernel's boot id plus the inode of its network namespace. Two
// ranks may use shm exactly when their HostIDs are equal (same kernel, same
// network namespace); the host name plays no part, so network namespaces
// used as hosts are told apart. The p2p layer compares identities (or
// calls AddressHostID on a peer's queue-pair address) to choose shm.
func HostID() (string, error) { return hostIdentity() }

// devices maps device ids to the open devices of this process, so that a
// peer in the same process reaches registered Go memory directly.
var devices sync.Map // uint64 → *Device

var sockCounter atomic.Uint64

// Device is an open shared-memory device. It implements verbs.Device.
type Device struct {
	opts   Options
	name   string
	hostID string
	devID  uint64
	pid    int
	uid    int
	log    *slog.Logger
	caps   verbs.Caps
	wait   shmsync.Policy // CQ.Wait's
	// touch bounds the receive buffers mapped ahead of their first
	// message, in this process and in its mappings of peers' memory
	// (PostRecv, touchPosted).
	touch *ntcopy.Budget
	// huge collapses registered memory into huge pages once cmaSeen: a
	// queue pair of this device reaches its peer's memory by cross-memory
	// attach, and so, with the same rights, the peer reaches ours
	// (huge_linux.go).
	huge    hugeSet
	cmaSeen atomic.Bool

	// memGuard keeps the device memory mapped while a CQ waiter sleeps on a
	// futex word in it or a cancellation kicks one: Close takes it for
	// writing (after waking every waiter) before it unmaps.
	memGuard sync.RWMutex
	memGone  bool

	fd      int    // the device memfd
	mem     []byte // its whole mapping
	memSize int64

	sockName string // abstract socket name, without the leading '@'
	ln       *net.UnixListener
	wakeFD   atomic.Int32 // the socket that sends wake-up datagrams (park.go); -1 once closed

	// mrTab finds local MRs by key index without a lock (the post path).
	mrTab [maxMR]atomic.Pointer[mr]

	mu       sync.Mutex
	closed   bool
	heap     heap
	mrGen    [maxMR]uint16
	mrNext   int
	mrFree   []int
	cqUsed   [maxCQ]bool
	cqs      map[*cq]struct{}
	pds      map[*pd]struct{}
	qps      map[uint32]*QP
	qpnNext  uint32
	peers    map[uint64]*peerMap
	accepted map[*net.UnixConn]*QP
	wg       sync.WaitGroup
}

// Open opens a shared-memory device: it creates the device's memfd heap
// and starts listening on an abstract Unix socket for peers.
func Open(ctx context.Context, o Options) (*Device, error) {
	fail := func(err error) (*Device, error) {
		return nil, &verbs.Error{Op: "Open", Provider: providerName, Index: -1, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if o.UserMem == UserMemDirect || o.UserMem > UserMemCopy {
		return fail(fmt.Errorf("%w: Options.UserMem %v cannot be forced (use auto, cma or copy)", verbs.ErrInvalidArgument, o.UserMem))
	}
	host := o.HostID
	if host == "" {
		h, err := hostIdentity()
		if err != nil {
			return fail(err)
		}
		host = h
	}
	if len(host) > 200 {
		return fail(fmt.Errorf("%w: Options.HostID is %d bytes, at most 200", verbs.ErrInvalidArgument, len(host)))
	}
	size := o.HeapSize
	if size == 0 {
		size = 64 << 30
	}
	if size < 1<<20 {
		return fail(fmt.Errorf("%w: Options.HeapSize %d is below 1 MiB", verbs.ErrInvalidArgument, size))
	}
	d := &Device{
		opts:     o,
		hostID:   host,
		pid:      os.Getpid(),
		uid:      os.Getuid(),
		log:      o.Logger,
		wait:     waitPolicy(o),
		touch:    ntcopy.NewBudget(PrefaultBytes),
		cqs:      map[*cq]struct{}{},
		pds:      map[*pd]struct{}{},
		qps:      map[uint32]*QP{},
		peers:    map[uint64]*peerMap{},
		accepted: map[*net.UnixConn]*QP{},
		mrNext:   1,
	}
	d.wakeFD.Store(-1)
	if !o.KeepPages {
		d.huge.size = hugePageSize()
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	d.devID = binary.LittleEndian.Uint64(rnd[:]) | 1
	d.qpnNext = uint32(d.devID>>40)&0xfff0 | 0x10
	d.memSize = heapOff + size
	d.caps = d.computeCaps()
	fd, err := memfd("rdmago-shm", d.memSize)
	if err != nil {
		return fail(fmt.Errorf("%w: %v", verbs.ErrUnavailable, err))
	}
	d.fd = fd
	d.mem, err = mapShared(fd, d.memSize)
	if err != nil {
		closeFD(fd)
		return fail(fmt.Errorf("%w: %v", verbs.ErrUnavailable, err))
	}
	d.heap = heap{next: heapOff, end: uint64(d.memSize)}
	binary.LittleEndian.PutUint64(d.mem[hdrMagic:], segMagic)
	binary.LittleEndian.PutUint32(d.mem[hdrVersion:], segVersion)
	binary.LittleEndian.PutUint32(d.mem[hdrPID:], uint32(d.pid))
	binary.LittleEndian.PutUint64(d.mem[hdrDevID:], d.devID)
	binary.LittleEndian.PutUint64(d.mem[hdrSize:], uint64(d.memSize))
	binary.LittleEndian.PutUint64(d.mem[hdrCQOff:], cqOff)
	binary.LittleEndian.PutUint64(d.mem[hdrMaxCQ:], maxCQ)
	binary.LittleEndian.PutUint64(d.mem[hdrMROff:], mrOff)
	binary.LittleEndian.PutUint64(d.mem[hdrMaxMR:], maxMR)

	// The abstract name is unique per job (token hash), process and device,
	// so parallel tests and jobs never collide, and it names no file.
	th := sha256.Sum256(append([]byte("rdmago-shm-job:"), o.Token...))
	d.sockName = fmt.Sprintf("rdmago-shm.%s.%d.%d.%s", hex.EncodeToString(th[:6]), d.pid, sockCounter.Add(1), hex.EncodeToString(rnd[:3]))
	d.name = fmt.Sprintf("shm%d", sockCounter.Load()-1)
	d.ln, err = net.ListenUnix("unix", &net.UnixAddr{Name: "@" + d.sockName, Net: "unix"})
	if err != nil {
		d.release()
		return fail(fmt.Errorf("%w: listening on abstract socket: %v", verbs.ErrUnavailable, err))
	}
	wfd, err := openWakeFD()
	if err != nil {
		d.ln.Close()
		d.release()
		return fail(fmt.Errorf("%w: a socket for wake-ups: %v", verbs.ErrUnavailable, err))
	}
	d.wakeFD.Store(int32(wfd))
	devices.Store(d.devID, d)
	d.wg.Add(1)
	go d.acceptLoop()
	d.log.Debug("shm: device open", "device", d.name, "socket", "@"+d.sockName, "host", d.hostID, "usermem", o.UserMem)
	return d, nil
}

// waitPolicy is CQ.Wait's polling: Options.SpinDuration and YieldDuration,
// whose defaults depend on DeviceOptions.PollYield. A waiter whose ranks
// outnumber the CPUs yields the core at once, as the sender of what it
// waits for may need this very core: a spin there only delays the sender
// until the scheduler preempts the spinner.
func waitPolicy(o Options) shmsync.Policy {
	spin, yield, contended := 20*time.Microsecond, 200*time.Microsecond, shmsync.ContendedPoll
	if o.PollYield {
		spin, contended = 0, 0
	}
	return shmsync.Policy{Spin: defDur(o.SpinDuration, spin), Yield: defDur(o.YieldDuration, yield), Nap: time.Second,
		Contended: defDur(o.ContendedDuration, contended)}
}

func defDur(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	if d < 0 {
		return 0
	}
	return d
}

func (provider) Open(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error) {
	d, err := Open(ctx, Options{DeviceOptions: o})
	if err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Device) Name() string     { return d.name }
func (d *Device) Provider() string { return providerName }

// HostID is the same-host identity this device advertises.
func (d *Device) HostID() string { return d.hostID }

// UserMemPolicy is the configured way peers reach RegMR memory; QP.UserMemPath
// says what a connected queue pair actually uses.
func (d *Device) UserMemPolicy() UserMemPath { return d.opts.UserMem }

func (d *Device) Caps() verbs.Caps { return d.caps }

func (d *Device) computeCaps() verbs.Caps {
	return verbs.Caps{
		MaxMsgSize:     1 << 31,
		MaxMRSize:      uint64(d.memSize - heapOff),
		MaxQP:          1 << 16,
		MaxQPWR:        1 << 14,
		MaxSGE:         maxSGE,
		MaxInline:      maxInline,
		MaxCQE:         1 << 20,
		MaxRdAtom:      16,
		Atomics:        verbs.AtomicGlob,
		UserMemAtomics: false,
		Latency:        150 * time.Nanosecond,
		Bandwidth:      20e9,
	}
}

const (
	maxSGE = 16
	// An inline SEND costs what one from registered memory does (its
	// bytes are copied once either way, and kept only while it waits for
	// a receive), so the limit is generous: it covers an eager message of
	// the traits' EagerSize and its header (p2p's frames then skip the
	// staging copy).
	maxInline = 64 << 10
)

func (d *Device) opErr(op string, qpn uint32, idx int, err error) error {
	return &verbs.Error{Op: op, Provider: providerName, QPNum: qpn, Index: idx, Err: err}
}

func (d *Device) AllocPD() (verbs.PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, d.opErr("AllocPD", 0, -1, verbs.ErrClosed)
	}
	p := &pd{d: d, id: pdCounter.Add(1)}
	d.pds[p] = struct{}{}
	return p, nil
}

var pdCounter atomic.Uint32

// Close fails outstanding work with WR_FLUSH_ERR, closes every object of the
// device, stops serving peers (their queue pairs see the link drop and fail
// with RETRY_EXC_ERR) and releases the memfd.
func (d *Device) Close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return d.opErr("Close", 0, -1, verbs.ErrClosed)
	}
	d.closed = true
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	cqs := make([]*cq, 0, len(d.cqs))
	for c := range d.cqs {
		cqs = append(cqs, c)
	}
	conns := make([]*net.UnixConn, 0, len(d.accepted))
	for c := range d.accepted {
		conns = append(conns, c)
	}
	d.mu.Unlock()
	d.ln.Close()
	for _, q := range qps {
		q.destroy()
	}
	for _, c := range conns {
		c.Close()
	}
	for _, c := range cqs {
		c.shut()
	}
	d.wg.Wait()
	d.memGuard.Lock()
	d.memGone = true
	d.memGuard.Unlock()
	if fd := d.wakeFD.Swap(-1); fd >= 0 {
		closeFD(int(fd))
	}
	devices.Delete(d.devID)
	d.mu.Lock()
	for i := range d.mrTab {
		if m := d.mrTab[i].Load(); m != nil {
			m.unpin()
			d.mrTab[i].Store(nil)
		}
	}
	d.mu.Unlock()
	d.release()
	return nil
}

func (d *Device) release() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for id, p := range d.peers {
		p.unmap()
		delete(d.peers, id)
	}
	if d.mem != nil {
		unmap(d.mem)
		d.mem = nil
	}
	if d.fd >= 0 {
		closeFD(d.fd)
		d.fd = -1
	}
}

// heap is a first-fit page allocator over the device memfd. Freed ranges
// are punched out (their pages go back to the kernel and read as zero), so
// a reused range is zeroed as AllocMR promises.
type heap struct {
	next, end uint64
	free      []span // sorted by off, coalesced
}

type span struct{ off, n uint64 }

func (h *heap) alloc(n uint64) (uint64, bool) {
	n = roundPage(max(n, 1))
	for i, s := range h.free {
		if s.n >= n {
			off := s.off
			if s.n == n {
				h.free = append(h.free[:i], h.free[i+1:]...)
			} else {
				h.free[i] = span{s.off + n, s.n - n}
			}
			return off, true
		}
	}
	if h.end-h.next < n {
		return 0, false
	}
	off := h.next
	h.next += n
	return off, true
}

func (h *heap) release(off, n uint64) {
	n = roundPage(max(n, 1))
	i := sort.Search(len(h.free), func(i int) bool { return h.free[i].off > off })
	h.free = append(h.free, span{})
	copy(h.free[i+1:], h.free[i:])
	h.free[i] = span{off, n}
	// Coalesce with the neighbours.
	if i+1 < len(h.free) && h.free[i].off+h.free[i].n == h.free[i+1].off {
		h.free[i].n += h.free[i+1].n
		h.free = append(h.free[:i+1], h.free[i+2:]...)
	}
	if i > 0 && h.free[i-1].off+h.free[i-1].n == h.free[i].off {
		h.free[i-1].n += h.free[i].n
		h.free = append(h.free[:i], h.free[i+1:]...)
	}
	if last := len(h.free) - 1; last >= 0 && h.free[last].off+h.free[last].n == h.next {
		h.next = h.free[last].off
		h.free = h.free[:last]
	}
}

// allocMem takes n bytes of zeroed heap.
func (d *Device) allocMem(n uint64) (uint64, error) {
	off, ok := d.heap.alloc(n)
	if !ok {
		return 0, fmt.Errorf("%w: the shm heap (%d bytes, Options.HeapSize) has no room for %d bytes", verbs.ErrInvalidArgument, d.memSize-heapOff, n)
	}
	return off, nil
}

// freeMem punches the range out and returns it to the heap.
func (d *Device) freeMem(off, n uint64) {
	n = roundPage(max(n, 1))
	if err := punchHole(d.fd, int64(off), int64(n)); err != nil {
		d.log.Warn("shm: releasing heap pages", "err", err)
		clear(d.mem[off : off+n])
	}
	d.heap.release(off, n)
}

// PrefaultBytes bounds the memory a device maps ahead of its use: the
// pages of the receive buffers posted in its provider memory, and of the
// peers' buffers its QPs will write (see ntcopy.Touch: on the VM measured
// each page's first access cost about 5 µs in each process, which made
// the first 32 messages through fresh p2p buffers 10-40 times as slow).
// p2p posts 32 buffers of 32 KiB a peer over shm (16 KiB from 10 ranks on
// a host), so this covers 64 peers or more; past it, pages are mapped at
// their first access.
const PrefaultBytes = 64 << 20

// doorbell is a CQ's wake-up words in the device segment, and the way to
// its parking socket (park.go).
type doorbell struct {
	bell   shmsync.Bell // seq (the futex word) and its sleepers
	parked *uint32      // consumers about to park on the CQ's socket
	woken  *uint32      // 1: a wake-up datagram was sent since the sleeper last parked
	w      *waker
}

// doorbellAt is the doorbell of CQ idx in mem, the memory of the device
// whose abstract socket is devSock; d sends the wake-up datagrams.
func (d *Device) doorbellAt(mem []byte, idx uint32, devSock string) doorbell {
	off := uint64(cqOff) + uint64(idx)*dbSize
	return doorbell{bell: shmsync.BellAt(mem, int(off)), parked: word32(mem, off+8),
		woken: word32(mem, off+12), w: newWaker(d, parkName(devSock, idx))}
}

// ring wakes the consumers of db, if any sleep or park. The caller has
// just published with an atomic store, so either a sleeper sees the new
// data before it sleeps or this sees its count (internal/shmsync).
func (db doorbell) ring() {
	db.bell.Ring()
	if shmsync.Asleep(db.parked) {
		db.wakeParked()
	}
}

// wakeParked sends the parked sleeper one datagram per sleep: while it
// stays parked (its process busy elsewhere, the poller not yet run), later
// producers see woken and skip the system call.
func (db doorbell) wakeParked() {
	if atomic.LoadUint32(db.woken) == 0 && atomic.CompareAndSwapUint32(db.woken, 0, 1) {
		db.w.wake()
	}
}

// kick wakes unconditionally (close, cancellation).
func (db doorbell) kick() {
	db.bell.Kick()
	if shmsync.Asleep(db.parked) {
		atomic.StoreUint32(db.woken, 1)
		db.w.wake()
	}
}
