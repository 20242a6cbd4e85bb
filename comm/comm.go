package comm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/comm/internal/launchers"
	"github.com/rdmago/rdmago/internal/hostid"
	"github.com/rdmago/rdmago/internal/shmsync"
	"github.com/rdmago/rdmago/p2p"
)

// Version is what every rank reports to the rendezvous; ranks of one job
// must agree on it.
const Version = "rdmago/comm 0.1"

// Options configure Init (and, through FromEnv's optional argument, the
// parts of a job that the launcher's environment does not fix). The zero
// value plus a rendezvous (Store, or Addr/Token/Rank/Size) is a working
// configuration.
type Options struct {
	// Store is an existing rendezvous (a *bootstrap.Client, a
	// bootstrap.NewMemory store in tests, a launcher's key-value service).
	// The communicator uses it for the whole job and never closes it.
	// When nil, Init joins the rendezvous at Addr itself (and closes that
	// connection at Close).
	Store bootstrap.Store
	// Addr is the rendezvous "host:port", Token the job secret (see
	// bootstrap.NewToken), Rank and Size this rank and the job size. Used
	// when Store is nil.
	Addr       string
	Token      []byte
	Rank, Size int
	// Serve makes this rank run the rendezvous server at Addr (usually rank
	// 0 when no launcher runs one; see bootstrap.Join).
	Serve bool

	// Transport chooses the verbs provider: "auto" (default: shm between
	// ranks of one host, tcp otherwise), "shm", "tcp", "ibv", or "loop"
	// (in-process tests). Every rank must choose the same.
	Transport string
	// Interfaces selects the network interfaces the transports listen on
	// when the job spans hosts ("eth0,ib0", "^docker0", "10.0.0.0/8"; see
	// bootstrap.Client.AdvertiseAddr). Empty picks the one that routes to
	// the rendezvous.
	Interfaces string
	// IBDevices selects the RDMA device and port of the ibv transport, as
	// NCCL_IB_HCA does: "mlx5_0:1,mlx5_1" (the first that opens), "^mlx5_2"
	// (all but), "=rxe1" (exact names, not prefixes); see
	// ibv.ParseDevices and docs/ibv.md. Empty means RDMAGO_IB_HCA, else
	// any device. A selection that opens no device fails Init with the
	// devices present in the error. It wins over P2P.Device.Name for ibv.
	IBDevices string
	// Hostname overrides how this rank identifies its host for the
	// rendezvous and the topology (ranks with the same Hostname are treated
	// as sharing a host by the hierarchical collectives, and a job whose
	// ranks name several advertises routable addresses). Empty means the
	// kernel's identity (internal/hostid: boot id and network namespace,
	// as the shm transport sees it); host names are then only shown.
	Hostname string
	// ConnectTimeout bounds Init: joining the rendezvous and connecting to
	// the peers. Zero means no bound beyond ctx. FromEnv sets it from
	// RDMARUN_TIMEOUT. It is not a deadline for communication.
	ConnectTimeout time.Duration

	// P2P are the point-to-point endpoint's options (eager limit,
	// liveness, ...). Its Provider, when set, wins over Transport.
	P2P p2p.Options
	// Collectives are the collective engine's options (algorithm overrides,
	// deterministic and debug modes). Every rank must pass the same.
	Collectives collectives.Options
	// NoEnv stops Init and FromEnv from reading the RDMAGO_* tuning
	// variables (RDMAGO_ALGORITHMS, RDMAGO_<COLL>_ALGO, RDMAGO_TUNE, RDMAGO_DEBUG,
	// RDMAGO_DETERMINISTIC, RDMAGO_IB_HCA; see docs/comm.md). Explicit
	// Collectives options and IBDevices always win over them.
	NoEnv bool

	// Status makes every rank serve the operation it is in to `rdmarun
	// status`, and rank 0 print who has not arrived when ranks wait in one
	// operation for StuckAfter (see docs/debugging.md). FromEnv turns it
	// on unless RDMAGO_STATUS=0.
	Status bool
	// StuckAfter is how long a rank may wait in one operation before rank
	// 0 reports the job as stuck (once per operation). Zero means
	// DefaultStuckAfter, negative never. FromEnv reads RDMAGO_STUCK_AFTER
	// when it is zero.
	StuckAfter time.Duration
	// statusOut receives the stuck-job report; nil means os.Stderr.
	statusOut io.Writer

	// Singleton makes FromEnv run the program as a job of one rank (rank 0
	// of 1, in-process rendezvous) when no launcher environment is found,
	// instead of failing. A malformed launcher environment still fails.
	Singleton bool

	// NoLinkProbe skips Init's measurement of the network between hosts
	// (see Peer.Latency); the collectives' cost model then takes the
	// transports' fixed estimates. A job on one host measures nothing.
	// Init and FromEnv set it from RDMAGO_LINK_PROBE=0 unless NoEnv. Rank
	// 0's setting decides for the job; a rank of the measured pair that
	// skips it leaves the other waiting for it up to 5 s.
	NoLinkProbe bool

	// Logger receives diagnostics from every layer. Nil means silent.
	Logger *slog.Logger

	// exit ends the process for Abort; nil means os.Exit. Only this
	// package's tests set it (export_test.go), so that an in-process job
	// can abort without ending the test binary.
	exit func(code int)
}

// world is what all communicators of one FromEnv / Init share: the
// endpoint, the rendezvous, the host map.
type world struct {
	ep        *p2p.Endpoint
	store     bootstrap.Store
	ownStore  io.Closer
	name      string // p2p.Options.Name, prefixes store keys
	log       *slog.Logger
	exit      func(int)
	collOpts  collectives.Options
	hostIdx   []int         // per world rank, dense host index
	hostNames []string      // per world rank, the name the rank reported
	shared    *sharedRegion // the world's shared memory, nil without
	net       netLink       // the network between hosts, as Init measured it (links.go)
	localRank int           // from the launcher, -1 when unknown
	localSize int
	job       *jobenv.Job
	p2pOpts   p2p.Options // the endpoint's, for the endpoints of Shrink

	// singleCopy is Comm.SingleCopyMin (links.go).
	singleCopy int

	// storeRanks maps the world's ranks to the rendezvous's (the job's
	// original ranks) in a world made by Shrink; nil means the same.
	storeRanks []int

	nextCtx  atomic.Uint32 // context id counter without an Adder store
	abortErr atomic.Pointer[error]
	settle   sync.Once // the first peer loss waits briefly for an abort notice
	reported sync.Once // the first failure caused by another rank is reported to the store
	stopOnce sync.Once
	stop     chan struct{}
	watchWG  sync.WaitGroup

	mu         sync.Mutex
	comms      map[*Comm]struct{} // live communicators other than the world
	departures map[int]*departure // world rank → what it reported before it left (departure.go)

	status *statusState // the status endpoint (status.go), nil without Options.Status

	lazy lazyStarts // non-blocking collectives started lazily (lazy.go)
}

// Comm is a communicator: a group of ranks, numbered 0..Size-1, that
// exchange messages and run collectives. The world communicator comes from
// FromEnv or Init; Split and Dup make others over the same connections.
//
// Concurrency: point-to-point operations (Send, Recv, Isend, Irecv) may be
// called from many goroutines at once. Collectives on one communicator
// must be called by every rank in the same order; calls from several
// goroutines are run one at a time, in the order they were made, so run
// concurrent collectives on Dup'ed communicators instead. Close may be
// called once; operations after it fail with ErrClosed.
type Comm struct {
	w       *world
	id      uint32 // context id: channels 2id (user) and 2id+1 (collectives)
	rank    int
	size    int
	members []int // communicator rank → world rank
	inv     []int // world rank → communicator rank, -1 if not a member
	isWorld bool
	user    *p2p.Channel
	collCh  *p2p.Channel
	eng     *collectives.Engine
	q       queue
	closed  atomic.Bool
	shrinks atomic.Uint32 // Shrink calls so far, which name their keys
	lazyN   atomic.Int32  // this communicator's lazily started collectives not yet claimed (lazy.go)
	agrees  atomic.Uint32 // Agree calls so far, likewise
	p2p     p2pRecord     // the latest blocking point-to-point call, for status (status.go)
}

// Init joins a job whose rendezvous the program arranges itself (an
// explicit Store, or Addr/Token/Rank/Size), connects to every peer and
// returns the world communicator. It is a collective: every rank calls it.
func Init(ctx context.Context, o Options) (*Comm, error) {
	return initWorld(ctx, o, nil)
}

// FromEnv joins the job that a launcher started: rdmarun's RDMARUN_*
// environment (docs/env.md) gives the rank, size, rendezvous address, job
// secret, transport and connect timeout. Without it, FromEnv tries the
// other launchers, most specific first (docs/launchers): a PMI service
// (MPICH's mpiexec, srun --mpi=pmi2), whose key-value space becomes the
// rendezvous; Open MPI's mpirun with RDMARUN_ADDR and RDMARUN_TOKEN passed
// by -x; torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT. Their
// warnings (RDMARUN_INSECURE=1) go to stderr, and the Logger. It unsets
// RDMARUN_TOKEN once read, so that child processes do not inherit the
// secret, and closes the launcher's rendezvous at Close. opts (at most
// one) sets everything else; its rendezvous fields must be empty.
//
// Without any launcher environment it fails with an error matching
// ErrLauncher that says how to start the program, unless Options.Singleton
// asks for a one-rank job instead. A malformed variable fails with an error
// naming it and its value.
func FromEnv(ctx context.Context, opts ...Options) (*Comm, error) {
	fail := func(err error) (*Comm, error) {
		return nil, &OpError{Op: "FromEnv", Rank: -1, Peer: NoPeer, Tag: NoTag, Err: err}
	}
	if len(opts) > 1 {
		return fail(fmt.Errorf("%w: %d Options, want at most one", ErrInvalidArgument, len(opts)))
	}
	var o Options
	if len(opts) == 1 {
		o = opts[0]
	}
	if o.Store != nil || o.Addr != "" || o.Token != nil || o.Rank != 0 || o.Size != 0 || o.Serve {
		return fail(fmt.Errorf("%w: FromEnv takes the rendezvous from the environment; use Init for an explicit one", ErrInvalidArgument))
	}
	o.Status = true
	if !o.NoEnv {
		if err := statusFromEnv(os.LookupEnv, &o); err != nil {
			return fail(err)
		}
	}
	job, err := jobenv.Detect(os.LookupEnv)
	if errors.Is(err, jobenv.ErrNoLauncher) {
		// Not rdmarun: the other launchers, most specific first.
		l, lerr := launchers.Detect(os.LookupEnv)
		switch {
		case lerr == nil:
			return fromLauncher(ctx, o, l)
		case !errors.Is(lerr, launchers.ErrNoLauncher):
			return fail(lerr)
		}
		// Neither. jobenv says more when some RDMARUN_* variables are
		// set but not rdmarun's own (RDMARUN_ADDR passed by hand).
		noLauncher := lerr
		for _, v := range jobenv.RdmarunVars {
			if _, ok := os.LookupEnv(v); ok {
				noLauncher = fmt.Errorf("%w; %s", lerr, strings.TrimPrefix(err.Error(), jobenv.ErrNoLauncher.Error()+": "))
				break
			}
		}
		err = noLauncher
	}
	if err != nil {
		if errors.Is(err, launchers.ErrNoLauncher) && o.Singleton {
			stores, err := bootstrap.NewMemory(1)
			if err != nil {
				return fail(err)
			}
			o.Store = stores[0]
			c, err := initWorld(ctx, o, nil)
			if err != nil {
				stores[0].Close()
				return nil, err
			}
			c.w.ownStore = stores[0]
			return c, nil
		}
		return fail(err)
	}
	for _, k := range job.Secrets {
		os.Unsetenv(k)
	}
	o.Addr, o.Token, o.Rank, o.Size = job.Addr, job.Token, job.Rank, job.Size
	if o.Transport == "" {
		o.Transport = job.Transport
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = job.Timeout
	}
	return initWorld(ctx, o, &job)
}

// fromLauncher joins a job that a launcher other than rdmarun started
// (comm/internal/launchers): its rendezvous (the PMI key-value space, or
// the authenticated store rank 0 serves) becomes the communicator's store,
// closed at Close.
func fromLauncher(ctx context.Context, o Options, l *launchers.Launch) (*Comm, error) {
	fail := func(err error) (*Comm, error) {
		return nil, &OpError{Op: "FromEnv", Rank: l.Rank, Peer: NoPeer, Tag: NoTag, Err: err}
	}
	// The insecure-token warning must reach the user whatever the Logger.
	for _, w := range l.Warnings {
		fmt.Fprintln(os.Stderr, "rdmago:", w)
		if o.Logger != nil {
			o.Logger.Warn("comm: " + w)
		}
	}
	for _, k := range l.Secrets {
		os.Unsetenv(k)
	}
	if o.Transport == "" {
		o.Transport = l.Transport
	}
	if o.ConnectTimeout == 0 {
		o.ConnectTimeout = l.Timeout
	}
	if ctx == nil {
		return fail(fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	// One bound for the whole join: the launcher's rendezvous here, the
	// peers in initWorld.
	cctx, cancel := context.WithTimeout(ctx, o.ConnectTimeout)
	defer cancel()
	rv, err := l.Connect(cctx, launchers.ConnectOptions{
		Version: Version, Config: "transport=" + o.Transport, Hostname: o.Hostname, HostID: hostIDOverride(o.Hostname),
		Logger: o.Logger,
	})
	if err != nil {
		return fail(err)
	}
	// Rank and Size are final only now (Hydra's -pmi-port mode).
	job := jobenv.Job{
		Launcher: l.Launcher, Rank: rv.Store.Rank(), Size: rv.Store.Size(),
		LocalRank: l.LocalRank, LocalSize: l.LocalSize, JobID: l.JobID,
		Transport: o.Transport, Timeout: o.ConnectTimeout,
	}
	o.Store, o.Token = rv.Store, rv.Token
	c, err := initWorld(cctx, o, &job)
	if err != nil {
		rv.Close()
		return nil, err
	}
	c.w.ownStore = rv
	return c, nil
}

func initWorld(ctx context.Context, o Options, job *jobenv.Job) (c *Comm, err error) {
	fail := func(err error) (*Comm, error) {
		return nil, &OpError{Op: "Init", Rank: -1, Peer: NoPeer, Tag: NoTag, Err: err}
	}
	if ctx == nil {
		return fail(fmt.Errorf("%w: nil context", ErrInvalidArgument))
	}
	collOpts := o.Collectives
	if !o.NoEnv {
		if collOpts, err = tuningFromEnv(os.LookupEnv, collOpts); err != nil {
			return fail(err)
		}
	}
	transport := o.Transport
	if transport == "" {
		transport = "auto"
	}
	var env jobenv.LookupEnv = os.LookupEnv
	if o.NoEnv {
		env = nil
	}
	ibDevs, err := ibDevices(env, o.IBDevices)
	if err != nil {
		return fail(err)
	}
	noProbe, err := linkProbeOff(env, o.NoLinkProbe)
	if err != nil {
		return fail(err)
	}
	if o.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.ConnectTimeout)
		defer cancel()
	}
	w := &world{
		name: o.P2P.Name, log: o.Logger, exit: o.exit, collOpts: collOpts, job: job,
		stop: make(chan struct{}), comms: map[*Comm]struct{}{},
		localRank: -1,
	}
	if w.log == nil {
		w.log = slog.New(slog.DiscardHandler)
	}
	if w.exit == nil {
		w.exit = os.Exit
	}
	if job != nil {
		w.localRank, w.localSize = job.LocalRank, job.LocalSize
	}

	// The rendezvous.
	store := o.Store
	var client *bootstrap.Client
	if store == nil {
		if o.Addr == "" {
			return fail(fmt.Errorf("%w: Options need a Store or an Addr", ErrInvalidArgument))
		}
		client, err = bootstrap.Join(ctx, bootstrap.JoinOptions{
			ClientOptions: bootstrap.ClientOptions{
				Addr: o.Addr, Token: o.Token, Rank: o.Rank, Size: o.Size,
				Version: Version, Config: "transport=" + transport, Logger: o.Logger,
				Hostname: o.Hostname, HostID: hostIDOverride(o.Hostname),
			},
			Serve: o.Serve,
		})
		if err != nil {
			return fail(err)
		}
		store, w.ownStore = client, client
	} else if cl, ok := store.(*bootstrap.Client); ok {
		client = cl
	}
	w.store = store
	defer func() {
		if err != nil {
			reportJoinFailure(store, err)
		}
		if err != nil && w.ownStore != nil {
			w.ownStore.Close()
		}
	}()

	// Who shares a host with whom, for the topology-aware collectives and
	// for LocalRank on communicators the launcher did not describe.
	hostID, hostname := hostid.Best(), hostid.Name()
	if o.Hostname != "" {
		hostID, hostname = hostIDOverride(o.Hostname), o.Hostname
	}
	vals, err := bootstrap.Allgather(ctx, store, "comm/"+w.name+"/host", []byte(hostID+"\x00"+hostname))
	if err != nil {
		return fail(err)
	}
	w.hostIdx = make([]int, len(vals))
	w.hostNames = make([]string, len(vals))
	seen := map[string]int{}
	for r, v := range vals {
		id, name, _ := cutByte(v)
		idx, ok := seen[id]
		if !ok {
			idx = len(seen)
			seen[id] = idx
		}
		w.hostIdx[r], w.hostNames[r] = idx, name
	}

	// The endpoint.
	po := o.P2P
	if po.Provider == "" {
		po.Provider = transport
	}
	if po.Logger == nil {
		po.Logger = o.Logger
	}
	if po.IBDevices == "" {
		po.IBDevices = ibDevs
	}
	if po.Device.Token == nil {
		po.Device.Token = o.Token
	}
	if po.Device.Logger == nil {
		po.Device.Logger = o.Logger
	}
	if client != nil && po.Device.Listen == "" && client.SpansHosts() {
		addr, err := client.AdvertiseAddr(o.Interfaces)
		if err != nil {
			return fail(fmt.Errorf("choosing the address peers reach this rank at: %w", err))
		}
		po.Device.Listen = net.JoinHostPort(addr.String(), "0")
	}
	if o.Status {
		// Before the endpoint's fence, which publishes the address (PMI).
		if err := w.startStatus(ctx, o, statusHost(po.Device.Listen, len(seen))); err != nil {
			return fail(err)
		}
		defer func() {
			if err != nil {
				w.status.close()
			}
		}()
	}
	ep, err := p2p.New(ctx, store, po)
	if err != nil {
		return fail(err)
	}
	w.ep = ep
	w.p2pOpts = po
	if w.shared, err = newSharedRegion(ctx, ep, store, w.name); err != nil {
		ep.Close()
		return fail(err)
	}
	// Before the world's engine, whose cost model reads it.
	if err := w.probeLinks(ctx, !noProbe); err != nil {
		ep.Close()
		return fail(fmt.Errorf("measuring the network between hosts: %w", err))
	}
	members := make([]int, ep.Size())
	for r := range members {
		members[r] = r
	}
	c, err = w.newComm(0, members, true)
	if err != nil {
		ep.Close()
		return fail(err)
	}
	if w.status != nil {
		w.status.run(c)
	}
	w.watchAbort()
	w.startLazyWorker()
	w.log.Debug("comm: joined", "rank", c.rank, "size", c.size, "transport", transport)
	return c, nil
}

// hostIDOverride is the host identity for Options.Hostname: empty (the
// kernel's identity) when it is not set.
func hostIDOverride(name string) string {
	if name == "" {
		return ""
	}
	return hostid.Named(name)
}

func cutByte(v []byte) (string, string, bool) {
	for i, b := range v {
		if b == 0 {
			return string(v[:i]), string(v[i+1:]), true
		}
	}
	return string(v), "", false
}

// newComm builds the communicator with context id over the world ranks
// members (ascending communicator order), for this rank.
func (w *world) newComm(id uint32, members []int, isWorld bool) (*Comm, error) {
	if uint64(id)*2+1 >= uint64(ctlContext) { // the pair of ctlContext is comm's own
		return nil, fmt.Errorf("%w: out of communicator context ids", ErrUnsupported)
	}
	me := w.ep.Rank()
	c := &Comm{w: w, id: id, size: len(members), members: members, isWorld: isWorld, rank: -1}
	c.inv = make([]int, w.ep.Size())
	for i := range c.inv {
		c.inv[i] = -1
	}
	for r, wr := range members {
		c.inv[wr] = r
		if wr == me {
			c.rank = r
		}
	}
	if c.rank < 0 {
		return nil, fmt.Errorf("%w: this rank is not a member", ErrInvalidArgument)
	}
	var err error
	if c.user, err = w.ep.Channel(2 * id); err != nil {
		return nil, err
	}
	if c.collCh, err = w.ep.Channel(2*id + 1); err != nil {
		return nil, err
	}
	var g collectives.Group = &group{c: c}
	if isWorld {
		g = &worldGroup{group{c: c}}
	}
	// Every call on the Engine runs in its turn of c.q, which orders them.
	eo := w.collOpts
	eo.Serialized = true
	if c.eng, err = collectives.New(g, eo); err != nil {
		return nil, err
	}
	if !isWorld {
		w.mu.Lock()
		w.comms[c] = struct{}{}
		w.mu.Unlock()
	}
	return c, nil
}

// watchAbort turns an Abort by any rank, which the rendezvous reports,
// into a failure of every pending and later operation on this rank: the
// launcher would end the job anyway, but a job without one (Init) must not
// leave ranks blocked in a receive.
func (w *world) watchAbort() {
	d, ok := w.store.(doneStore)
	if !ok {
		return
	}
	w.watchWG.Add(1)
	go func() {
		defer w.watchWG.Done()
		select {
		case <-w.stop:
		case <-d.Done():
			if ae := w.noteAbort(d); ae != nil {
				w.log.Warn("comm: job aborted", "rank", ae.Info.Rank, "code", ae.Info.Code, "reason", ae.Info.Reason)
				w.ep.Revoke(w.epRank(ae.Info.Rank), w.abortCause())
			}
		}
	}()
}

// startLazyWorker starts the goroutine that starts the lazily started
// collectives nobody claims (lazy.go); it ends when the world closes.
func (w *world) startLazyWorker() {
	w.lazy.kick = make(chan struct{}, 1)
	w.lazy.asleep = true
	w.watchWG.Add(1)
	go w.lazyWorker()
}

// doneStore is a rendezvous that reports its end (bootstrap.Client): an
// abort by any rank ends it.
type doneStore interface {
	Done() <-chan struct{}
	Err() error
}

// noteAbort records the abort that ended d, if that is what ended it.
func (w *world) noteAbort(d doneStore) *bootstrap.AbortError {
	var ae *bootstrap.AbortError
	if err := d.Err(); errors.As(err, &ae) {
		w.abortErr.CompareAndSwap(nil, &err)
		return ae
	}
	return nil
}

func (w *world) abortCause() error {
	if p := w.abortErr.Load(); p != nil {
		return *p
	}
	return nil
}

// abortGrace is how long the first peer loss waits for the rendezvous to
// say that the lost rank aborted: the aborting rank's links may break
// before the rendezvous's notice arrives, and "rank 3 aborted with code 2"
// is a far better error than "rank 3 lost".
const abortGrace = 250 * time.Millisecond

func (w *world) settleLoss() {
	d, ok := w.store.(doneStore)
	if !ok {
		return
	}
	w.settle.Do(func() {
		t := time.NewTimer(abortGrace)
		defer t.Stop()
		select {
		case <-d.Done():
			w.noteAbort(d)
		case <-t.C:
		case <-w.stop:
		}
	})
}

// Rank is this process's rank in the communicator, in [0, Size) (-1 for
// a nil communicator, as Split returns for Undefined).
func (c *Comm) Rank() int {
	if c == nil {
		return -1
	}
	return c.rank
}

// Size is the number of ranks in the communicator (0 for nil).
func (c *Comm) Size() int {
	if c == nil {
		return 0
	}
	return c.size
}

// WorldRank is the world rank (the rank FromEnv / Init gave) of the
// communicator's rank r, or -1 if r is out of range.
func (c *Comm) WorldRank(r int) int {
	if c == nil || r < 0 || r >= c.size {
		return -1
	}
	return c.members[r]
}

// LocalRank is this rank's index among the communicator's ranks on its
// host, and LocalSize their number. On the world communicator of a job
// that rdmarun started they are RDMARUN_LOCAL_RANK and _SIZE; elsewhere
// they are computed from the host identities the ranks reported.
func (c *Comm) LocalRank() int {
	if c == nil {
		return -1
	}
	if c.isWorld && c.w.localRank >= 0 {
		return c.w.localRank
	}
	r, _ := c.local()
	return r
}

// LocalSize: see LocalRank.
func (c *Comm) LocalSize() int {
	if c == nil {
		return 0
	}
	if c.isWorld && c.w.localRank >= 0 {
		return c.w.localSize
	}
	_, n := c.local()
	return n
}

func (c *Comm) local() (rank, size int) {
	mine := c.w.hostIdx[c.members[c.rank]]
	for r, wr := range c.members {
		if c.w.hostIdx[wr] == mine {
			if r < c.rank {
				rank++
			}
			size++
		}
	}
	return rank, size
}

// Peer describes one rank of a communicator as this rank sees it.
type Peer struct {
	Rank      int    // in the communicator
	WorldRank int    // in the world communicator
	Host      string // the host name it reported
	HostIndex int    // ranks with equal HostIndex share a host (and shm)
	Transport string // the verbs provider carrying traffic to it ("self" for this rank)
	// Latency (one way, a small message) and Bandwidth (bytes per second)
	// are the collectives' cost model's estimate of the link to it: the
	// transport's own, or, for a rank on another host, what Init measured
	// for the network when that is at least twice as slow
	// (Options.NoLinkProbe). Zero for this rank.
	Latency   time.Duration
	Bandwidth float64
}

// Peer returns what this rank knows about rank r of the communicator: its
// host and which transport reaches it. It is local (no communication).
func (c *Comm) Peer(r int) (Peer, error) {
	if err := c.check("Peer"); err != nil {
		return Peer{}, err
	}
	if r < 0 || r >= c.size {
		return Peer{}, c.opErr("Peer", NoPeer, NoTag, fmt.Errorf("%w: rank %d is not in [0, %d)", ErrInvalidRank, r, c.size))
	}
	wr := c.members[r]
	lat, bw := c.w.link(wr)
	return Peer{Rank: r, WorldRank: wr, Host: c.w.hostNames[wr], HostIndex: c.w.hostIdx[wr], Transport: c.w.ep.Transport(wr),
		Latency: lat, Bandwidth: bw}, nil
}

// Transport names the verbs provider carrying traffic to rank r ("shm",
// "tcp", "ibv", "loop"; "self" for this rank; "" for a rank out of range).
func (c *Comm) Transport(r int) string {
	if c == nil || r < 0 || r >= c.size {
		return ""
	}
	return c.w.ep.Transport(c.members[r])
}

// Stats are the endpoint's traffic counters (shared by every communicator
// of the process), indexed by world rank; see p2p.Stats.
type Stats = p2p.Stats

// Stats returns a snapshot of the endpoint's counters. Every communicator
// of the process shares one endpoint, so the counts are per process, with
// Peers indexed by world rank.
func (c *Comm) Stats() Stats {
	if c == nil {
		return Stats{}
	}
	return c.w.ep.Stats()
}

// LastAlgorithm names the algorithm the communicator's latest collective
// ran, as collectives.Algorithm spells it ("ring", "rabenseifner",
// "shared_memory", ...; "auto" when it failed before choosing), so that a
// program or a benchmark can see what the cost model or an override
// picked. With non-blocking collectives in flight, "latest" is the last
// one to choose its algorithm. It is local and cheap.
func (c *Comm) LastAlgorithm() string {
	if c == nil {
		return ""
	}
	return c.eng.LastAlgorithm().String()
}

// Err returns the error the communicator's connections failed with (a
// peer loss, an abort), or nil while they are healthy.
func (c *Comm) Err() error {
	if err := c.check("Err"); err != nil {
		return err
	}
	err := c.w.ep.Err()
	if err == nil {
		return nil
	}
	return c.wrap("Err", NoPeer, NoTag, err)
}

// Close releases the communicator. Closing the world communicator also
// closes every communicator made from it, says goodbye to the peers (so
// that they do not take this rank for lost), closes the endpoint and, if
// FromEnv or Init joined the rendezvous, leaves it. Closing twice is a
// no-op.
//
// Deferred directly (defer c.Close()) while the goroutine panics, Close
// only marks the communicator closed and lets the panic go on: see
// closePanicking.
func (c *Comm) Close() error {
	if v := recover(); v != nil {
		c.closePanicking()
		panic(v)
	}
	if c == nil || !c.closed.CompareAndSwap(false, true) {
		return nil
	}
	w := c.w
	if !c.isWorld {
		w.mu.Lock()
		delete(w.comms, c)
		w.mu.Unlock()
		return c.wrapNil("Close", c.eng.Close())
	}
	if w.status != nil {
		w.status.close()
	}
	w.mu.Lock()
	subs := make([]*Comm, 0, len(w.comms))
	for s := range w.comms {
		subs = append(subs, s)
	}
	w.mu.Unlock()
	var errs []error
	for _, s := range subs {
		if err := s.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, c.eng.Close())
	errs = append(errs, w.ep.Close())
	w.stopOnce.Do(func() { close(w.stop) })
	w.watchWG.Wait()
	w.mu.Lock()
	own := w.ownStore
	w.mu.Unlock()
	if own != nil {
		if err := own.Close(); err != nil && !errors.Is(err, bootstrap.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return c.wrapNil("Close", errors.Join(errs...))
}

// Abort ends the whole job with code, as MPI_Abort does. Under rdmarun the
// rendezvous tells the launcher, which stops every rank and exits with
// code; every rank's pending operations fail with ErrAborted meanwhile.
// Without a launcher, the rendezvous (when it can abort) and the
// connections tell the peers, whose operations fail with ErrAborted or
// ErrPeerLost naming this rank. Abort then ends this process with code
// (os.Exit) and does not return.
func (c *Comm) Abort(code int) {
	if c == nil {
		os.Exit(code)
	}
	w := c.w
	me := w.ep.Rank()
	info := bootstrap.AbortInfo{Rank: me, Code: code, Reason: "comm.Abort"}
	var cause error = &bootstrap.AbortError{Info: info}
	w.abortErr.Store(&cause)
	if a, ok := w.store.(bootstrap.Aborter); ok {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := a.Abort(ctx, code, info.Reason); err != nil {
			w.log.Warn("comm: telling the rendezvous about the abort failed", "err", err)
		}
		cancel()
	}
	if _, ok := w.store.(doneStore); !ok {
		// Nobody else will tell the peers: revoke the connections, so
		// that their operations fail (naming this rank) instead of
		// waiting. A rendezvous that reports its end tells them itself,
		// with the code.
		w.ep.Revoke(me, cause)
	}
	if w.status != nil {
		w.status.removeFile()
	}
	w.exit(code)
}

// opErr builds an OpError on this communicator.
func (c *Comm) opErr(op string, peer, tag int, err error) error {
	return &OpError{Op: op, Rank: c.rank, Size: c.size, Peer: peer, Tag: tag, Err: err}
}

func (c *Comm) wrapNil(op string, err error) error {
	if err == nil {
		return nil
	}
	return c.wrap(op, NoPeer, NoTag, err)
}

// wrap turns a lower layer's error into an OpError: the peer a collective
// names, the lost rank of a peer loss (in this communicator's numbering
// when it is a member) or the rank where the failure began, and the abort
// that caused it all.
func (c *Comm) wrap(op string, peer, tag int, err error) error {
	var ce *collectives.Error
	if peer == NoPeer && errors.As(err, &ce) && ce.Peer >= 0 {
		peer = ce.Peer
	}
	if left, ok := c.departedRank(err); ok {
		d := c.w.lookupDeparture(left)
		if _, ok := PeerLost(err); ok {
			c.w.settleLoss()
		}
		if e := c.w.blameOrigin(left, d, err); e != err {
			err = e
			var qc *p2p.PeerClosedError
			if errors.As(err, &qc) && qc.Rank < len(c.inv) && c.inv[qc.Rank] >= 0 {
				peer = c.inv[qc.Rank]
			}
		}
	}
	origin, note := false, ""
	if lost, ok := PeerLost(err); ok {
		c.w.settleLoss()
		if r := c.inv[lost]; r >= 0 {
			peer, origin = r, true
			if !c.isWorld {
				note = fmt.Sprintf(" (world rank %d)", lost)
			}
		} else {
			err = fmt.Errorf("a rank outside this communicator (world numbering): %w", err)
		}
	} else if o := c.originOf(err); o >= 0 && (peer == NoPeer || peer == o) {
		peer, origin = o, true
	}
	if ap := c.w.abortErr.Load(); ap != nil && !errors.Is(err, ErrAborted) {
		err = &abortedError{abort: *ap, err: err}
	}
	oe := &OpError{Op: op, Rank: c.rank, Size: c.size, Peer: peer, Tag: tag, Err: err, origin: origin, note: note}
	c.reportFailure(oe)
	return oe
}

// originOf is the rank (of this communicator) where err began when
// another rank's closing, failed call or absence caused it, else -1.
func (c *Comm) originOf(err error) int {
	var (
		pc *collectives.PeerClosedError
		pe *collectives.PeerError
		qc *p2p.PeerClosedError
		de *p2p.DeadlineError
	)
	switch {
	case errors.As(err, &pc):
		return pc.Rank
	case errors.As(err, &pe):
		return pe.Rank
	case errors.As(err, &qc): // endpoint ranks are world ranks
		return c.memberOf(qc.Rank)
	case errors.As(err, &de) && len(de.Ranks) == 1 && !de.Any:
		return c.memberOf(de.Ranks[0])
	}
	return -1
}

// memberOf is world rank w's rank in this communicator, -1 if none.
func (c *Comm) memberOf(w int) int {
	if w < 0 || w >= len(c.inv) {
		return -1
	}
	return c.inv[w]
}

// failureReportTimeout bounds the report of a rank's first failure: it
// goes out before the error is returned (the program may exit right
// after), and a rendezvous that is gone must not hold the error up. A
// closed rendezvous fails at once; a busy one gets a second.
const failureReportTimeout = time.Second

// reportFailure puts this rank's first failure that began at another
// rank (or at this one: a refused call) into the store, for the launcher
// to name the rank where the failure began (see bootstrap.FailureKey).
// Aborts are reported by the rendezvous itself.
func (c *Comm) reportFailure(err error) {
	if errors.Is(err, ErrAborted) {
		return
	}
	f, ok := c.failureOf(err)
	if !ok {
		return
	}
	w := c.w
	w.reported.Do(func() {
		f.Detail = err.Error()
		ctx, cancel := context.WithTimeout(context.Background(), failureReportTimeout)
		defer cancel()
		for i, o := range f.Origins {
			f.Origins[i] = w.storeRank(o)
		}
		if perr := w.store.Put(ctx, bootstrap.FailureKey(w.storeRank(w.ep.Rank())), f.Encode()); perr != nil {
			w.log.Debug("comm: failure report not stored", "err", perr)
		}
	})
}

// failureOf says where err began, in world ranks, if another rank's
// failure (or a disagreement with one) caused it.
func (c *Comm) failureOf(err error) (bootstrap.FailureReport, bool) {
	world := func(r int) int {
		if r >= 0 && r < len(c.members) {
			return c.members[r]
		}
		return -1
	}
	var (
		pl *p2p.PeerLostError
		pc *collectives.PeerClosedError
		qc *p2p.PeerClosedError
		pe *collectives.PeerError
		me *collectives.MismatchError
		f  bootstrap.FailureReport
	)
	switch {
	case errors.As(err, &pl):
		f.Kind = "lost"
		if pl.Revoked {
			f.Kind = "revoked"
		}
		f.Origins = []int{pl.Rank} // endpoint ranks are world ranks
	case errors.As(err, &pc):
		f.Kind, f.Origins = "closed", []int{world(pc.Rank)}
	case errors.As(err, &qc):
		f.Kind, f.Origins = "closed", []int{qc.Rank}
	case errors.As(err, &pe):
		f.Kind, f.Origins = "invalid", []int{world(pe.Rank)}
	case errors.As(err, &me) && me.Suspect >= 0:
		f.Kind, f.Origins = "mismatch", []int{world(me.Suspect)}
	case errors.As(err, &me):
		f.Kind = "mismatch"
		for _, r := range []int{me.Rank, me.Peer} {
			if wr := world(r); wr >= 0 && r != c.rank {
				f.Origins = append(f.Origins, wr)
			}
		}
	default:
		return f, false
	}
	f.Origins = slices.DeleteFunc(f.Origins, func(r int) bool { return r < 0 })
	return f, len(f.Origins) > 0
}

// check fails operations on a nil or closed communicator.
func (c *Comm) check(op string) error {
	if c == nil {
		return &OpError{Op: op, Rank: -1, Peer: NoPeer, Tag: NoTag, Err: fmt.Errorf("%w: nil communicator", ErrInvalidArgument)}
	}
	if c.closed.Load() {
		return c.opErr(op, NoPeer, NoTag, errCommClosed)
	}
	return nil
}

// queue runs a communicator's collectives one at a time, in the order
// they were called (blocking and non-blocking alike), which is the order
// every rank must call them in. A call that finds the queue idle takes its
// turn without allocating; only calls that must wait get a channel.
//
// The idle case is one compare-and-swap to take the turn and one to give
// it back (a mutex would cost two locked instructions each): state is
// qIdle, qBusy (a turn runs, nobody waits) or qQueued (a turn runs and
// waiting is not empty). Only qIdle↔qBusy changes happen outside mu;
// everything that touches waiting, or leaves or enters qQueued, holds mu.
//
// Where the process has asymmetric fences (shmsync.Asymmetric:
// membarrier(2) on amd64), giving the turn back takes no locked
// instruction at all: a shared-memory collective returns with its last
// stores still waiting for the peers' cores to give up those lines, and a
// locked instruction waits for them (see collectives' endQuick). done
// then stores freed = 1 plainly and looks at state: qBusy (nobody waits)
// leaves the turn free for the next take to claim (freed 1→0, state stays
// qBusy); qQueued hands it over under mu as before. A take that makes the
// queue qQueued fences heavily (shmsync.FenceHeavy) and then looks at
// freed: either its look sees the holder's store, and it claims the turn
// itself, or the holder's look at state sees qQueued (the heavy fence
// orders the holder's plain store and load as a full fence would).
type queue struct {
	state   atomic.Int32
	freed   uint32 // 1: the holder gave the turn back in qBusy (light only); read by CAS
	heavy   bool   // hand turns over with locked instructions even where light ones work (tests)
	mu      sync.Mutex
	waiting []chan struct{} // turns taken while busy, in order; closed when theirs comes
}

// testQueued, if set, runs when a take has made the queue qQueued, before
// it looks at freed (tests: the holder's hand-back lands there).
var testQueued func(q *queue)

const (
	qIdle int32 = iota
	qBusy
	qQueued
)

// take reserves the next turn: nil means it is this caller's already,
// otherwise the channel is closed when it is (see wait).
func (q *queue) take() chan struct{} {
	if q.claimFreed() || q.state.CompareAndSwap(qIdle, qBusy) {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		switch q.state.Load() {
		case qIdle: // the turn ended meanwhile
			if q.state.CompareAndSwap(qIdle, qBusy) {
				return nil
			}
		case qBusy:
			if q.claimFreed() {
				return nil
			}
			if !q.state.CompareAndSwap(qBusy, qQueued) {
				continue // ended meanwhile
			}
			ch := make(chan struct{})
			q.waiting = append(q.waiting, ch)
			if testQueued != nil {
				testQueued(q)
			}
			if q.light() && shmsync.FenceHeavy() && atomic.CompareAndSwapUint32(&q.freed, 1, 0) {
				// The holder gave the turn back and may not have seen
				// qQueued: it is this caller's (nobody else waits).
				q.waiting = q.waiting[:0]
				q.state.Store(qBusy)
				return nil
			}
			return ch
		case qQueued:
			ch := make(chan struct{})
			q.waiting = append(q.waiting, ch)
			return ch
		}
	}
}

// light says whether q gives turns back without a locked instruction:
// the process's stores are plain ones that membarrier(2) fences from other
// threads (shmsync.Asymmetric).
func (q *queue) light() bool { return !q.heavy && shmsync.Asymmetric() }

// claimFreed takes a turn that its holder gave back with nobody waiting
// (see queue).
func (q *queue) claimFreed() bool {
	return q.light() && q.state.Load() == qBusy && atomic.CompareAndSwapUint32(&q.freed, 1, 0)
}

// done ends the current turn and hands it to the next in line.
func (q *queue) done() {
	if q.light() {
		shmsync.PublishLight(&q.freed, 1)
		if q.state.Load() == qBusy {
			return // free for the next take (claimFreed)
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		// Unless a take that queued found it free and took it:
		if atomic.CompareAndSwapUint32(&q.freed, 1, 0) {
			q.passLocked()
		}
		return
	}
	if q.state.CompareAndSwap(qBusy, qIdle) {
		return
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.passLocked()
}

// passLocked hands the turn, which the caller holds, to the next in line,
// or leaves the queue idle. The caller holds mu.
func (q *queue) passLocked() {
	if len(q.waiting) == 0 {
		q.state.Store(qIdle)
		return
	}
	next := q.waiting[0]
	q.waiting = q.waiting[1:]
	if len(q.waiting) == 0 {
		q.state.Store(qBusy)
	}
	close(next)
}

// wait waits for the turn take returned. When ctx ends first, the turn is
// given up (or, if it came meanwhile, passed on), so later calls still run
// in order.
func (q *queue) wait(ctx context.Context, turn chan struct{}) error {
	if turn == nil {
		return nil
	}
	select {
	case <-turn:
		return nil
	default:
	}
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
	}
	q.mu.Lock()
	i := slices.Index(q.waiting, turn)
	if i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
		if len(q.waiting) == 0 {
			q.state.Store(qBusy) // the turn that runs stays taken
		}
	} else {
		q.passLocked() // the turn had come: pass it on
	}
	q.mu.Unlock()
	return fmt.Errorf("waiting for this communicator's earlier collectives: %w", ctx.Err())
}
