package pmi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
)

// Options say how to reach the PMI server. The launcher hands them to the
// rank in its environment (PMI_FD, PMI_RANK, PMI_SIZE, PMI_JOBID, or
// PMI_PORT and PMI_ID); comm reads that environment, this package does not.
type Options struct {
	// Conn is an established connection to the PMI server. When nil, FD
	// or Port is used.
	Conn net.Conn
	// FD is the inherited socket (PMI_FD). Open takes it over: the
	// descriptor is closed (the Client holds a duplicate with
	// close-on-exec set, so programs the rank starts do not inherit it).
	FD int
	// Port is Hydra's "host:port" (PMI_PORT, with mpiexec -pmi-port) and
	// ID the rank's PMI_ID there; rank and size then come from the server.
	Port string
	ID   int
	// Rank and Size are PMI_RANK and PMI_SIZE. Required with Conn and FD
	// (PMI-1 has no command that returns them); checked against the
	// server's own with PMI-2 and Port.
	Rank, Size int
	// JobID is PMI_JOBID when the launcher sets it (Slurm: "<job>.<step>");
	// PMI-2's fullinit needs it under Slurm.
	JobID string
	// Version is the wire protocol: 1 (the default; Hydra and Slurm's
	// mpi/pmi2 plugin both speak it) or 2.
	Version int
	// PollInterval is the first wait between two gets of a key that is
	// not there yet; the wait doubles up to 100 ms. Zero means 1 ms.
	PollInterval time.Duration
	// Logger receives diagnostics. Nil means silent.
	Logger *slog.Logger
}

// RCError is the cause when the PMI server answers a request with a
// non-zero rc.
type RCError struct {
	Cmd string // the reply's cmd ("put_result", "kvs-fence-response")
	RC  int
	Msg string // the server's msg or errmsg, if any
}

func (e *RCError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("PMI server answered %s with rc=%d: %s", e.Cmd, e.RC, e.Msg)
	}
	return fmt.Sprintf("PMI server answered %s with rc=%d", e.Cmd, e.RC)
}

// Client is a rank's connection to its launcher's PMI server. It
// implements bootstrap.Store and bootstrap.Aborter.
//
// Requests and replies alternate on one socket, so operations run one at
// a time (Put and Get from many goroutines are safe; they queue). Abort
// does not queue: it is written at once, even while a Fence waits.
//
// An operation whose context ends while the server has not answered
// leaves that answer due; the next operation reads and discards it first
// (a cancelled Fence therefore still counts as entered, as the Store
// contract says). A broken connection or a malformed reply ends the
// Client: every later operation fails with bootstrap.ErrServerLost.
type Client struct {
	opts    Options
	log     *slog.Logger
	conn    net.Conn
	v2      bool
	rank    int
	size    int
	kvsname string
	keyMax  int
	valMax  int

	sem chan struct{} // one request/reply exchange at a time
	wmu sync.Mutex    // whole messages on the socket (Abort bypasses sem)

	// Guarded by sem.
	rbuf []byte   // bytes received but not yet parsed
	due  []string // replies still to be read and discarded, by cmd

	mu        sync.Mutex
	err       error // terminal; set once
	closed    bool
	closeOnce sync.Once
}

// Open connects to the PMI server, initializes the PMI library state
// there and learns the key-value space's limits and name. It is not a
// collective: every rank opens its own Client, without waiting for the
// others.
func Open(ctx context.Context, o Options) (*Client, error) {
	fail := func(detail string, err error) (*Client, error) {
		return nil, &bootstrap.Error{Op: "pmi open", Detail: detail, Err: err}
	}
	if ctx == nil {
		return fail("nil context", bootstrap.ErrInvalid)
	}
	if o.Version == 0 {
		o.Version = 1
	}
	if o.Version != 1 && o.Version != 2 {
		return fail(fmt.Sprintf("PMI version %d: want 1 or 2", o.Version), bootstrap.ErrInvalid)
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Millisecond
	}
	c := &Client{opts: o, log: o.Logger, v2: o.Version == 2, sem: make(chan struct{}, 1), rank: o.Rank, size: o.Size}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	if o.Port == "" && (o.Size < 1 || o.Size > bootstrap.MaxSize || o.Rank < 0 || o.Rank >= o.Size) {
		return fail(fmt.Sprintf("rank %d of size %d: want 0 <= rank < size <= %d", o.Rank, o.Size, bootstrap.MaxSize), bootstrap.ErrInvalid)
	}
	switch {
	case o.Conn != nil:
		c.conn = o.Conn
	case o.FD > 0:
		f := os.NewFile(uintptr(o.FD), "PMI_FD")
		if f == nil {
			return fail(fmt.Sprintf("PMI_FD=%d is not a valid descriptor", o.FD), bootstrap.ErrInvalid)
		}
		conn, err := net.FileConn(f) // dups the descriptor with close-on-exec
		f.Close()
		if err != nil {
			return fail(fmt.Sprintf("PMI_FD=%d is not a socket inherited from the launcher", o.FD), err)
		}
		c.conn = conn
	case o.Port != "":
		var d net.Dialer
		conn, err := d.DialContext(ctx, "tcp", o.Port)
		if err != nil {
			return fail("connecting to PMI_PORT "+o.Port, err)
		}
		c.conn = conn
	default:
		return fail("no Conn, FD or Port", bootstrap.ErrInvalid)
	}
	if err := c.init(ctx); err != nil {
		c.conn.Close()
		var be *bootstrap.Error
		if errors.As(err, &be) {
			be.Op = "pmi open"
			return nil, be
		}
		return fail("", err)
	}
	c.log.Debug("pmi: opened", "version", o.Version, "rank", c.rank, "size", c.size, "kvs", c.kvsname, "keylen", c.keyMax, "vallen", c.valMax)
	return c, nil
}

func (c *Client) init(ctx context.Context) error {
	c.sem <- struct{}{}
	defer func() { <-c.sem }()
	if c.opts.Port != "" {
		// Hydra's -pmi-port handshake: identify, then learn size and rank.
		if err := c.send(ctx, format1("initack", "pmiid", strconv.Itoa(c.opts.ID))); err != nil {
			return err
		}
		size, rank := -1, -1
		for range 8 {
			m, err := c.recv(ctx, false)
			if err != nil {
				return err
			}
			switch m.cmd {
			case "initack":
				continue
			case "set":
				if v, ok := m.get("size"); ok {
					size, _ = strconv.Atoi(v)
				}
				if v, ok := m.get("rank"); ok {
					rank, _ = strconv.Atoi(v)
				}
				if _, ok := m.get("debug"); !ok {
					continue
				}
			default:
				return &bootstrap.Error{Op: "pmi open", Err: bootstrap.ErrServerLost, Detail: "unexpected " + clip(m.String()) + " in the PMI_PORT handshake"}
			}
			break
		}
		if size < 1 || rank < 0 || rank >= size {
			return &bootstrap.Error{Op: "pmi open", Err: bootstrap.ErrServerLost, Detail: fmt.Sprintf("PMI_PORT handshake gave rank %d of size %d", rank, size)}
		}
		c.rank, c.size = rank, size
	}
	if !c.v2 {
		if _, err := c.roundTrip(ctx, "init", format1("init", "pmi_version", "1", "pmi_subversion", "1"), "response_to_init"); err != nil {
			return err
		}
		m, err := c.roundTrip(ctx, "init", format1("get_maxes"), "maxes")
		if err != nil {
			return err
		}
		c.keyMax, _ = strconv.Atoi(m.fields["keylen_max"])
		c.valMax, _ = strconv.Atoi(m.fields["vallen_max"])
		m, err = c.roundTrip(ctx, "init", format1("get_my_kvsname"), "my_kvsname")
		if err != nil {
			return err
		}
		c.kvsname = m.fields["kvsname"]
		if c.kvsname == "" || strings.ContainsAny(c.kvsname, " \n") {
			return &bootstrap.Error{Op: "pmi open", Err: bootstrap.ErrServerLost, Detail: fmt.Sprintf("bad kvsname %q", clip(c.kvsname))}
		}
	} else {
		// The init line is PMI-1 style; everything after it is framed.
		if _, err := c.roundTrip(ctx, "init", format1("init", "pmi_version", "2", "pmi_subversion", "0"), "response_to_init"); err != nil {
			return err
		}
		kv := []string{"pmirank", strconv.Itoa(c.rank), "threaded", "FALSE"}
		if c.opts.JobID != "" {
			kv = append([]string{"pmijobid", c.opts.JobID}, kv...)
		}
		m, err := c.roundTrip(ctx, "init", format2("fullinit", kv...), "fullinit-response")
		if err != nil {
			return err
		}
		rank, err1 := strconv.Atoi(m.fields["rank"])
		size, err2 := strconv.Atoi(m.fields["size"])
		if err1 != nil || err2 != nil || size < 1 || rank < 0 || rank >= size {
			return &bootstrap.Error{Op: "pmi open", Err: bootstrap.ErrServerLost, Detail: fmt.Sprintf("fullinit-response gave rank %q of size %q", m.fields["rank"], m.fields["size"])}
		}
		if c.opts.Port == "" && (rank != c.rank || size != c.size) {
			return &bootstrap.Error{Op: "pmi open", Err: bootstrap.ErrMismatch,
				Detail: fmt.Sprintf("the PMI server says rank %d of %d, the environment said rank %d of %d", rank, size, c.rank, c.size)}
		}
		c.rank, c.size = rank, size
		// PMI-2's fixed limits (PMI2_MAX_KEYLEN, PMI2_MAX_VALLEN).
		c.keyMax, c.valMax = 64, 1024
		c.kvsname = c.opts.JobID
	}
	if c.keyMax < minKeyLen || c.valMax < minValLen+len(c.kvsname)+len("cmd=put kvsname= key= value=\n")+maxWireKey {
		return &bootstrap.Error{Op: "pmi open", Err: bootstrap.ErrServerLost,
			Detail: fmt.Sprintf("the PMI server allows keys of %d and values of %d bytes; rdmago needs at least %d and %d", c.keyMax, c.valMax, minKeyLen, minValLen)}
	}
	return nil
}

// Limits below which the key and value encodings do not work.
const (
	minKeyLen = 40
	minValLen = 64 // bytes of value per request line, besides the command
)

// Rank is this process's rank.
func (c *Client) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Client) Size() int { return c.size }

// KVSName is the PMI key-value space's name (PMI-1), or the job id (PMI-2).
func (c *Client) KVSName() string { return c.kvsname }

// Limits are the server's longest key and value, in bytes on the wire.
func (c *Client) Limits() (key, value int) { return c.keyMax, c.valMax }

// Key and value encoding.
//
// PMI keys and values are text without spaces, newlines or ';'. A key is
// sent as "rdmago:" + key when it is made of [A-Za-z0-9._:/-] and short
// enough; otherwise as "rdmago#" + 27 characters of its SHA-256 in
// base64url (162 bits). The prefixes keep rdmago's keys apart from an MPI
// library's in the same job and the two forms apart from each other.
//
// A value is base64url without padding (1024 bytes become 1366
// characters). When "v" + that fits the server's value limit, it is stored
// as is; otherwise it is cut into pieces: the key holds "c<n>." + piece 0
// and key~1 ... key~<n-1> hold the others. The pieces are put before the
// key itself, so that a reader who finds the key finds them too.
const (
	plainPrefix  = "rdmago:"
	hashedPrefix = "rdmago#"
	pieceSuffix  = 4 // "~" + up to 3 digits
	// maxWireKey bounds keys on the wire even where the server allows
	// longer ones, so that a request line keeps room for its value.
	maxWireKey = 100
)

func (c *Client) wireKey(key string) string {
	if len(plainPrefix)+len(key)+pieceSuffix <= min(c.keyMax, maxWireKey) && plainKey(key) {
		return plainPrefix + key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedPrefix + base64.RawURLEncoding.EncodeToString(sum[:])[:27]
}

func plainKey(k string) bool {
	for i := 0; i < len(k); i++ {
		b := k[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == ':' || b == '/' || b == '-') {
			return false
		}
	}
	return true
}

// pieces encodes value as the strings stored under wk, wk~1, ... Each
// whole request line stays within the server's value limit, not only the
// value: Slurm's plugin reads a PMI-1 request into a buffer of that size
// and misreads a longer line.
func (c *Client) pieces(wk string, value []byte) []string {
	var overhead int
	if c.v2 {
		overhead = len(format2("kvs-put", "key", wk+"~999", "value", ""))
	} else {
		overhead = len(format1("put", "kvsname", c.kvsname, "key", wk+"~999", "value", ""))
	}
	limit := c.valMax - overhead
	e := base64.RawURLEncoding.EncodeToString(value)
	if 1+len(e) <= limit {
		return []string{"v" + e}
	}
	room := limit - len("c999.")
	n := (len(e) + room - 1) / room
	out := make([]string, n)
	for i := range n {
		out[i] = e[i*room : min(len(e), (i+1)*room)]
	}
	out[0] = "c" + strconv.Itoa(n) + "." + out[0]
	return out
}

// Put stores value under key. Under PMI a value becomes visible to other
// ranks at their next Fence after this one's (PMI-1 commit is implicit,
// PMI-2 kvs-fence publishes), so a reader calls Get after a Fence.
// Putting the same key twice is refused by some servers.
func (c *Client) Put(ctx context.Context, key string, value []byte) error {
	if err := checkKV("put", key, value); err != nil {
		return err
	}
	wk := c.wireKey(key)
	ps := c.pieces(wk, value)
	if len(ps) > 999 {
		return &bootstrap.Error{Op: "put", Key: key, Err: bootstrap.ErrInvalid, Detail: "value needs more than 999 pieces"}
	}
	// Pieces first, the key last (see the encoding above).
	for i := len(ps) - 1; i >= 0; i-- {
		k := wk
		if i > 0 {
			k = wk + "~" + strconv.Itoa(i)
		}
		if err := c.put(ctx, key, k, ps[i]); err != nil {
			return err
		}
	}
	return nil
}

func (c *Client) put(ctx context.Context, key, wk, wv string) error {
	var err error
	if c.v2 {
		_, err = c.exchange(ctx, "put", key, format2("kvs-put", "key", wk, "value", wv), "kvs-put-response")
	} else {
		_, err = c.exchange(ctx, "put", key, format1("put", "kvsname", c.kvsname, "key", wk, "value", wv), "put_result")
	}
	return err
}

// Get returns the value under key, polling the server until some rank's
// Put of it has been published by a Fence, or ctx ends.
func (c *Client) Get(ctx context.Context, key string) ([]byte, error) {
	if err := checkKV("get", key, nil); err != nil {
		return nil, err
	}
	wk := c.wireKey(key)
	first, err := c.poll(ctx, key, wk)
	if err != nil {
		return nil, err
	}
	var enc string
	switch {
	case strings.HasPrefix(first, "v"):
		enc = first[1:]
	case strings.HasPrefix(first, "c"):
		head, rest, ok := strings.Cut(first[1:], ".")
		n, err := strconv.Atoi(head)
		if !ok || err != nil || n < 2 || n > 999 {
			return nil, &bootstrap.Error{Op: "get", Key: key, Err: bootstrap.ErrProtocol, Detail: fmt.Sprintf("value %q is not rdmago's encoding", clip(first))}
		}
		var b strings.Builder
		b.WriteString(rest)
		for i := 1; i < n; i++ {
			p, err := c.poll(ctx, key, wk+"~"+strconv.Itoa(i))
			if err != nil {
				return nil, err
			}
			b.WriteString(p)
		}
		enc = b.String()
	default:
		return nil, &bootstrap.Error{Op: "get", Key: key, Err: bootstrap.ErrProtocol, Detail: fmt.Sprintf("value %q is not rdmago's encoding", clip(first))}
	}
	v, err := base64.RawURLEncoding.DecodeString(enc)
	if err != nil {
		return nil, &bootstrap.Error{Op: "get", Key: key, Err: bootstrap.ErrProtocol, Detail: "value is not base64url: " + err.Error()}
	}
	return v, nil
}

// poll gets one wire key, retrying while the server says it is absent.
func (c *Client) poll(ctx context.Context, key, wk string) (string, error) {
	start := time.Now()
	wait := c.opts.PollInterval
	var last string
	for {
		var m msg
		var err error
		if c.v2 {
			m, err = c.exchange(ctx, "get", key, format2("kvs-get", "jobid", "", "srcid", "-1", "key", wk), "kvs-get-response")
			if err == nil {
				if m.fields["found"] == "TRUE" {
					return m.fields["value"], nil
				}
				last = "found=" + m.fields["found"]
			}
		} else {
			m, err = c.exchange(ctx, "get", key, format1("get", "kvsname", c.kvsname, "key", wk), "get_result")
			if err == nil {
				return m.fields["value"], nil
			}
		}
		// PMI-1 reports an absent key as a non-zero rc (Hydra: -1 with
		// msg=key_..._not_found, Slurm: 1): keep polling. Anything else
		// ends the Get.
		var rce *RCError
		if err != nil && !errors.As(err, &rce) {
			if ctx.Err() != nil {
				return "", c.notFound(ctx, key, start, last)
			}
			return "", err
		}
		if rce != nil {
			last = rce.Error()
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", c.notFound(ctx, key, start, last)
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

func (c *Client) notFound(ctx context.Context, key string, start time.Time, last string) error {
	d := fmt.Sprintf("not found after %s", time.Since(start).Round(time.Millisecond))
	if last != "" {
		d += " (last answer: " + last + ")"
	}
	d += "; under PMI a value is visible only after the rank that put it and this rank have called Fence"
	return &bootstrap.Error{Op: "get", Key: key, Err: context.Cause(ctx), Detail: d}
}

// Fence is the PMI barrier (PMI-1 barrier_in, PMI-2 kvs-fence): it
// returns once every rank has entered it, and publishes every earlier Put.
func (c *Client) Fence(ctx context.Context) error {
	if ctx != nil && ctx.Err() != nil {
		return &bootstrap.Error{Op: "fence", Err: ctx.Err()}
	}
	var err error
	if c.v2 {
		_, err = c.exchange(ctx, "fence", "", format2("kvs-fence"), "kvs-fence-response")
	} else {
		_, err = c.exchange(ctx, "fence", "", format1("barrier_in"), "barrier_out")
	}
	return err
}

// Abort asks the launcher to end the whole job (PMI-1 abort, PMI-2 abort
// with isworld=TRUE). The launcher kills every rank, this one included,
// so Abort normally does not return for long; it returns nil once the
// request is written. The launcher shows code as the job's exit status;
// reason goes to this rank's log (PMI-1 has no field for it).
func (c *Client) Abort(ctx context.Context, code int, reason string) error {
	var line string
	if c.v2 {
		r := strings.Map(func(r rune) rune {
			if r == '\n' {
				return ' '
			}
			return r
		}, reason)
		line = format2("abort", "isworld", "TRUE", "msg", r)
	} else {
		line = format1("abort", "exitcode", strconv.Itoa(code))
	}
	c.log.Error("pmi: aborting the job", "rank", c.rank, "code", code, "reason", reason)
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return &bootstrap.Error{Op: "abort", Err: bootstrap.ErrClosed}
	}
	if err := c.writeMsg(ctx, line); err != nil {
		return &bootstrap.Error{Op: "abort", Err: err}
	}
	c.setErr(&bootstrap.AbortError{Info: bootstrap.AbortInfo{Rank: c.rank, Code: code, Reason: reason}})
	return nil
}

// Close finalizes PMI (so the launcher knows this rank left on purpose)
// and closes the connection. It waits at most 5 s for the server; with an
// answer still due from a cancelled operation it only closes.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		broken := c.err != nil
		c.mu.Unlock()
		if !broken {
			select {
			case c.sem <- struct{}{}:
				if len(c.due) == 0 {
					ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					if c.v2 {
						_, _ = c.roundTrip(ctx, "finalize", format2("finalize"), "finalize-response")
					} else {
						_, _ = c.roundTrip(ctx, "finalize", format1("finalize"), "finalize_ack")
					}
					cancel()
				}
				<-c.sem
			default:
				// Another operation is in flight: do not wait behind it.
			}
		}
		c.mu.Lock()
		c.closed = true
		if c.err == nil {
			c.err = bootstrap.ErrClosed
		}
		c.mu.Unlock()
		c.conn.Close()
	})
	return nil
}

func checkKV(op, key string, value []byte) error {
	if key == "" {
		return &bootstrap.Error{Op: op, Err: bootstrap.ErrInvalid, Detail: "empty key"}
	}
	if len(key) > bootstrap.MaxKeyLen {
		return &bootstrap.Error{Op: op, Key: key[:32] + "...", Err: bootstrap.ErrInvalid,
			Detail: fmt.Sprintf("key of %d bytes exceeds %d", len(key), bootstrap.MaxKeyLen)}
	}
	if len(value) > bootstrap.MaxValueLen {
		return &bootstrap.Error{Op: op, Key: key, Err: bootstrap.ErrInvalid,
			Detail: fmt.Sprintf("value of %d bytes exceeds %d", len(value), bootstrap.MaxValueLen)}
	}
	return nil
}

func (c *Client) setErr(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

func (c *Client) terminal() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// exchange runs one request/reply with the queueing and error wrapping of
// a public operation.
func (c *Client) exchange(ctx context.Context, op, key, req, want string) (msg, error) {
	if ctx == nil {
		return msg{}, &bootstrap.Error{Op: op, Key: key, Err: bootstrap.ErrInvalid, Detail: "nil context"}
	}
	if err := c.terminal(); err != nil {
		return msg{}, &bootstrap.Error{Op: op, Key: key, Err: err}
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return msg{}, &bootstrap.Error{Op: op, Key: key, Err: ctx.Err(), Detail: "waiting for an earlier PMI request to finish"}
	}
	defer func() { <-c.sem }()
	m, err := c.roundTrip(ctx, op, req, want)
	if err != nil {
		var be *bootstrap.Error
		if errors.As(err, &be) {
			if be.Key == "" {
				be.Key = key
			}
			return m, be
		}
		return m, &bootstrap.Error{Op: op, Key: key, Err: err}
	}
	return m, nil
}

// roundTrip sends req and reads the reply whose cmd is want; sem is held.
// An rc other than 0 is an *RCError.
func (c *Client) roundTrip(ctx context.Context, op, req, want string) (msg, error) {
	// Answers still due from cancelled operations come first.
	for len(c.due) > 0 {
		m, err := c.recv(ctx, c.v2 && c.due[0] != "response_to_init")
		if err != nil {
			if ctx.Err() != nil {
				return m, &bootstrap.Error{Op: op, Err: ctx.Err(), Detail: "still waiting for the PMI server's answer to an earlier cancelled " + c.due[0]}
			}
			return m, err
		}
		if m.cmd != c.due[0] {
			err := &bootstrap.Error{Op: op, Err: bootstrap.ErrServerLost, Detail: fmt.Sprintf("PMI server sent %q, expected %s", clip(m.String()), c.due[0])}
			c.setErr(err.Err)
			return m, err
		}
		c.due = c.due[1:]
	}
	if err := c.send(ctx, req); err != nil {
		return msg{}, err
	}
	framed := c.v2 && want != "response_to_init"
	m, err := c.recv(ctx, framed)
	if err != nil {
		if ctx.Err() != nil && c.terminal() == nil {
			c.due = append(c.due, want)
		}
		return m, err
	}
	if m.cmd != want {
		err := &bootstrap.Error{Op: op, Err: bootstrap.ErrServerLost, Detail: fmt.Sprintf("PMI server sent %q, expected %s", clip(m.String()), want)}
		c.setErr(err.Err)
		return m, err
	}
	rc, ok := m.rc()
	if !ok {
		err := &bootstrap.Error{Op: op, Err: bootstrap.ErrServerLost, Detail: fmt.Sprintf("PMI server sent rc=%q", clip(m.fields["rc"]))}
		c.setErr(err.Err)
		return m, err
	}
	if rc != 0 {
		text := m.fields["msg"]
		if text == "" {
			text = m.fields["errmsg"]
		}
		return m, &RCError{Cmd: m.cmd, RC: rc, Msg: text}
	}
	return m, nil
}

// deadline makes the socket's read or write deadline follow ctx until
// the returned stop is called. Reads and writes have their own deadlines,
// so that an Abort written during a Fence does not disturb the Fence.
func (c *Client) deadline(ctx context.Context, write bool) (stop func()) {
	set := c.conn.SetReadDeadline
	if write {
		set = c.conn.SetWriteDeadline
	}
	if d, ok := ctx.Deadline(); ok {
		set(d)
	} else {
		set(time.Time{})
	}
	unhook := context.AfterFunc(ctx, func() { set(time.Unix(1, 0)) })
	return func() { unhook() }
}

func (c *Client) send(ctx context.Context, req string) error {
	return c.writeMsg(ctx, req)
}

func (c *Client) writeMsg(ctx context.Context, req string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	stop := c.deadline(ctx, true)
	n, err := c.conn.Write([]byte(req))
	stop()
	if err != nil {
		if n == 0 {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// The deadline fired with ctx not yet marked done (a
				// deadline equal to ctx's): same thing, as in recv.
				<-ctx.Done()
				return ctx.Err()
			}
		}
		// A partial message leaves the stream unusable.
		c.setErr(bootstrap.ErrServerLost)
		return fmt.Errorf("%w: writing to the PMI server: %v", bootstrap.ErrServerLost, err)
	}
	return nil
}

// recv reads one message: a line, or (framed) a PMI-2 length-prefixed
// message. Bytes read before an interruption are kept for the next call.
func (c *Client) recv(ctx context.Context, framed bool) (msg, error) {
	var tmp [4096]byte
	stop := func() {}
	defer func() { stop() }()
	hooked := false
	for {
		if framed {
			p, n, ok, err := frame2(c.rbuf)
			if err != nil {
				c.setErr(bootstrap.ErrServerLost)
				return msg{}, fmt.Errorf("%w: %v", bootstrap.ErrServerLost, err)
			}
			if ok {
				c.rbuf = c.rbuf[n:]
				m, err := parse2(p)
				if err != nil {
					c.setErr(bootstrap.ErrServerLost)
					return m, fmt.Errorf("%w: %v", bootstrap.ErrServerLost, err)
				}
				return m, nil
			}
		} else if i := indexNL(c.rbuf); i >= 0 {
			line := string(c.rbuf[:i])
			c.rbuf = c.rbuf[i+1:]
			m, err := parse1(line)
			if err != nil {
				c.setErr(bootstrap.ErrServerLost)
				return m, fmt.Errorf("%w: %v", bootstrap.ErrServerLost, err)
			}
			return m, nil
		}
		if len(c.rbuf) > maxMsg+6 {
			c.setErr(bootstrap.ErrServerLost)
			return msg{}, fmt.Errorf("%w: %v: more than %d bytes without a complete message", bootstrap.ErrServerLost, errMalformed, maxMsg)
		}
		if !hooked {
			stop = c.deadline(ctx, false)
			hooked = true
		}
		n, err := c.conn.Read(tmp[:])
		c.rbuf = append(c.rbuf, tmp[:n]...)
		if err != nil {
			if n > 0 {
				continue // parse what arrived first
			}
			if ctx.Err() != nil {
				return msg{}, ctx.Err()
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// The deadline fired with ctx not yet marked done (a
				// deadline equal to ctx's): same thing.
				<-ctx.Done()
				return msg{}, ctx.Err()
			}
			c.setErr(bootstrap.ErrServerLost)
			return msg{}, fmt.Errorf("%w: reading from the PMI server: %v", bootstrap.ErrServerLost, err)
		}
	}
}

func indexNL(b []byte) int {
	for i, x := range b {
		if x == '\n' {
			return i
		}
	}
	return -1
}

var (
	_ bootstrap.Store   = (*Client)(nil)
	_ bootstrap.Aborter = (*Client)(nil)
)
