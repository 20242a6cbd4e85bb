package bootstrap

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rdmago/rdmago/internal/hostid"
)

// ClientOptions configure a rank's connection to the rendezvous server.
type ClientOptions struct {
	// Addr is the server's "host:port". Required.
	Addr string
	// Token is the job secret. Required.
	Token []byte
	// Rank is this process's rank in [0, Size).
	Rank int
	// Size is the number of ranks in the job; it must equal the server's.
	Size int
	// Version is the library version; every rank must report the same one
	// (at most MaxVersionLen bytes).
	Version string
	// Config describes the transport configuration that must agree across
	// ranks (provider choice, options that change the wire protocol); it is
	// compared byte for byte (at most MaxConfigLen bytes: pass a hash if
	// longer).
	Config string
	// Hostname names this rank's host for people (messages, Peer.Host).
	// Empty means os.Hostname().
	Hostname string
	// HostID is this rank's host identity (internal/hostid): ranks with
	// equal HostIDs share a host. Empty means hostid.Best(), the kernel's
	// boot id and the network namespace, since ranks in containers or
	// network namespaces often share a host name and yet cannot reach each
	// other's loopback.
	HostID string
	// Logger receives diagnostics. Nil means silent.
	Logger *slog.Logger
}

// statusWait bounds how long a failing operation waits for the server to
// say which ranks are missing, once its own context has ended.
const statusWait = 2 * time.Second

// Client is a rank's connection to the rendezvous server. It implements
// Store, Adder and Allgatherer. Put, Get, Add and Abort may be called from
// many goroutines at once; collectives follow the Store rules.
//
// Once any rank aborts the job, the server closes, or the connection
// breaks, every pending and later operation fails (with ErrAborted,
// ErrClosed or ErrServerLost), and Done is closed.
type Client struct {
	opts     ClientOptions
	log      *slog.Logger
	conn     net.Conn
	maxFrame int
	peers    []Peer
	seq      atomic.Uint32
	server   *Server // hosted by this rank (Join with Serve)
	linger   time.Duration

	wmu sync.Mutex

	mu      sync.Mutex
	pending map[uint32]chan msg
	nextID  uint32
	err     error // terminal cause; set once
	done    chan struct{}

	readerDone chan struct{}
	closeOnce  sync.Once
}

// Dial connects to the rendezvous server, proves knowledge of the token,
// checks that the server knows it too, and joins: it returns once every
// rank of the job has joined and agreed on size, version and configuration.
// It keeps retrying a server that is not listening yet until ctx ends.
//
// Errors: ErrAuth (wrong token on either side), ErrRefused (duplicate rank,
// rank out of range), ErrMismatch (size, version or configuration differ;
// the message names the ranks), and when ctx ends, an *Error whose Ranks
// are the ranks that had not joined: "after 30s, ranks 3 and 7 of 8 have
// not joined".
func Dial(ctx context.Context, opts ClientOptions) (*Client, error) {
	start := time.Now()
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.Hostname == "" {
		opts.Hostname = hostname()
	}
	if opts.HostID == "" {
		opts.HostID = hostid.Best()
	}
	opts.Token = slices.Clone(opts.Token)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	conn, err := dialRetry(ctx, opts.Addr, start)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(conn, 16<<10)
	if err := clientHandshake(ctx, conn, br, opts.Token); err != nil {
		conn.Close()
		return nil, err
	}
	c := &Client{
		opts: opts, log: log, conn: conn,
		maxFrame:   maxServerFrame(opts.Size),
		pending:    map[uint32]chan msg{},
		nextID:     1,
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
	}
	joinCh := make(chan msg, 1)
	c.pending[0] = joinCh
	go c.readLoop(br)
	j := &msg{typ: tJoin, rank: uint32(opts.Rank), size: uint32(opts.Size), key: opts.Version, config: opts.Config, host: opts.Hostname, hostID: opts.HostID}
	if err := c.write(j); err != nil {
		c.Close()
		return nil, &Error{Op: "join", Err: err}
	}
	answered := func(m msg) (*Client, error) {
		if m.typ == tError {
			c.Close()
			return nil, c.replyErr("join", "", m)
		}
		if m.typ != tWelcome || len(m.values) != 3*opts.Size {
			c.Close()
			return nil, &Error{Op: "join", Err: ErrServerLost, Detail: fmt.Sprintf("unexpected reply %#x to the join", m.typ)}
		}
		for r := range opts.Size {
			v := m.values[3*r:]
			c.peers = append(c.peers, Peer{Rank: r, Host: string(v[0]), HostID: string(v[1]), Addr: string(v[2])})
		}
		return c, nil
	}
	select {
	case m := <-joinCh:
		return answered(m)
	case <-c.done:
		// The server may have explained itself just before closing.
		select {
		case m := <-joinCh:
			c.Close()
			if m.typ == tError {
				return nil, c.replyErr("join", "", m)
			}
		default:
		}
		err := c.terminal("join", "")
		c.Close()
		return nil, err
	case <-ctx.Done():
		missing, gone, ok := c.status(joinSeq)
		// The last rank may have come while we asked: then we are in.
		select {
		case m := <-joinCh:
			return answered(m)
		default:
		}
		c.Close()
		e := &Error{Op: "join", Err: ctx.Err(), Size: opts.Size, Ranks: missing}
		if ok {
			e.Detail = missingDetail(time.Since(start), missing, opts.Size, "joined")
			if len(gone) > 0 {
				verb := "have"
				if len(gone) == 1 {
					verb = "has"
				}
				e.Detail += fmt.Sprintf(" (%s joined but %s given up)", FormatRanks(gone), verb)
			}
		} else {
			e.Detail = fmt.Sprintf("after %s, not every rank had joined (the server did not say which)", roundElapsed(time.Since(start)))
		}
		return nil, e
	}
}

func (o *ClientOptions) check() error {
	bad := func(format string, args ...any) error {
		return &Error{Op: "dial", Err: ErrInvalid, Detail: fmt.Sprintf(format, args...)}
	}
	switch {
	case o.Addr == "":
		return bad("empty server address")
	case len(o.Token) == 0:
		return bad("empty token")
	case o.Size < 1 || o.Size > MaxSize:
		return bad("job size %d out of range 1..%d", o.Size, MaxSize)
	case o.Rank < 0 || o.Rank >= o.Size:
		return bad("rank %d out of range for a job of %d ranks", o.Rank, o.Size)
	case len(o.Version) > MaxVersionLen:
		return bad("version of %d bytes exceeds %d", len(o.Version), MaxVersionLen)
	case len(o.Config) > MaxConfigLen:
		return bad("config of %d bytes exceeds %d (pass a hash)", len(o.Config), MaxConfigLen)
	case len(o.Hostname) > MaxHostLen:
		return bad("host name of %d bytes exceeds %d", len(o.Hostname), MaxHostLen)
	case len(o.HostID) > MaxHostLen:
		return bad("host identity of %d bytes exceeds %d", len(o.HostID), MaxHostLen)
	}
	return nil
}

// dialRetry connects, retrying refused connections (a server still
// starting) with backoff until ctx ends.
func dialRetry(ctx context.Context, addr string, start time.Time) (net.Conn, error) {
	var d net.Dialer
	delay := 10 * time.Millisecond
	var last error
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			// Report why the earlier attempts failed, not the interrupted one.
			if last == nil {
				last = err
			}
			return nil, &Error{Op: "dial", Err: ctx.Err(),
				Detail: fmt.Sprintf("could not reach the rendezvous server at %s after %s: %v", addr, roundElapsed(time.Since(start)), last)}
		}
		last = err
		var ae *net.AddrError
		var de *net.DNSError
		if errors.As(err, &ae) || (errors.As(err, &de) && de.IsNotFound) {
			return nil, &Error{Op: "dial", Err: err, Detail: "bad server address " + addr}
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

func clientHandshake(ctx context.Context, conn net.Conn, br *bufio.Reader, token []byte) (err error) {
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() && err == nil {
			err = &Error{Op: "dial", Err: ctx.Err(), Detail: "handshake interrupted"}
		}
		conn.SetDeadline(time.Time{})
	}()
	wrap := func(what string, err error) error {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// The only deadlines here are ctx's, which may fire before
			// ctx's own timer marks it done.
			<-ctx.Done()
		}
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return &Error{Op: "dial", Err: err, Detail: what + " with " + conn.RemoteAddr().String()}
	}
	nc, err := newNonce()
	if err != nil {
		return err
	}
	if _, err := conn.Write((&msg{typ: tHello, nonce: nc}).encode(nil)); err != nil {
		return wrap("handshake", err)
	}
	ch, err := readFrame(br, maxClientFrame)
	if err != nil {
		if errors.Is(err, ErrProtocol) {
			err = fmt.Errorf("%w: %w", ErrServerLost, err)
		}
		return wrap("handshake (is this a bootstrap server?)", err)
	}
	if ch.typ != tChallenge {
		return wrap("handshake", fmt.Errorf("%w: unexpected frame type %#x", ErrServerLost, ch.typ))
	}
	// Always answer, so that the server can log a wrong token as such,
	// then check the server's proof. Our proof is bound to the server's
	// nonce, so a rogue server learns nothing it can replay.
	p := &msg{typ: tProof, mac: proof(token, labelClient, &nc, &ch.nonce)}
	_, werr := conn.Write(p.encode(nil))
	if !checkProof(token, labelServer, &nc, &ch.nonce, ch.mac) {
		return &Error{Op: "dial", Err: ErrAuth,
			Detail: "the rendezvous server at " + conn.RemoteAddr().String() + " does not know this job's token (wrong token here or there)"}
	}
	if werr != nil {
		return wrap("handshake", werr)
	}
	return nil
}

// Rank is this rank.
func (c *Client) Rank() int { return c.opts.Rank }

// Size is the job size.
func (c *Client) Size() int { return c.opts.Size }

// Peers is what every rank reported when it joined, indexed by rank.
func (c *Client) Peers() []Peer { return slices.Clone(c.peers) }

// SpansHosts reports whether the ranks report more than one host identity
// (Peer.HostID), so that addresses they advertise to each other must not
// be loopback. Host names are not compared: hosts that share one (network
// namespaces, containers) are still different hosts.
func (c *Client) SpansHosts() bool {
	for _, p := range c.peers {
		if !hostid.Same(p.HostID, c.peers[0].HostID) {
			return true
		}
	}
	return false
}

// Done is closed when the client can no longer be used: the job was
// aborted, the server closed or was lost, or Close was called.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is the cause Done was closed with, nil while it is open. Test it
// with errors.Is (ErrAborted, ErrClosed, ErrServerLost) or errors.As
// (*AbortError).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) readLoop(br *bufio.Reader) {
	defer close(c.readerDone)
	for {
		m, err := readFrame(br, c.maxFrame)
		if err != nil {
			c.terminate(fmt.Errorf("%w: %w", ErrServerLost, err))
			return
		}
		switch m.typ {
		case tAborted:
			c.terminate(&AbortError{Info: AbortInfo{Rank: int(m.rank), Code: int(m.code), Reason: m.key}})
			continue
		case tShutdown:
			c.terminate(fmt.Errorf("%w: %s", ErrClosed, m.key))
			continue
		case tWelcome:
			m.id = 0
		case tOK, tValue, tCount, tGathered, tMissing, tError:
		default:
			c.terminate(fmt.Errorf("%w: unexpected frame type %#x from the server", ErrServerLost, m.typ))
			c.conn.Close()
			return
		}
		c.mu.Lock()
		ch := c.pending[m.id]
		delete(c.pending, m.id)
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// terminate makes the client unusable with cause; the first cause wins.
func (c *Client) terminate(cause error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.err = cause
	close(c.done)
	var ae *AbortError
	if errors.As(cause, &ae) {
		c.log.Error("bootstrap: job aborted", "rank", ae.Info.Rank, "code", ae.Info.Code, "reason", ae.Info.Reason)
	} else if !errors.Is(cause, errClientClosed) {
		c.log.Warn("bootstrap: rendezvous unusable", "rank", c.opts.Rank, "err", cause)
	}
}

var errClientClosed = fmt.Errorf("%w: client closed", ErrClosed)

func (c *Client) terminal(op, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &Error{Op: op, Key: key, Err: c.err}
}

func (c *Client) write(m *msg) error {
	b := m.encode(nil)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.conn.SetWriteDeadline(time.Now().Add(writeTimeout))
	if _, err := c.conn.Write(b); err != nil {
		err = fmt.Errorf("%w: %w", ErrServerLost, err)
		c.terminate(err)
		c.conn.Close()
		return err
	}
	return nil
}

// call sends a request and waits for its reply. When ctx ends first and
// cancel is set, the server is told to forget the request.
func (c *Client) call(ctx context.Context, op, key string, m *msg, cancel bool) (msg, error) {
	ch := make(chan msg, 1)
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return msg{}, c.terminal(op, key)
	}
	id := c.nextID
	c.nextID++
	if c.nextID == 0 || c.nextID == joinSeq {
		c.nextID = 1
	}
	m.id = id
	c.pending[id] = ch
	c.mu.Unlock()
	forget := func() {
		c.mu.Lock()
		delete(c.pending, id)
		c.mu.Unlock()
	}
	// No check of ctx here: a collective that took its sequence number
	// must reach the server, or this rank's collectives would shift. The
	// callers check ctx before they start.
	if err := c.write(m); err != nil {
		forget()
		return msg{}, c.terminal(op, key)
	}
	reply := func(r msg) (msg, error) {
		if r.typ == tError {
			return r, c.replyErr(op, key, r)
		}
		return r, nil
	}
	select {
	case r := <-ch:
		return reply(r)
	case <-c.done:
		// A reply that arrived just before the end still counts.
		select {
		case r := <-ch:
			return reply(r)
		default:
		}
		forget()
		return msg{}, c.terminal(op, key)
	case <-ctx.Done():
		forget()
		if cancel {
			c.write(&msg{typ: tCancel, id: id})
		}
		return msg{}, &Error{Op: op, Key: key, Err: ctx.Err()}
	}
}

func (c *Client) replyErr(op, key string, m msg) error {
	cause := codeErr[m.ecode]
	if cause == nil {
		cause = ErrServerLost
	}
	e := &Error{Op: op, Key: key, Detail: m.key, Err: cause}
	if cause == ErrAborted {
		// The server sends the abort itself before any reply it refuses
		// for it, and readLoop handles frames in order: the reply carries
		// the AbortError then, as every other failed operation does,
		// rather than the bare sentinel (a request the server took after
		// the abort, though sent before this rank learned of it).
		c.mu.Lock()
		var ae *AbortError
		if errors.As(c.err, &ae) {
			e.Err, e.Detail = ae, ""
		}
		c.mu.Unlock()
	}
	for _, r := range m.ranks {
		e.Ranks = append(e.Ranks, int(r))
	}
	if len(e.Ranks) > 0 {
		e.Size = c.opts.Size
	}
	return e
}

// status asks the server which ranks have not reached collective seq (or
// the join); ok is false when it did not answer within statusWait.
func (c *Client) status(seq uint32) (missing, gone []int, ok bool) {
	ctx, cancel := context.WithTimeout(context.Background(), statusWait)
	defer cancel()
	r, err := c.call(ctx, "status", "", &msg{typ: tStatus, seq: seq}, false)
	if err != nil || r.typ != tMissing {
		return nil, nil, false
	}
	for _, q := range r.ranks {
		missing = append(missing, int(q))
	}
	for _, q := range r.gone {
		gone = append(gone, int(q))
	}
	return missing, gone, true
}

// Put stores value under key. It returns once the server has stored it.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	if err := checkKey("put", key); err != nil {
		return err
	}
	if err := checkValue("put", key, value); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return &Error{Op: "put", Key: key, Err: err}
	}
	_, err := c.call(ctx, "put", key, &msg{typ: tPut, key: key, value: value}, false)
	return err
}

// Get returns the value under key, waiting until some rank puts it or ctx
// ends.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKey("get", key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: "get", Key: key, Err: err}
	}
	start := time.Now()
	r, err := c.call(ctx, "get", key, &msg{typ: tGet, key: key}, true)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			e.Detail = fmt.Sprintf("no rank had put the key after %s", roundElapsed(time.Since(start)))
		}
		return nil, err
	}
	if r.typ != tValue {
		return nil, &Error{Op: "get", Key: key, Err: ErrServerLost, Detail: fmt.Sprintf("unexpected reply %#x", r.typ)}
	}
	return r.value, nil
}

// Add adds delta to the counter key and returns its new value.
func (c *Client) Add(ctx context.Context, key string, delta int64) (int64, error) {
	if err := checkKey("add", key); err != nil {
		return 0, err
	}
	if err := ctx.Err(); err != nil {
		return 0, &Error{Op: "add", Key: key, Err: err}
	}
	r, err := c.call(ctx, "add", key, &msg{typ: tAdd, key: key, delta: delta}, false)
	if err != nil {
		return 0, err
	}
	if r.typ != tCount {
		return 0, &Error{Op: "add", Key: key, Err: ErrServerLost, Detail: fmt.Sprintf("unexpected reply %#x", r.typ)}
	}
	return r.delta, nil
}

// Fence is a barrier over all ranks.
func (c *Client) Fence(ctx context.Context) error {
	_, err := c.collective(ctx, "fence", kindFence, "", nil)
	return err
}

// Allgather contributes value and returns every rank's, indexed by rank.
func (c *Client) Allgather(ctx context.Context, key string, value []byte) ([][]byte, error) {
	if err := checkKey("allgather", key); err != nil {
		return nil, err
	}
	if err := checkValue("allgather", key, value); err != nil {
		return nil, err
	}
	return c.collective(ctx, "allgather", kindAllgather, key, value)
}

func (c *Client) collective(ctx context.Context, op string, kind byte, key string, value []byte) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, &Error{Op: op, Key: key, Err: err}
	}
	start := time.Now()
	seq := c.seq.Add(1) - 1
	r, err := c.call(ctx, op, key, &msg{typ: tColl, seq: seq, kind: kind, key: key, value: value}, true)
	if err != nil {
		var e *Error
		if errors.As(err, &e) && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			if missing, _, ok := c.status(seq); ok && len(missing) > 0 {
				e.Ranks, e.Size = missing, c.opts.Size
				e.Detail = missingDetail(time.Since(start), missing, c.opts.Size, "arrived")
			} else {
				e.Detail = fmt.Sprintf("not complete after %s", roundElapsed(time.Since(start)))
			}
		}
		return nil, err
	}
	if r.typ != tGathered || (kind == kindAllgather && len(r.values) != c.opts.Size) {
		return nil, &Error{Op: op, Key: key, Err: ErrServerLost, Detail: fmt.Sprintf("unexpected reply %#x with %d values", r.typ, len(r.values))}
	}
	return r.values, nil
}

// Abort tells the server (and through it the launcher and every other
// rank) that this rank ends the job with code and reason. It returns once
// the server has recorded it; afterwards every operation of every rank
// fails with an *AbortError.
func (c *Client) Abort(ctx context.Context, code int, reason string) error {
	if len(reason) > MaxReasonLen {
		reason = reason[:MaxReasonLen]
	}
	if err := ctx.Err(); err != nil {
		return &Error{Op: "abort", Err: err}
	}
	_, err := c.call(ctx, "abort", "", &msg{typ: tAbort, code: int32(code), key: reason}, false)
	return err
}

// Close leaves the job: the server notes that this rank left on purpose
// (collectives it has not entered fail on the other ranks with
// ErrRankLeft), and the connection is closed. When this rank hosts the
// server (Join with Serve), Close first waits, up to JoinOptions.Linger,
// for the other ranks to leave, then closes the server.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.terminate(errClientClosed)
		// Say goodbye and wait (briefly) for the server to close its end:
		// closing ours with unread data in the socket would send a reset
		// that could destroy the goodbye before the server reads it.
		c.wmu.Lock()
		c.conn.SetWriteDeadline(time.Now().Add(time.Second))
		_, err := c.conn.Write((&msg{typ: tBye}).encode(nil))
		c.wmu.Unlock()
		if err == nil {
			t := time.NewTimer(time.Second)
			select {
			case <-c.readerDone:
			case <-t.C:
			}
			t.Stop()
		}
		c.conn.Close()
		<-c.readerDone
		if c.server != nil {
			c.server.waitIdle(c.linger)
			c.server.Close()
		}
	})
	return nil
}

var (
	_ Store       = (*Client)(nil)
	_ Adder       = (*Client)(nil)
	_ Allgatherer = (*Client)(nil)
	_ Store       = (*Memory)(nil)
	_ Adder       = (*Memory)(nil)
	_ Allgatherer = (*Memory)(nil)
	_ Aborter     = (*Client)(nil)
	_ Aborter     = (*Memory)(nil)
)
