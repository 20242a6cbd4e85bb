package tcp

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/internal/hostid"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// Name is the provider name.
const Name = "tcp"

func init() { verbs.Register(provider{}) }

type provider struct{}

func (provider) Name() string { return Name }

// Traits: tcp reaches any rank, after shm and ibv. Its waiters read their
// sockets themselves, so they poll them (PollSpin) rather than spin on
// the completion queue, which the reader goroutines fill.
func (provider) Traits() verbs.Traits {
	return verbs.Traits{
		Preference: 30,
		RegCache:   verbs.SoftRegCache, // registering is a table entry here
		// A waiting receiver reads frames of up to 1 MiB itself, and a
		// matched message's body goes from the socket into place: up to
		// 256 KiB one frame beats a rendezvous's three more one-way trips
		// (RTS, READ, FIN) and a train of smaller frames (2 hosts: 256 KiB
		// latency 0.84 of four 64 KiB frames' time, bcast, allgather,
		// alltoall and allreduce 0.60-0.73).
		EagerSize: 256 << 10,
		// Where a job's size halves the eager limit (p2p's buffer budget),
		// pieces up to 256 KiB beat the rendezvous's extra trips through
		// both kernels; above, the rendezvous does as well or better.
		PipelineSize: 256 << 10,
		// No ReadChunk: a waiting receiver streams a READ's response into
		// place as it arrives, so one READ per message overlaps the two
		// kernels' copies as pieces did, without their extra frames and
		// wake-ups (16 futex calls per 512 KiB message in 128 KiB pieces,
		// 9 in one READ).
		// Where ranks outnumber the CPUs, a waiter takes only whole frames
		// that fit its read buffer (DriveQueued) and leaves larger ones to
		// the link's reader goroutine, a hand-off each: there 128 KiB
		// pieces, as before waiters streamed.
		ReadChunkCrowded: 128 << 10,
		// Long enough to catch a loopback reply, which a shorter poll mostly
		// misses, and one delayed while this rank shares its CPU with another
		// busy thread, where a sleeper is woken only after that thread's
		// time slice (measured in the commit that set 1 ms).
		PollSpin: time.Millisecond,
		// The requester copies an inline SEND into its queue entry as it
		// would copy a staging buffer, and an unsignaled one asks for no
		// ACK frame: 15 of 16 small frames then cost the peer no ACK to
		// write and this side no completion to handle (2-host bcast of
		// 4-256 B: 0.75-0.89 of signaled).
		InlineSends: true,
	}
}

// CanConnect: tcp connects any two ranks.
func (provider) CanConnect(_, _ verbs.PeerInfo) bool { return true }

func (provider) Open(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error) {
	return Open(ctx, Options{Name: o.Name, Listen: o.Listen, Advertise: o.Advertise, Token: o.Token,
		ConnectTimeout: o.ConnectTimeout, PollSpin: o.PollSpin, PollYield: o.PollYield, Logger: o.Logger})
}

// Options configure a tcp device.
type Options struct {
	// Name is the device name; empty means "tcp:<advertised address>".
	Name string
	// Listen is where the device accepts connections, "host:port".
	// Empty means "127.0.0.1:0" (loopback, any free port).
	Listen string
	// Advertise is the host (or host:port) peers dial, when it differs from
	// the listener's address; without a port the listener's port is used.
	Advertise string
	// Token is the job secret both ends of every connection prove they know
	// (mutual HMAC-SHA256 challenge-response; it never crosses the wire).
	// Empty disables nothing but makes the proof trivial: tests only.
	Token []byte
	// ConnectTimeout bounds how long a QP that reached RTR may wait for its
	// connection before its work fails with RETRY_EXC_ERR. Zero means 30 s.
	ConnectTimeout time.Duration
	// HandshakeTimeout bounds how long an incoming connection may take to
	// authenticate before it is dropped. Zero means 10 s.
	HandshakeTimeout time.Duration
	// MinAckTimeout is a floor under every QP's ACK timeout
	// (timeout × (retry_cnt+1)) after which a silent peer fails work with
	// RETRY_EXC_ERR: the peer's progress goroutine is at the mercy of its
	// scheduler, so a loaded machine must not look like a dead peer. A peer
	// whose process dies is noticed at once through the connection, not by
	// this timer. Zero means 4 s (see defaultMinAckTimeout); negative means
	// no floor.
	MinAckTimeout time.Duration
	// DialRetry is the pause between connection attempts while the peer's
	// listener refuses. Zero means 20 ms.
	DialRetry time.Duration
	// PollGrace is how long a link's reader goroutine leaves the socket to
	// the goroutines that wait on the QP's CQ after the last of them stopped
	// reading it (see doc.go): a waiter in a loop comes back sooner and
	// finds its next completion itself, saving two goroutine hand-offs per
	// message; traffic nobody waits for, and an ACK a waiter held back, go
	// at most this late. Zero means 500 µs, or 10 ms with PollYield: a
	// waiter without a CPU to itself comes back when the scheduler gives
	// it one, often more than 500 µs later, and the reader goroutine
	// resumed meanwhile only costs the process that CPU (a timer, a read
	// that finds nothing, a wait in the network poller, an interrupt when
	// the waiter takes the socket back). More than 10 ms means 10 ms (it
	// must stay far below the peer's ACK timeout); negative means waiters
	// never read the socket themselves.
	PollGrace time.Duration
	// PollSpin is how long a goroutine that reads a link itself while it
	// waits on the QP's CQ (see doc.go) polls the socket without blocking
	// before it sleeps in the network poller: a reply within it is read
	// without the wake-up (futex, epoll, scheduler), which on a VM costs
	// more than the message. A waiter streaming a large READ response
	// polls between its reads while bytes keep coming within PollSpin of
	// each other. Each poll is a system call, so it only pays when this
	// process has a CPU to itself. Zero or negative: no polling.
	PollSpin time.Duration
	// PollYield makes the polling of PollSpin give the CPU to other
	// processes (sched_yield) after each poll that finds nothing: for ranks
	// that outnumber the CPUs, which must not hold a core the sender of
	// their reply needs, yet should not pay a sleep and wake-up per message.
	PollYield bool
	// LocalCongestion is the TCP congestion control of connections that
	// stay within this machine's kernel: to a loopback address or to
	// their own address, or to a peer device on the same kernel (another
	// network namespace or container of this machine, joined by virtual
	// devices), as their QP addresses say. Empty means "reno": there is no
	// network to share, and BBR, the default of some systems, sizes its
	// window from the round trip it measures, microseconds there, and
	// takes the reordering of segments that two CPUs hand the kernel at
	// once for loss: it kept a 1 MiB READ response waiting for ACKs
	// halfway (with reno one-host latency at 1-4 MiB took 0.6 of the time,
	// between network namespaces 0.3). "system" keeps the system's
	// default (net.ipv4.tcp_congestion_control); another name must be one
	// the kernel offers and allows this process
	// (net.ipv4.tcp_allowed_congestion_control), or Open fails.
	LocalCongestion string
	// Congestion is the TCP congestion control of connections to other
	// machines, as LocalCongestion; empty or "system" keeps the system's
	// default, an administrator's choice for the network.
	Congestion string
	// HeaderAloneMin is the payload size from which a frame makes a
	// polling waiter read the headers after it alone (see doc.go), so
	// that a payload of at least 16 KiB behind such a header goes from the
	// socket straight into its destination (a posted receive, a WRITE's
	// target) instead of through the read buffer with what follows it:
	// one more system call per frame, one copy fewer. Frames larger than
	// the read buffer always do. Zero and negative mean only those (see
	// headerAloneDefault for why that is the default).
	HeaderAloneMin int
	// Logger receives diagnostics (dropped connections, failed handshakes).
	// Nil is silent.
	Logger *slog.Logger
}

// yieldSpin is how long a waiter on a CQ of several links polls their
// sockets, giving the CPU away between polls, before it sleeps
// (softrc.Config.YieldSpin): with PollYield, PollSpin; else none.
func yieldSpin(o Options) time.Duration {
	if !o.PollYield || o.PollSpin <= 0 {
		return 0
	}
	return o.PollSpin
}

// Options.PollGrace's default where a waiter has a CPU to itself, and
// its bound (the default where it has not).
const (
	defaultPollGrace = 500 * time.Microsecond
	maxPollGrace     = 10 * time.Millisecond
)

// defaultMinAckTimeout is Options.MinAckTimeout's default. Over TCP the
// ACK timer only catches a peer that is alive but stuck (the kernel
// retransmits, and a peer that dies closes the connection), so a long
// floor delays nothing else. Short ones mistook load for a dead peer: on
// 2 CPUs at load 19, rdmabench runs saw ACKs 100-440 ms late, the peer's
// process waiting for a CPU, where the floor was 250 ms. This is ten times
// that, still below p2p's 8.6 s (timeout 18, retry_cnt 7) and far below
// the 30-odd seconds of InfiniBand stacks' defaults (timeout 20, 4.3 s a
// try, retried 7 times).
const defaultMinAckTimeout = 4 * time.Second

// ErrDisconnected is the cause recorded when a link is dropped on purpose.
var ErrDisconnected = verbs.ErrDisconnected

type transport struct {
	opts      Options
	dev       *softrc.Device
	log       *slog.Logger
	ln        net.Listener
	id        uint64
	advertise string
	kernel    string // this device's kernel (hostid.Kernel), in its QP addresses
	// sysCongestion is the system's default congestion control (""
	// where unknown), which congest gives back to an accepted connection
	// to another kernel: it started with the listener's LocalCongestion.
	sysCongestion string
	ctx           context.Context
	cancel        context.CancelFunc
	wg            sync.WaitGroup
	// writers counts the links whose writer goroutine is writing: a write
	// the socket did not take waits for the network poller, which a
	// streaming read that polls the socket keeps from running (spinRead).
	writers atomic.Int32

	mu      sync.Mutex
	closed  bool
	waiting map[uint32]*softrc.QP   // acceptor side: QPs in RTR waiting for their dialer
	pending map[uint32]*pendingConn // acceptor side: authenticated conns waiting for their QP
	links   map[*link]struct{}
	raw     map[net.Conn]struct{} // connections in handshake
}

// Open opens a tcp device: it listens at once and serves connections from
// peers until Close.
func Open(ctx context.Context, o Options) (verbs.Device, error) {
	fail := func(err error) (verbs.Device, error) {
		return nil, &verbs.Error{Op: "Open", Provider: Name, Index: -1, Err: err}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 30 * time.Second
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = 10 * time.Second
	}
	if o.MinAckTimeout == 0 {
		o.MinAckTimeout = defaultMinAckTimeout
	}
	if o.PollGrace == 0 {
		o.PollGrace = defaultPollGrace
		if o.PollYield {
			o.PollGrace = maxPollGrace
		}
	}
	o.PollGrace = min(o.PollGrace, maxPollGrace)
	if o.DialRetry <= 0 {
		o.DialRetry = 20 * time.Millisecond
	}
	if o.HeaderAloneMin <= 0 {
		o.HeaderAloneMin = headerAloneDefault // what does not fit the buffer
	}
	for _, c := range []struct{ field, name string }{{"LocalCongestion", o.LocalCongestion}, {"Congestion", o.Congestion}} {
		if err := checkCongestion(c.name); err != nil {
			return fail(fmt.Errorf("%w: Options.%s %q: %v", verbs.ErrInvalidArgument, c.field, c.name, err))
		}
	}
	if o.LocalCongestion == "" {
		o.LocalCongestion = defaultLocalCongestion // where it cannot be set, nothing is
	}
	// Accepted connections start with the listener's congestion control:
	// LocalCongestion, as most of a job's are, so that one switched later
	// (congest) never started another one. A switch away from BBR leaves
	// its pacing on: between network namespaces, whose veth carries
	// 1500-byte segments, 8-16 KiB ping-pongs took 1.4-1.7 times as long.
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		setCongestionOn(rc, o.LocalCongestion)
		return nil
	}}
	ln, err := lc.Listen(ctx, "tcp", o.Listen)
	if err != nil {
		return fail(fmt.Errorf("%w: listen on %q: %v", verbs.ErrUnavailable, o.Listen, err))
	}
	adv := ln.Addr().String()
	if o.Advertise != "" {
		if _, _, err := net.SplitHostPort(o.Advertise); err == nil {
			adv = o.Advertise
		} else {
			_, port, _ := net.SplitHostPort(adv)
			adv = net.JoinHostPort(strings.Trim(o.Advertise, "[]"), port)
		}
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	t := &transport{opts: o, ln: ln, id: binary.BigEndian.Uint64(idb[:]), advertise: adv,
		waiting: map[uint32]*softrc.QP{}, pending: map[uint32]*pendingConn{}, links: map[*link]struct{}{}, raw: map[net.Conn]struct{}{}}
	t.kernel, _ = hostid.Kernel() // "" where unknown: no peer counts as sharing it
	t.sysCongestion = systemCongestionName()
	t.log = o.Logger
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.ctx, t.cancel = context.WithCancel(context.Background())
	name := o.Name
	if name == "" {
		name = "tcp:" + adv
	}
	caps := softrc.DefaultCaps()
	caps.Latency = 20 * time.Microsecond
	caps.Bandwidth = 1e9
	t.dev = softrc.NewDevice(softrc.Config{Provider: Name, Name: name, Caps: caps,
		ConnectTimeout: o.ConnectTimeout, MinAckTimeout: max(o.MinAckTimeout, 0), Logger: o.Logger,
		YieldSpin: yieldSpin(o)}, t)
	t.wg.Add(1)
	go t.acceptLoop()
	return t.dev, nil
}

func (t *transport) AddressPayload(uint32) []byte {
	return addrPayload{dev: t.id, kernel: t.kernel, host: t.advertise}.encode()
}

func (t *transport) CheckRemote(p []byte) error {
	a, err := decodeAddrPayload(p)
	if err != nil {
		return fmt.Errorf("%w: %v", verbs.ErrInvalidArgument, err)
	}
	if _, _, err := net.SplitHostPort(a.host); err != nil {
		return fmt.Errorf("%w: tcp address %q: %v", verbs.ErrInvalidArgument, a.host, err)
	}
	return nil
}

// dials decides who dials, the same way on both sides: the end whose
// (advertised address, QP number) sorts first.
func (t *transport) dials(q *softrc.QP, remote addrPayload, remoteQP uint32) bool {
	if t.advertise != remote.host {
		return t.advertise < remote.host
	}
	if t.id != remote.dev {
		return t.id < remote.dev
	}
	return q.Num() < remoteQP
}

func (t *transport) Connect(q *softrc.QP) {
	r := q.Remote()
	ra, err := decodeAddrPayload(r.Payload)
	if err != nil { // CheckRemote passed, so this cannot happen
		q.FailConnect(err)
		return
	}
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if t.dials(q, ra, r.QPNum) {
		t.wg.Add(1)
		t.mu.Unlock()
		go t.dial(q, ra, r.QPNum)
		return
	}
	if pc := t.pending[q.Num()]; pc != nil && pc.req.srcQP == r.QPNum && pc.req.srcDev == ra.dev {
		delete(t.pending, q.Num())
		t.mu.Unlock()
		t.accept(pc, q)
		return
	}
	t.waiting[q.Num()] = q
	t.mu.Unlock()
}

// Forget drops q from the acceptor's waiting table (it was closed or reset).
func (t *transport) Forget(q *softrc.QP) {
	t.mu.Lock()
	if t.waiting[q.Num()] == q {
		delete(t.waiting, q.Num())
	}
	t.mu.Unlock()
}

// track registers a connection that is not a link yet (handshake, dial), so
// Close can cut it short; untrack when it becomes a link or is dropped.
func (t *transport) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.raw[c] = struct{}{}
	return true
}

func (t *transport) untrack(c net.Conn) {
	t.mu.Lock()
	delete(t.raw, c)
	t.mu.Unlock()
}

func (t *transport) Close() error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return nil
	}
	t.closed = true
	links := make([]*link, 0, len(t.links))
	for l := range t.links {
		links = append(links, l)
	}
	for _, pc := range t.pending {
		pc.drop()
	}
	for c := range t.raw {
		_ = c.Close()
	}
	t.pending, t.waiting = nil, nil
	t.mu.Unlock()
	t.cancel()
	err := t.ln.Close()
	for _, l := range links {
		l.Close()
	}
	t.wg.Wait()
	return err
}

// logDrop logs a refused or failed incoming connection.
func (t *transport) logDrop(c net.Conn, err error) {
	t.log.Warn("tcp: dropped connection", "device", t.dev.Name(), "remote", c.RemoteAddr().String(), "err", err)
}
