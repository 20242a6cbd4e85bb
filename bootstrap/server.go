package bootstrap

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ServerOptions configure a rendezvous server.
type ServerOptions struct {
	// Listen is the TCP address to listen on. Empty means "127.0.0.1:0"
	// (loopback, any port); a job that spans hosts listens on an address the
	// other hosts reach (see internal/netsel) or on ":port".
	Listen string
	// Token is the job secret every connection must prove it knows. Required.
	Token []byte
	// Size is the number of ranks in the job, 1..MaxSize. Required.
	Size int
	// Logger receives a line for every dropped connection, refused join and
	// abort. Nil means silent.
	Logger *slog.Logger
	// HandshakeTimeout bounds how long a new connection may take to
	// authenticate and send its join; a client that connects and sends
	// nothing is dropped after it. Zero means 10 s.
	HandshakeTimeout time.Duration
}

// maxHandshaking bounds connections that have not yet authenticated, so a
// flood of silent clients cannot exhaust the server. Beyond it the server
// stops accepting until a handshake ends: legitimate ranks of a very large
// job wait in the listen backlog instead of being turned away.
var maxHandshaking = 1024 // a variable for tests

// Server is the rendezvous server of one job: an authenticated key-value
// store with counters and collectives. A launcher runs it (or rank 0, see
// Join); ranks reach it with Dial. Its methods are safe for concurrent use.
//
// A connection that fails the handshake (wrong token, garbage, an
// oversized frame, silence past HandshakeTimeout) is logged and closed; it
// never affects the ranks of the job.
type Server struct {
	opts   ServerOptions
	log    *slog.Logger
	ln     net.Listener
	aborts chan AbortInfo
	wg     sync.WaitGroup
	once   sync.Once

	mu       sync.Mutex
	closed   bool
	conns    map[*sconn]struct{}
	slots    chan struct{} // one per connection still in its handshake
	quit     chan struct{} // closed by Close
	ranks    []*sconn      // by rank, once joined
	joined   int
	welcomed bool
	jobFail  *msg     // a failed join (mismatch), sent to every rank
	left     []string // by rank, after the welcome: why it left ("" = present)
	gaveUp   []bool   // by rank, before the welcome: joined, then left
	kv       map[string][]byte
	getters  map[string][]waiter
	counters map[string]int64
	colls    map[uint32]*coll
	doneSeq  uint32 // collectives with seq < doneSeq have completed
	abort    *AbortInfo
	failures []FailureReport // ranks' first failures, in arrival order
	idle     chan struct{}   // closed when no joined connection remains
	ready    chan struct{}   // closed when every rank has joined and agreed
}

type waiter struct {
	c  *sconn
	id uint32
}

// coll is one collective (fence or allgather) in progress.
type coll struct {
	kind    byte
	key     string
	first   int // the rank whose call fixed kind and key
	arrived []bool
	vals    [][]byte
	n       int
	waiters []waiter
	fail    *msg
}

// sconn is the server side of one connection.
type sconn struct {
	conn   net.Conn
	remote string // IP the connection came from
	rank   int    // -1 until joined
	host   string
	hostID string
	ver    string
	config string
	bye    bool

	mu      sync.Mutex
	out     [][]byte
	closing bool
	writing bool
	wake    chan struct{}
}

// NewServer listens and starts serving. Close stops it.
func NewServer(opts ServerOptions) (*Server, error) {
	if len(opts.Token) == 0 {
		return nil, &Error{Op: "server", Err: ErrInvalid, Detail: "empty token"}
	}
	if opts.Size < 1 || opts.Size > MaxSize {
		return nil, &Error{Op: "server", Err: ErrInvalid, Detail: fmt.Sprintf("job size %d out of range 1..%d", opts.Size, MaxSize)}
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.HandshakeTimeout <= 0 {
		opts.HandshakeTimeout = 10 * time.Second
	}
	opts.Token = slices.Clone(opts.Token)
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, &Error{Op: "server", Err: err, Detail: "listen on " + opts.Listen}
	}
	s := newServerState(opts, ln)
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func newServerState(opts ServerOptions, ln net.Listener) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Server{
		opts: opts, log: log, ln: ln,
		aborts:   make(chan AbortInfo, 64),
		conns:    map[*sconn]struct{}{},
		ranks:    make([]*sconn, opts.Size),
		left:     make([]string, opts.Size),
		gaveUp:   make([]bool, opts.Size),
		kv:       map[string][]byte{},
		getters:  map[string][]waiter{},
		counters: map[string]int64{},
		colls:    map[uint32]*coll{},
		idle:     make(chan struct{}),
		ready:    make(chan struct{}),
		slots:    make(chan struct{}, maxHandshaking),
		quit:     make(chan struct{}),
	}
}

// Addr is the address the server listens on ("127.0.0.1:41234").
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Aborts delivers the Abort of every rank that calls Client.Abort, in
// order. A launcher ends the job with the first one's code. The channel is
// closed by Close. If nobody reads it, aborts past the first 64 are
// dropped (and logged); the ranks are told either way.
func (s *Server) Aborts() <-chan AbortInfo { return s.aborts }

// Ready is closed once every rank has joined and the ranks agree on size,
// version and configuration: a launcher can bound the start-up of a job
// with it (and name the ranks still Missing when it gives up).
func (s *Server) Ready() <-chan struct{} { return s.ready }

// Missing returns the ranks that have not joined yet, ascending.
func (s *Server) Missing() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.missingLocked()
}

func (s *Server) missingLocked() []int {
	var out []int
	for r, c := range s.ranks {
		if c == nil {
			out = append(out, r)
		}
	}
	return out
}

// Close stops listening, tells every connected rank that the server is
// closing (their pending and later operations fail with ErrClosed), closes
// every connection and waits for the server's goroutines to end.
func (s *Server) Close() error {
	s.once.Do(func() {
		close(s.quit)
		s.ln.Close()
		s.mu.Lock()
		s.closed = true
		conns := make([]*sconn, 0, len(s.conns))
		for c := range s.conns {
			conns = append(conns, c)
		}
		s.mu.Unlock()
		for _, c := range conns {
			c.shutdown("the rendezvous server closed")
		}
		s.wg.Wait()
		close(s.aborts)
	})
	return nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	var delay time.Duration
	for {
		select {
		case s.slots <- struct{}{}:
		case <-s.quit:
			return
		}
		nc, err := s.ln.Accept()
		if err != nil {
			<-s.slots
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors and the like: back off, keep serving.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("bootstrap: accept failed", "err", err, "retry_in", delay)
			time.Sleep(delay)
			continue
		}
		delay = 0
		c := &sconn{conn: nc, rank: -1, wake: make(chan struct{}, 1)}
		if tcp, ok := nc.RemoteAddr().(*net.TCPAddr); ok {
			c.remote = tcp.IP.String()
		} else {
			c.remote = nc.RemoteAddr().String()
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			<-s.slots
			nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

// drop logs why a connection was refused and closes it.
func (s *Server) drop(c *sconn, reason string, err error) {
	attrs := []any{"remote", c.conn.RemoteAddr().String(), "reason", reason}
	if c.rank >= 0 {
		attrs = append(attrs, "rank", c.rank)
	}
	if err != nil {
		attrs = append(attrs, "err", err)
	}
	s.log.Warn("bootstrap: dropped connection", attrs...)
	c.conn.Close()
}

func (s *Server) serve(c *sconn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	br := bufio.NewReaderSize(c.conn, 4096)
	ok := s.handshake(c, br)
	<-s.slots
	if !ok {
		return
	}

	c.mu.Lock()
	if c.closing {
		// Close got here first.
		c.mu.Unlock()
		c.conn.Close()
		return
	}
	c.writing = true
	c.mu.Unlock()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	defer func() { <-writerDone }()

	j, err := readFrame(br, maxClientFrame)
	c.conn.SetDeadline(time.Time{})
	if err != nil || j.typ != tJoin {
		if err == nil {
			err = fmt.Errorf("%w: frame type %#x where a join was expected", ErrProtocol, j.typ)
		}
		s.drop(c, "no join after the handshake", err)
		c.shutdown("")
		return
	}
	if !s.join(c, j) {
		return
	}
	for {
		m, err := readFrame(br, maxClientFrame)
		if err != nil {
			if errors.Is(err, ErrProtocol) {
				s.drop(c, "malformed frame", err)
			}
			s.leave(c, err)
			return
		}
		if err := s.handle(c, m); err != nil {
			s.drop(c, "bad request", err)
			s.leave(c, err)
			return
		}
	}
}

// handshake runs the challenge-response; false means the connection was
// dropped.
func (s *Server) handshake(c *sconn, br *bufio.Reader) bool {
	c.conn.SetDeadline(time.Now().Add(s.opts.HandshakeTimeout))
	fail := func(reason string, err error) bool {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			reason = fmt.Sprintf("no handshake within %s", s.opts.HandshakeTimeout)
		}
		s.drop(c, reason, err)
		return false
	}
	h, err := readFrame(br, maxClientFrame)
	if err != nil {
		return fail("not a bootstrap client (bad hello)", err)
	}
	if h.typ != tHello {
		return fail("not a bootstrap client (bad hello)", fmt.Errorf("%w: frame type %#x", ErrProtocol, h.typ))
	}
	ns, err := newNonce()
	if err != nil {
		return fail("server error", err)
	}
	ch := msg{typ: tChallenge, nonce: ns, mac: proof(s.opts.Token, labelServer, &h.nonce, &ns)}
	if _, err := c.conn.Write(ch.encode(nil)); err != nil {
		return fail("write challenge", err)
	}
	p, err := readFrame(br, maxClientFrame)
	if err != nil {
		return fail("handshake incomplete", err)
	}
	if p.typ != tProof || !checkProof(s.opts.Token, labelClient, &h.nonce, &ns, p.mac) {
		return fail("wrong token", nil)
	}
	return true
}

// send queues one frame for the writer.
func (c *sconn) send(m *msg) { c.sendParts(m.encode(nil)) }

// sendParts queues one frame made of consecutive parts; parts may be shared
// between connections (an allgather's values) and are never modified.
func (c *sconn) sendParts(parts ...[]byte) {
	c.mu.Lock()
	if !c.closing {
		c.out = append(c.out, parts...)
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// shutdown sends a last shutdown frame (if reason is not empty) and closes
// the connection once everything queued is written. A connection without a
// writer (still in its handshake) is closed at once.
func (c *sconn) shutdown(reason string) {
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return
	}
	if reason != "" {
		c.out = append(c.out, (&msg{typ: tShutdown, key: reason}).encode(nil))
	}
	c.closing = true
	writing := c.writing
	c.mu.Unlock()
	if !writing {
		c.conn.Close()
		return
	}
	// Bound the goodbye even if the writer is stuck on a peer that stopped
	// reading.
	c.conn.SetWriteDeadline(time.Now().Add(time.Second))
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// closeAfter queues m as the last frame and closes the connection.
func (c *sconn) closeAfter(m *msg) {
	c.send(m)
	c.shutdown("")
}

const writeTimeout = 30 * time.Second

func (c *sconn) writeLoop() {
	bw := bufio.NewWriterSize(c.conn, 16<<10)
	for range c.wake {
		c.mu.Lock()
		out, closing := c.out, c.closing
		c.out = nil
		c.mu.Unlock()
		if closing {
			// Bound the goodbye: a peer that stopped reading must not
			// hold up Close.
			c.conn.SetWriteDeadline(time.Now().Add(time.Second))
		} else {
			c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
		}
		var err error
		for _, b := range out {
			if _, err = bw.Write(b); err != nil {
				break
			}
		}
		if err == nil {
			err = bw.Flush()
		}
		if err != nil || closing {
			c.conn.Close()
			c.mu.Lock()
			c.closing = true
			c.out = nil
			c.mu.Unlock()
			return
		}
	}
}

func errMsg(id uint32, code byte, ranks []int, format string, args ...any) *msg {
	text := fmt.Sprintf(format, args...)
	if len(text) > 4*MaxReasonLen {
		text = text[:4*MaxReasonLen-3] + "..."
	}
	m := &msg{typ: tError, id: id, ecode: code, key: text}
	for _, r := range ranks {
		m.ranks = append(m.ranks, uint32(r))
	}
	return m
}

// join registers a rank; false means the connection was refused.
func (s *Server) join(c *sconn, j msg) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	size := s.opts.Size
	refuse := func(m *msg) bool {
		s.log.Warn("bootstrap: refused join", "remote", c.conn.RemoteAddr().String(), "rank", int64(j.rank), "reason", m.key)
		c.closeAfter(m)
		return false
	}
	if s.closed {
		c.shutdown("the rendezvous server closed")
		return false
	}
	if s.jobFail != nil {
		return refuse(s.jobFail)
	}
	r := int(j.rank)
	if j.rank >= uint32(size) || j.rank >= j.size {
		return refuse(errMsg(0, ecRefused, nil, "rank %d is out of range for a job of %d ranks", j.rank, size))
	}
	if prev := s.ranks[r]; prev != nil {
		return refuse(errMsg(0, ecRefused, nil, "rank %d has already joined (from host %q, %s)", r, prev.host, prev.remote))
	}
	if int(j.size) != size {
		// A rank that disagrees on the job size cannot take part: fail the
		// whole job now rather than let it time out.
		s.jobFail = errMsg(0, ecMismatch, []int{r}, "rank %d says the job has %d ranks, the rendezvous server expects %d", r, j.size, size)
		s.log.Error("bootstrap: join failed", "reason", s.jobFail.key)
		for _, o := range s.ranks {
			if o != nil {
				o.closeAfter(s.jobFail)
			}
		}
		return refuse(s.jobFail)
	}
	c.rank, c.ver, c.config, c.host, c.hostID = r, j.key, j.config, j.host, j.hostID
	s.ranks[r] = c
	s.gaveUp[r] = false
	s.joined++
	s.log.Debug("bootstrap: rank joined", "rank", r, "host", c.host, "remote", c.remote, "joined", s.joined, "size", size)
	if s.joined < size {
		return true
	}
	if fail := s.checkAgreement(); fail != nil {
		s.jobFail = fail
		s.log.Error("bootstrap: join failed", "reason", fail.key)
		for _, o := range s.ranks {
			o.closeAfter(fail)
		}
		return false
	}
	s.welcomed = true
	close(s.ready)
	w := &msg{typ: tWelcome, values: make([][]byte, 0, 3*size)}
	for _, o := range s.ranks {
		w.values = append(w.values, []byte(o.host), []byte(o.hostID), []byte(o.remote))
	}
	for _, o := range s.ranks {
		o.send(w)
	}
	s.log.Info("bootstrap: all ranks joined", "size", size)
	return true
}

// checkAgreement compares every rank's version and configuration with rank
// 0's and describes the first difference found.
func (s *Server) checkAgreement() *msg {
	for _, f := range []struct {
		what string
		get  func(*sconn) string
	}{{"version", func(c *sconn) string { return c.ver }}, {"transport configuration", func(c *sconn) string { return c.config }}} {
		ref := f.get(s.ranks[0])
		groups := map[string][]int{}
		var order []string
		for r, c := range s.ranks {
			v := f.get(c)
			if v == ref {
				continue
			}
			if _, ok := groups[v]; !ok {
				order = append(order, v)
			}
			groups[v] = append(groups[v], r)
		}
		if len(order) == 0 {
			continue
		}
		var parts []string
		var bad []int
		for _, v := range order {
			rs := groups[v]
			bad = append(bad, rs...)
			verb := "have"
			if len(rs) == 1 {
				verb = "has"
			}
			parts = append(parts, fmt.Sprintf("%s %s %s %s", FormatRanks(rs), verb, f.what, quoteShort(v)))
		}
		slices.Sort(bad)
		return errMsg(0, ecMismatch, bad, "%s, rank 0 has %s", strings.Join(parts, "; "), quoteShort(ref))
	}
	return nil
}

// quoteShort quotes s, cutting it when long: configurations can be.
func quoteShort(s string) string {
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return fmt.Sprintf("%q", s)
}

// leave handles a joined connection that closed or broke.
func (s *Server) leave(c *sconn, err error) {
	c.shutdown("")
	s.mu.Lock()
	defer s.mu.Unlock()
	r := c.rank
	if r < 0 || s.ranks[r] != c || s.closed {
		// While the server closes, connections end one by one: that is
		// not a rank leaving, and every rank hears "closed" instead.
		return
	}
	// Forget its pending gets.
	for k, ws := range s.getters {
		ws = slices.DeleteFunc(ws, func(w waiter) bool { return w.c == c })
		if len(ws) == 0 {
			delete(s.getters, k)
		} else {
			s.getters[k] = ws
		}
	}
	if !s.welcomed {
		if s.jobFail == nil {
			// Before everyone joined, a rank that gives up (its Dial timed
			// out) is simply not there: it may try again.
			s.ranks[r] = nil
			s.gaveUp[r] = true
			s.joined--
			s.log.Info("bootstrap: rank left before the job started", "rank", r)
		}
		return
	}
	why := "closed its connection"
	if !c.bye {
		why = "lost its connection"
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
			why += ": " + err.Error()
		}
	}
	if s.left[r] == "" {
		s.left[r] = why
		s.noteLeftLocked(r, "rank "+strconv.Itoa(r)+" "+why)
		if c.bye {
			s.log.Debug("bootstrap: rank left", "rank", r)
		} else {
			s.log.Warn("bootstrap: rank lost", "rank", r, "err", err)
		}
	}
	for seq, cl := range s.colls {
		if cl.fail == nil && !cl.arrived[r] {
			s.failColl(cl, errMsg(0, ecRankLeft, []int{r}, "rank %d %s before entering %s", r, why, collName(seq, cl.kind, cl.key)))
		}
	}
	s.checkIdleLocked()
}

func (s *Server) checkIdleLocked() {
	for r, c := range s.ranks {
		if c != nil && s.left[r] == "" {
			return
		}
	}
	select {
	case <-s.idle:
	default:
		close(s.idle)
	}
}

// waitIdle waits until every joined rank has left, or d passes. Join uses it
// so that rank 0, hosting the server, does not pull it from under ranks
// still finishing.
func (s *Server) waitIdle(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-s.idle:
	case <-t.C:
	}
}

func collName(seq uint32, kind byte, key string) string {
	if kind == kindFence {
		return fmt.Sprintf("fence #%d", seq)
	}
	return fmt.Sprintf("allgather %q (collective #%d)", key, seq)
}

func (s *Server) failColl(cl *coll, m *msg) {
	cl.fail = m
	for _, w := range cl.waiters {
		f := *m
		f.id = w.id
		w.c.send(&f)
	}
	cl.waiters = nil
}

// handle serves one request of a joined rank. An error is a protocol
// violation: the connection is dropped.
func (s *Server) handle(c *sconn, m msg) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.abort != nil && m.typ != tBye && m.typ != tCancel {
		c.send(errMsg(m.id, ecAborted, []int{s.abort.Rank}, "rank %d aborted the job with code %d: %s", s.abort.Rank, s.abort.Code, s.abort.Reason))
		return nil
	}
	switch m.typ {
	case tPut:
		if m.key == "" {
			c.send(errMsg(m.id, ecInvalid, nil, "empty key"))
			return nil
		}
		s.kv[m.key] = m.value
		s.noteFailureLocked(c.rank, m.key, m.value)
		c.send(&msg{typ: tOK, id: m.id})
		for _, w := range s.getters[m.key] {
			w.c.send(&msg{typ: tValue, id: w.id, value: m.value})
		}
		delete(s.getters, m.key)
	case tGet:
		if m.key == "" {
			c.send(errMsg(m.id, ecInvalid, nil, "empty key"))
			return nil
		}
		if v, ok := s.kv[m.key]; ok {
			c.send(&msg{typ: tValue, id: m.id, value: v})
		} else {
			s.getters[m.key] = append(s.getters[m.key], waiter{c, m.id})
		}
	case tAdd:
		if m.key == "" {
			c.send(errMsg(m.id, ecInvalid, nil, "empty key"))
			return nil
		}
		s.counters[m.key] += m.delta
		c.send(&msg{typ: tCount, id: m.id, delta: s.counters[m.key]})
	case tColl:
		s.collective(c, m)
	case tCancel:
		for k, ws := range s.getters {
			ws = slices.DeleteFunc(ws, func(w waiter) bool { return w.c == c && w.id == m.id })
			if len(ws) == 0 {
				delete(s.getters, k)
			} else {
				s.getters[k] = ws
			}
		}
		for _, cl := range s.colls {
			cl.waiters = slices.DeleteFunc(cl.waiters, func(w waiter) bool { return w.c == c && w.id == m.id })
		}
	case tStatus:
		s.status(c, m)
	case tAbort:
		info := AbortInfo{Rank: c.rank, Code: int(m.code), Reason: m.key}
		s.abort = &info
		s.log.Error("bootstrap: rank aborted the job", "rank", info.Rank, "code", info.Code, "reason", info.Reason)
		select {
		case s.aborts <- info:
		default:
			s.log.Warn("bootstrap: abort not delivered: nobody reads Aborts", "rank", info.Rank)
		}
		c.send(&msg{typ: tOK, id: m.id})
		a := &msg{typ: tAborted, rank: uint32(info.Rank), code: m.code, key: m.key}
		for _, o := range s.ranks {
			if o != nil {
				o.send(a)
			}
		}
	case tBye:
		c.bye = true
		c.shutdown("")
	default:
		return fmt.Errorf("%w: frame type %#x from a client", ErrProtocol, m.typ)
	}
	return nil
}

func (s *Server) status(c *sconn, m msg) {
	rep := &msg{typ: tMissing, id: m.id}
	add := func(r int) { rep.ranks = append(rep.ranks, uint32(r)) }
	switch {
	case m.seq == joinSeq:
		// Ranks that joined and gave up (their own Dial timed out a
		// moment earlier) are named apart: they did come.
		for _, r := range s.missingLocked() {
			if s.gaveUp[r] {
				rep.gone = append(rep.gone, uint32(r))
			} else {
				add(r)
			}
		}
	case m.seq < s.doneSeq:
		// Completed: nobody is missing.
	default:
		cl := s.colls[m.seq]
		for r := 0; r < s.opts.Size; r++ {
			if cl == nil || !cl.arrived[r] {
				add(r)
			}
		}
	}
	c.send(rep)
}

func (s *Server) collective(c *sconn, m msg) {
	r, size := c.rank, s.opts.Size
	if !s.welcomed {
		c.send(errMsg(m.id, ecInvalid, nil, "collective before every rank joined"))
		return
	}
	if m.seq < s.doneSeq {
		c.send(errMsg(m.id, ecInvalid, nil, "rank %d entered %s, which already completed", r, collName(m.seq, m.kind, m.key)))
		return
	}
	cl := s.colls[m.seq]
	if cl == nil {
		cl = &coll{kind: m.kind, key: m.key, first: r, arrived: make([]bool, size)}
		if m.kind == kindAllgather {
			cl.vals = make([][]byte, size)
		}
		s.colls[m.seq] = cl
		// A rank that already left can never arrive.
		var gone []int
		for q, why := range s.left {
			if why != "" {
				gone = append(gone, q)
			}
		}
		if len(gone) > 0 {
			s.failColl(cl, errMsg(0, ecRankLeft, gone, "%s left the job before %s", FormatRanks(gone), collName(m.seq, m.kind, m.key)))
		}
	}
	if cl.arrived[r] {
		c.send(errMsg(m.id, ecInvalid, nil, "rank %d entered collective #%d twice", r, m.seq))
		return
	}
	cl.arrived[r] = true
	cl.n++
	if cl.fail == nil && (cl.kind != m.kind || cl.key != m.key) {
		s.failColl(cl, errMsg(0, ecMismatch, []int{r}, "rank %d called %s while rank %d called %s",
			r, collName(m.seq, m.kind, m.key), cl.first, collName(m.seq, cl.kind, cl.key)))
	}
	if cl.fail != nil {
		f := *cl.fail
		f.id = m.id
		c.send(&f)
	} else {
		if cl.vals != nil {
			cl.vals[r] = m.value
		}
		cl.waiters = append(cl.waiters, waiter{c, m.id})
	}
	if cl.n < size {
		return
	}
	delete(s.colls, m.seq)
	if m.seq >= s.doneSeq {
		s.doneSeq = m.seq + 1
	}
	if cl.fail != nil {
		return
	}
	// Everyone is here. The values are the same for every rank: encode
	// them once and share that body; only the small header with the
	// request id is per rank. (A star allgather moves size² values
	// through the server; sharing keeps its memory at size values.)
	body := gatheredBody(cl.vals)
	for _, w := range cl.waiters {
		w.c.sendParts(gatheredHeader(w.id, len(body)), body)
	}
}

// hostname is the default ClientOptions.Hostname.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "unknown"
	}
	if len(h) > MaxHostLen {
		h = h[:MaxHostLen]
	}
	return h
}
