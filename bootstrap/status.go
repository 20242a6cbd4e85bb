package bootstrap

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sort"
	"strings"
	"sync"
	"time"
)

// The status service: how a user asks a running job, from another
// terminal, which operation each rank is in. Every rank serves its own
// state on a small TCP endpoint; rank 0 also answers for the whole job by
// asking the others. Connections authenticate with the job token by the
// same mutual HMAC challenge-response as the rendezvous (auth.go), under
// labels of their own, so a proof for one service is worthless for the
// other.
const (
	labelStatusServer = "rdmago status v1 server proof"
	labelStatusClient = "rdmago status v1 client proof"
	statusMagic       = "RDMAGO-STATUS-1\n"
	maxStatusReply    = 8 << 20
	statusHandshake   = 5 * time.Second
)

// StatusKey is the store key under which rank publishes the address of its
// status endpoint (name is the job's p2p name prefix, usually empty).
func StatusKey(name string, rank int) string {
	return fmt.Sprintf("status/%s/%d", name, rank)
}

// Status requests.
const (
	StatusSelf = 'S' // this rank's state
	StatusJob  = 'J' // every rank's state (rank 0 asks the others)
)

// OpStatus is one communicator's latest operation on one rank.
type OpStatus struct {
	Comm      string    `json:"comm"`                // "world", or "comm 3" for context id 3
	Running   bool      `json:"running"`             // the operation has not returned yet
	Op        string    `json:"op"`                  // "allreduce", "recv", ...; empty: none yet
	Seq       uint64    `json:"seq"`                 // per communicator and kind (collective or p2p)
	Algorithm string    `json:"algorithm,omitempty"` // collectives only
	Peer      int       `json:"peer"`                // world rank waited for, -1 unknown
	Since     time.Time `json:"since"`               // when the operation began
}

// RankStatus is what one rank reports (or, with Err, why it did not).
type RankStatus struct {
	Rank int        `json:"rank"`
	Host string     `json:"host,omitempty"`
	PID  int        `json:"pid,omitempty"`
	Now  time.Time  `json:"now"` // the rank's clock when it answered
	Ops  []OpStatus `json:"ops,omitempty"`
	Err  string     `json:"err,omitempty"`
}

// StatusServer serves status requests on a listener until Close.
type StatusServer struct {
	ln    net.Listener
	token []byte
	serve func(ctx context.Context, req byte) ([]RankStatus, error)
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	slots chan struct{}
}

// ServeStatus answers status requests on ln: after the handshake, serve
// gets the request (StatusSelf or StatusJob) and its answer is sent back.
// A connection that fails the handshake is closed. log may be nil.
func ServeStatus(ln net.Listener, token []byte, log *slog.Logger, serve func(ctx context.Context, req byte) ([]RankStatus, error)) *StatusServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &StatusServer{ln: ln, token: token, serve: serve, log: log, slots: make(chan struct{}, 8)}
	s.ctx, s.stop = context.WithCancel(context.Background())
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// Addr is the address the endpoint listens on.
func (s *StatusServer) Addr() string { return s.ln.Addr().String() }

// Close stops serving and waits for the requests in progress.
func (s *StatusServer) Close() error {
	s.stop()
	err := s.ln.Close()
	s.wg.Wait()
	return err
}

func (s *StatusServer) acceptLoop() {
	defer s.wg.Done()
	for {
		conn, err := s.ln.Accept()
		if err != nil {
			return
		}
		select {
		case s.slots <- struct{}{}:
		default:
			conn.Close() // too many at once: a tool retries, a flood is dropped
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.slots }()
			defer conn.Close()
			stop := context.AfterFunc(s.ctx, func() { conn.Close() })
			defer stop()
			if err := s.handle(conn); err != nil {
				s.log.Debug("bootstrap: status request refused", "remote", conn.RemoteAddr().String(), "err", err)
			}
		}()
	}
}

func (s *StatusServer) handle(conn net.Conn) error {
	conn.SetDeadline(time.Now().Add(statusHandshake))
	br := bufio.NewReader(conn)
	var hello [len(statusMagic) + nonceLen]byte
	if _, err := io.ReadFull(br, hello[:]); err != nil {
		return err
	}
	if string(hello[:len(statusMagic)]) != statusMagic {
		return fmt.Errorf("%w: not a status client", ErrProtocol)
	}
	var nc, ns [nonceLen]byte
	copy(nc[:], hello[len(statusMagic):])
	ns, err := newNonce()
	if err != nil {
		return err
	}
	mac := proof(s.token, labelStatusServer, &nc, &ns)
	if _, err := conn.Write(append(ns[:], mac[:]...)); err != nil {
		return err
	}
	var p [macLen + 1]byte
	if _, err := io.ReadFull(br, p[:]); err != nil {
		return err
	}
	if !checkProof(s.token, labelStatusClient, &nc, &ns, [macLen]byte(p[:macLen])) {
		return fmt.Errorf("%w: wrong token", ErrAuth)
	}
	req := p[macLen]
	if req != StatusSelf && req != StatusJob {
		return fmt.Errorf("%w: unknown status request %q", ErrProtocol, req)
	}
	conn.SetDeadline(time.Time{})
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	st, err := s.serve(ctx, req)
	var body []byte
	if err != nil {
		body, _ = json.Marshal(statusReply{Err: err.Error()})
	} else {
		body, _ = json.Marshal(statusReply{Ranks: st})
	}
	if len(body) > maxStatusReply {
		body, _ = json.Marshal(statusReply{Err: "status reply too large"})
	}
	conn.SetWriteDeadline(time.Now().Add(10 * time.Second))
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(body)))
	_, err = conn.Write(append(n[:], body...))
	return err
}

type statusReply struct {
	Ranks []RankStatus `json:"ranks,omitempty"`
	Err   string       `json:"err,omitempty"`
}

// QueryStatus asks the status endpoint at addr, proving knowledge of
// token, for req (StatusSelf or StatusJob). The error matches ErrAuth when
// the endpoint does not prove it knows the token (a wrong token on either
// side).
func QueryStatus(ctx context.Context, addr string, token []byte, req byte) ([]RankStatus, error) {
	fail := func(err error) ([]RankStatus, error) {
		return nil, &Error{Op: "status", Err: err, Detail: addr}
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fail(err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	nc, err := newNonce()
	if err != nil {
		return fail(err)
	}
	if _, err := conn.Write(append([]byte(statusMagic), nc[:]...)); err != nil {
		return fail(ctxErr(ctx, err))
	}
	br := bufio.NewReader(conn)
	var ch [nonceLen + macLen]byte
	if _, err := io.ReadFull(br, ch[:]); err != nil {
		return fail(ctxErr(ctx, err))
	}
	ns := [nonceLen]byte(ch[:nonceLen])
	if !checkProof(token, labelStatusServer, &nc, &ns, [macLen]byte(ch[nonceLen:])) {
		return fail(fmt.Errorf("%w: the status endpoint does not know the job token", ErrAuth))
	}
	mac := proof(token, labelStatusClient, &nc, &ns)
	if _, err := conn.Write(append(mac[:], req)); err != nil {
		return fail(ctxErr(ctx, err))
	}
	var n [4]byte
	if _, err := io.ReadFull(br, n[:]); err != nil {
		if errors.Is(err, io.EOF) && ctx.Err() == nil {
			err = fmt.Errorf("%w: the endpoint closed the connection (wrong token?)", ErrAuth)
		}
		return fail(ctxErr(ctx, err))
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > maxStatusReply {
		return fail(fmt.Errorf("%w: status reply of %d bytes", ErrProtocol, size))
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(br, body); err != nil {
		return fail(ctxErr(ctx, err))
	}
	var rep statusReply
	if err := json.Unmarshal(body, &rep); err != nil {
		return fail(fmt.Errorf("%w: status reply: %v", ErrProtocol, err))
	}
	if rep.Err != "" {
		return fail(errors.New(rep.Err))
	}
	return rep.Ranks, nil
}

func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// FormatStatus writes one line per rank, as `rdmarun status` prints them:
//
//	rank 0 (host a, pid 123): allreduce #1234 on world (ring) since 31.2 s, waiting for rank 3
//	rank 3 (host b, pid 456): no answer: i/o timeout
func FormatStatus(ranks []RankStatus) []string {
	var out []string
	for _, r := range ranks {
		head := fmt.Sprintf("rank %d", r.Rank)
		if r.Host != "" || r.PID != 0 {
			head += fmt.Sprintf(" (host %s, pid %d)", r.Host, r.PID)
		}
		if r.Err != "" {
			out = append(out, head+": no answer: "+r.Err)
			continue
		}
		var parts []string
		for _, o := range r.Ops {
			parts = append(parts, describeOp(o, r.Now, true))
		}
		if len(parts) == 0 {
			parts = append(parts, "no operation yet")
		}
		out = append(out, head+": "+strings.Join(parts, "; "))
	}
	return out
}

func describeOp(o OpStatus, now time.Time, long bool) string {
	if o.Op == "" {
		return "no operation yet on " + o.Comm
	}
	name := fmt.Sprintf("%s #%d on %s", o.Op, o.Seq, o.Comm)
	if long && o.Algorithm != "" {
		name += " (" + o.Algorithm + ")"
	}
	if !o.Running {
		return "idle since " + name + " ended"
	}
	s := fmt.Sprintf("%s since %s", name, formatAge(now.Sub(o.Since)))
	if long && o.Peer >= 0 {
		s += fmt.Sprintf(", waiting for rank %d", o.Peer)
	}
	return s
}

func formatAge(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	if d < 10*time.Second {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f s", d.Seconds())
}

// oldestRunning is the running operation of r that began first.
func oldestRunning(r RankStatus) (OpStatus, bool) {
	var best OpStatus
	found := false
	for _, o := range r.Ops {
		if o.Running && (!found || o.Since.Before(best.Since)) {
			best, found = o, true
		}
	}
	return best, found
}

// StuckReport describes a job where some rank has been in one operation
// for at least after: the ranks in that operation and, group by group,
// where the others are. ok is false when no rank waits that long. keys
// name every running operation the report mentions (the stuck one first),
// so that a caller can report a stall once: a rank that was stopped and
// goes on is still in an older operation for a moment, which is the same
// stall, not a new one.
//
//	ranks 0-2 and 4-7 wait in allreduce #1234 on world since 30 s (for rank 3); rank 3 is in bcast #1233 on world since 31 s
func StuckReport(ranks []RankStatus, after time.Duration) (report string, keys []string, ok bool) {
	var stuck OpStatus
	for _, r := range ranks {
		if o, found := oldestRunning(r); found && r.Now.Sub(o.Since) >= after && (!ok || o.Since.Before(stuck.Since)) {
			stuck, ok = o, true
		}
	}
	if !ok {
		return "", nil, false
	}
	opKey := func(o OpStatus) string { return fmt.Sprintf("%s/%s#%d", o.Comm, o.Op, o.Seq) }
	keys = []string{opKey(stuck)}
	seen := map[string]bool{keys[0]: true}
	type group struct {
		desc  string
		ranks []int
		since time.Duration // the longest wait of the group, for the text
		peers map[int]bool
	}
	groups := map[string]*group{}
	var order []string
	add := func(desc string, rank int, age time.Duration, peer int) *group {
		g := groups[desc]
		if g == nil {
			g = &group{desc: desc, peers: map[int]bool{}}
			groups[desc] = g
			order = append(order, desc)
		}
		g.ranks = append(g.ranks, rank)
		g.since = max(g.since, age)
		if peer >= 0 {
			g.peers[peer] = true
		}
		return g
	}
	lead := ""
	for _, r := range ranks {
		if r.Err != "" {
			add("does not answer (stopped, or stuck outside rdmago)", r.Rank, 0, -1)
			continue
		}
		// The rank's operation on the stuck communicator if it runs one,
		// else its oldest running one, else where it last was.
		var cur OpStatus
		found := false
		for _, o := range r.Ops {
			if o.Comm == stuck.Comm && o.Running {
				cur, found = o, true
			}
		}
		if !found {
			cur, found = oldestRunning(r)
		}
		if !found {
			for _, o := range r.Ops {
				if o.Comm == stuck.Comm {
					cur, found = o, true
				}
			}
		}
		switch {
		case !found:
			add("is in no operation", r.Rank, 0, -1)
		case cur.Running && cur.Comm == stuck.Comm && cur.Op == stuck.Op && cur.Seq == stuck.Seq:
			lead = fmt.Sprintf("wait in %s #%d on %s", cur.Op, cur.Seq, cur.Comm)
			add(lead, r.Rank, r.Now.Sub(cur.Since), cur.Peer)
		case cur.Running:
			if k := opKey(cur); !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
			add(fmt.Sprintf("is in %s #%d on %s", cur.Op, cur.Seq, cur.Comm), r.Rank, r.Now.Sub(cur.Since), cur.Peer)
		default:
			add("is "+describeOp(cur, r.Now, false), r.Rank, 0, -1)
		}
	}
	// The stuck operation first, then the others in order of their first rank.
	sort.SliceStable(order, func(i, j int) bool { return order[i] == lead && order[j] != lead })
	var parts []string
	for _, d := range order {
		g := groups[d]
		sort.Ints(g.ranks)
		who := FormatRanks(g.ranks)
		text := d
		if len(g.ranks) > 1 {
			text = strings.Replace(strings.Replace(text, "is in ", "are in ", 1), "does not answer", "do not answer", 1)
			text = strings.Replace(text, "is idle", "are idle", 1)
		} else if d == lead {
			text = "waits" + strings.TrimPrefix(text, "wait")
		}
		s := who + " " + text
		if strings.HasPrefix(d, "wait") || strings.HasPrefix(d, "is in") {
			s += " since " + formatAge(g.since)
			if len(g.peers) > 0 {
				var ps []int
				for p := range g.peers {
					ps = append(ps, p)
				}
				sort.Ints(ps)
				s += " (for " + FormatRanks(ps) + ")"
			}
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; "), keys, true
}
