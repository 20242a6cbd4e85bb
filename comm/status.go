package comm

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/internal/shmsync"
)

// Seeing a stuck job (docs/debugging.md). With Options.Status every rank
// serves, on a small endpoint authenticated by the job token
// (bootstrap.ServeStatus), the operation each of its communicators is in,
// as the collective engines record it (collectives.Engine.Activity: a few
// atomic stores per call). Rank 0 answers for the whole job by asking the
// others, writes a status file so that `rdmarun status` finds the job
// under any launcher, and watches: when some rank has waited in one
// operation for Options.StuckAfter, it prints once who has not arrived.

const (
	// EnvStatus=0 turns the status endpoint (and the stuck-job report)
	// off for FromEnv.
	EnvStatus = "RDMAGO_STATUS"
	// EnvStuckAfter sets Options.StuckAfter for FromEnv: a Go duration,
	// or 0 for never.
	EnvStuckAfter = "RDMAGO_STUCK_AFTER"

	// DefaultStuckAfter is Options.StuckAfter's default.
	DefaultStuckAfter = 30 * time.Second

	// statusQueryTimeout bounds rank 0's question to one rank: a rank that
	// is stopped (SIGSTOP, a debugger) accepts the connection in its
	// kernel but never answers.
	statusQueryTimeout = 2 * time.Second
)

// statusFromEnv reads EnvStatus and EnvStuckAfter into o; FromEnv turns
// the status endpoint on by default.
func statusFromEnv(env jobenv.LookupEnv, o *Options) error {
	o.Status = true
	if v, ok := env(EnvStatus); ok && v != "" {
		on, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("%w: %s=%q: want 0 or 1", ErrInvalidArgument, EnvStatus, v)
		}
		o.Status = on
	}
	if v, ok := env(EnvStuckAfter); ok && v != "" && o.StuckAfter == 0 {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return fmt.Errorf("%w: %s=%q: want a duration such as 30s (0: never)", ErrInvalidArgument, EnvStuckAfter, v)
		}
		if d == 0 {
			d = -1
		}
		o.StuckAfter = d
	}
	return nil
}

// statusState is the world's status endpoint and, on rank 0, its watch.
type statusState struct {
	w     *world
	world atomic.Pointer[Comm] // set once the world communicator exists
	token []byte
	srv   *bootstrap.StatusServer
	file  string // rank 0's status file, removed at Close
	after time.Duration
	out   io.Writer

	addrMu sync.Mutex
	addrs  []string // the other ranks' endpoints, fetched on first need

	stop   chan struct{}
	done   chan struct{}
	rounds atomic.Int64 // watch rounds, for tests
}

// startStatus opens this rank's status endpoint and publishes its address
// in the store (before the endpoint's fence, so that a PMI store shows it
// to every rank). host is the address to listen on.
func (w *world) startStatus(ctx context.Context, o Options, host string) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("status endpoint: %w", err)
	}
	s := &statusState{w: w, token: o.Token, after: o.StuckAfter, out: o.statusOut}
	if s.after == 0 {
		s.after = DefaultStuckAfter
	}
	if s.out == nil {
		s.out = os.Stderr
	}
	s.srv = bootstrap.ServeStatus(ln, o.Token, w.log, s.serve)
	addr := s.srv.Addr()
	if host == "" || net.ParseIP(host).IsUnspecified() {
		// Listening everywhere: publish a name the others can dial.
		_, port, _ := net.SplitHostPort(addr)
		if h, herr := os.Hostname(); herr == nil {
			addr = net.JoinHostPort(h, port)
		}
	}
	if err := w.store.Put(ctx, bootstrap.StatusKey(w.name, w.store.Rank()), []byte(addr)); err != nil {
		s.srv.Close()
		return fmt.Errorf("status endpoint: %w", err)
	}
	w.status = s
	return nil
}

// run starts rank 0's part once the world communicator exists: the status
// file and the stuck-job watch.
func (s *statusState) run(c *Comm) {
	s.world.Store(c)
	if c.rank != 0 {
		return
	}
	id := ""
	if s.w.job != nil {
		id = s.w.job.JobID
	}
	if id == "" {
		id = fmt.Sprintf("pid%d", os.Getpid())
	}
	path, err := bootstrap.WriteStatusFile("", bootstrap.StatusFile{
		Job: id, Addr: s.srv.Addr(), Token: hex.EncodeToString(s.token),
		PID: os.Getpid(), Size: c.size, Started: time.Now(),
	})
	if err != nil {
		s.w.log.Warn("comm: no status file; `rdmarun status` needs --addr for this job", "err", err)
	}
	s.file = path
	if s.after < 0 || c.size < 2 {
		return
	}
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.watch()
}

// removeFile removes rank 0's status file (Abort: the process ends now).
func (s *statusState) removeFile() {
	if s.file != "" {
		os.Remove(s.file)
	}
}

func (s *statusState) close() {
	if s.stop != nil {
		close(s.stop)
		<-s.done
	}
	s.srv.Close()
	if s.file != "" {
		os.Remove(s.file)
	}
}

// watch asks every rank, a few times per StuckAfter, where it is, and
// prints each stuck operation once.
func (s *statusState) watch() {
	defer close(s.done)
	period := min(max(s.after/3, 20*time.Millisecond), 10*time.Second)
	t := time.NewTicker(period)
	defer t.Stop()
	reported := map[string]bool{}
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-s.stop:
				cancel()
			case <-ctx.Done():
			}
		}()
		st := s.job(ctx)
		cancel()
		// One line per stall: not again while any operation it named
		// still runs (a stopped rank that goes on is still in an older
		// call for a moment).
		rep, keys, ok := bootstrap.StuckReport(st, s.after)
		if ok && !slices.ContainsFunc(keys, func(k string) bool { return reported[k] }) {
			if len(reported) > 1000 {
				clear(reported)
			}
			for _, k := range keys {
				reported[k] = true
			}
			fmt.Fprintf(s.out, "rdmago: stuck job: %s (`rdmarun status` shows every rank)\n", rep)
			s.w.log.Warn("comm: stuck job: " + rep)
		}
		s.rounds.Add(1)
	}
}

func (s *statusState) serve(ctx context.Context, req byte) ([]bootstrap.RankStatus, error) {
	if req == bootstrap.StatusSelf {
		return []bootstrap.RankStatus{s.self()}, nil
	}
	return s.job(ctx), nil
}

// self is this rank's state: every live communicator's latest operation.
func (s *statusState) self() bootstrap.RankStatus {
	host, _ := os.Hostname()
	st := bootstrap.RankStatus{Rank: s.w.store.Rank(), Host: host, PID: os.Getpid(), Now: time.Now()}
	world := s.world.Load()
	if world == nil {
		return st
	}
	st.Ops = append(st.Ops, world.opStatus())
	if o := world.p2p.opStatus("world"); o.Op != "" {
		st.Ops = append(st.Ops, o)
	}
	s.w.mu.Lock()
	comms := make([]*Comm, 0, len(s.w.comms))
	for c := range s.w.comms {
		comms = append(comms, c)
	}
	s.w.mu.Unlock()
	for _, c := range comms {
		if o := c.opStatus(); o.Op != "" {
			st.Ops = append(st.Ops, o)
		}
		if o := c.p2p.opStatus(c.statusName()); o.Op != "" {
			st.Ops = append(st.Ops, o)
		}
	}
	return st
}

// opStatus is the communicator's running (or latest) collective.
func (c *Comm) opStatus() bootstrap.OpStatus {
	a := c.eng.Activity()
	o := bootstrap.OpStatus{Comm: c.statusName(), Running: a.Running, Op: a.Op, Seq: uint64(a.Seq), Peer: -1, Since: a.Since}
	if a.Op != "" {
		o.Algorithm = a.Algorithm
	}
	if a.Peer >= 0 && a.Peer < len(c.members) {
		o.Peer = c.members[a.Peer]
	}
	return o
}

func (c *Comm) statusName() string {
	if c.isWorld {
		return "world"
	}
	return fmt.Sprintf("comm %d", c.id)
}

// job asks every rank for its state (this one directly), at most 32 at a
// time; a rank that does not answer is reported with the reason.
func (s *statusState) job(ctx context.Context) []bootstrap.RankStatus {
	n, me := s.w.store.Size(), s.w.store.Rank()
	out := make([]bootstrap.RankStatus, n)
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for r := range n {
		if r == me {
			out[r] = s.self()
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			out[r] = s.ask(ctx, r)
		})
	}
	wg.Wait()
	return out
}

func (s *statusState) ask(ctx context.Context, r int) bootstrap.RankStatus {
	ctx, cancel := context.WithTimeout(ctx, statusQueryTimeout)
	defer cancel()
	addr, err := s.addr(ctx, r)
	if err != nil {
		return bootstrap.RankStatus{Rank: r, Err: err.Error()}
	}
	st, err := bootstrap.QueryStatus(ctx, addr, s.token, bootstrap.StatusSelf)
	if err == nil && (len(st) != 1 || st[0].Rank != r) {
		err = fmt.Errorf("%s answered for another rank", addr)
	}
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s from %s", statusQueryTimeout, addr)
		}
		return bootstrap.RankStatus{Rank: r, Err: err.Error()}
	}
	return st[0]
}

// addr is rank r's status endpoint, from the store on first need.
func (s *statusState) addr(ctx context.Context, r int) (string, error) {
	s.addrMu.Lock()
	if s.addrs == nil {
		s.addrs = make([]string, s.w.store.Size())
	}
	a := s.addrs[r]
	s.addrMu.Unlock()
	if a != "" {
		return a, nil
	}
	v, err := s.w.store.Get(ctx, bootstrap.StatusKey(s.w.name, r))
	if err != nil {
		return "", err
	}
	s.addrMu.Lock()
	s.addrs[r] = string(v)
	s.addrMu.Unlock()
	return string(v), nil
}

// statusHost is where this rank's status endpoint listens: next to the
// transports when they were given an address, on loopback when the job
// is on one host, else on every interface (the endpoint authenticates).
func statusHost(transportListen string, hosts int) string {
	if h, _, err := net.SplitHostPort(transportListen); err == nil && h != "" {
		return h
	}
	if hosts <= 1 {
		return "127.0.0.1"
	}
	return ""
}

// p2pRecord is a communicator's latest blocking point-to-point call (Send,
// Recv, a request's Wait), in a few plain stores per call. With several
// goroutines it shows the call started last; it is for a person reading a
// stuck job, not for synchronisation.
//
// A call's number is a load and a plain store, not an atomic add: the
// add's locked instruction was an eighth of comm's software in an 8-byte
// ping-pong (BenchmarkOverhead). Calls begun at once on several goroutines
// may then share a number, or set it back (a store that lost the race); a
// number whose slot in ends holds a later call reads as not running, so a
// look may miss a running call of such a race but never shows an ended
// one running.
//
// A call reads no clock: on a VM's kvm-clock that read (about 50 ns) was
// a fifth of a comm ping-pong's software, paid by every Send and Recv
// on the latency path, almost all of which end before anybody looks. The
// time a call is reported running since is when a reader first found it
// running instead; rank 0's stuck-job watch asks every rank a few times per
// StuckAfter, so a stuck call's age is short by at most one of its rounds.
type p2pRecord struct {
	seq  uint64 // calls begun, stored lightly (see above)
	what uint64 // p2pOp | world rank (-1 any) <<32, stored lightly
	// ends[s%p2pEnds] is the latest call s of that index that ended. An end
	// is a load and a plain store there, where a compare-and-swap on one
	// word of the latest end was, with what's store (an XCHG on amd64),
	// two locked instructions between a Recv's message and the next Send:
	// without them the 2-rank ping-pong over shm took 0.94-0.98 of its
	// time at 0-64 B (osu-compare, 9 rounds). A call that ends after a
	// later one of its index does not overwrite it.
	ends [p2pEnds]uint64

	mu     sync.Mutex // readers' side
	seen   uint64     // the call a reader last found running
	seenAt time.Time  // when a reader first found it running
}

type p2pOp uint32

const (
	p2pSend p2pOp = iota + 1
	p2pRecv
	p2pWait
)

var p2pNames = [...]string{p2pSend: "send", p2pRecv: "recv", p2pWait: "wait"}

// p2pEnds is how many calls' ends a p2pRecord keeps (one cache line).
const p2pEnds = 8

func (r *p2pRecord) begin(op p2pOp, worldPeer int) uint64 {
	shmsync.PublishLight64(&r.what, uint64(op)|uint64(uint32(int32(worldPeer)))<<32)
	s := atomic.LoadUint64(&r.seq) + 1
	shmsync.PublishLight64(&r.seq, s)
	return s
}

func (r *p2pRecord) end(seq uint64) {
	if e := &r.ends[seq%p2pEnds]; atomic.LoadUint64(e) < seq {
		shmsync.PublishLight64(e, seq)
	}
}

// opStatus reports the record as an operation on communicator name; Op is
// empty before the first call.
func (r *p2pRecord) opStatus(name string) bootstrap.OpStatus {
	seq := atomic.LoadUint64(&r.seq)
	o := bootstrap.OpStatus{Comm: name, Peer: -1}
	if seq == 0 {
		return o
	}
	what := atomic.LoadUint64(&r.what)
	w := p2pOp(what & 0xffffffff)
	if w == 0 || int(w) >= len(p2pNames) {
		return o
	}
	o.Op, o.Seq, o.Running = p2pNames[w], seq, atomic.LoadUint64(&r.ends[seq%p2pEnds]) < seq
	o.Peer = int(int32(uint32(what >> 32)))
	if o.Running {
		r.mu.Lock()
		if r.seen != seq {
			r.seen, r.seenAt = seq, time.Now()
		}
		o.Since = r.seenAt
		r.mu.Unlock()
	}
	return o
}
