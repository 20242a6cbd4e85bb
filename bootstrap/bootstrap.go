package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/ranklist"
	"github.com/rdmago/rdmago/verbs"
)

// Limits. They keep every frame small and bounded so that a server can
// refuse an oversized one before reading it; a QP address
// (verbs.MaxAddressLen = 512 bytes) fits in a value with room to spare.
const (
	MaxKeyLen     = 256     // bytes in a key
	MaxValueLen   = 1024    // bytes in a value
	MaxVersionLen = 128     // bytes in ClientOptions.Version
	MaxConfigLen  = 1024    // bytes in ClientOptions.Config
	MaxHostLen    = 255     // bytes in ClientOptions.Hostname and HostID
	MaxReasonLen  = 1024    // bytes of an Abort reason kept (longer ones are cut)
	MaxSize       = 1 << 16 // ranks in a job
)

// Store is the narrow rendezvous every layer above bootstrap needs: put a
// small value under a string key, get one (waiting until some rank has put
// it), and fence. It is small on purpose: a launcher's own key-value service
// (PMI-1 put/commit/barrier/get, PMI-2 kvs-put/kvs-fence/kvs-get) implements
// it as well as the TCP store here does.
//
// Visibility: a value Put by any rank before a Fence is visible to every
// rank's Get after that Fence. Implementations that can wait (the TCP and
// memory stores) also let Get see a value as soon as it is put, so a Get
// without a Fence waits for the key; a PMI implementation may instead poll.
//
// Keys are at most MaxKeyLen bytes and not empty; values at most MaxValueLen
// bytes. Keep keys short and printable where a PMI store may be used:
// Hydra allows 64-byte keys, and a PMI store encodes values as text. A key
// should be put once per job: the TCP and memory stores let a later Put
// replace the value, a PMI store may refuse it. Keys beginning with "bs:"
// are reserved for this package (Allgather on a store without an Allgather
// method uses them).
//
// Concurrency: Put and Get may be called from many goroutines at once. Fence
// is a collective: every rank calls it, the same number of times, and one
// rank does not run two collectives (Fence, Allgather, Barrier) at once.
// A collective called with a context that has already ended fails at once
// and does not count. One that fails after it started (context ended while
// waiting, a rank left) still counts as entered on this rank; after such a
// failure the job is expected to abort.
//
// Errors: every error is a *Error naming the operation and, where known,
// the key and the ranks at fault. Causes match with errors.Is: ErrInvalid,
// ErrAuth, ErrRefused, ErrMismatch, ErrRankLeft, ErrAborted, ErrClosed,
// ErrServerLost, and context.DeadlineExceeded / context.Canceled when ctx
// ended.
type Store interface {
	// Rank is this process's rank in [0, Size).
	Rank() int
	// Size is the number of ranks in the job.
	Size() int
	// Put stores value under key for every rank to read.
	Put(ctx context.Context, key string, value []byte) error
	// Get returns the value stored under key, waiting until it exists or ctx
	// ends. The returned slice is the caller's.
	Get(ctx context.Context, key string) ([]byte, error)
	// Fence returns once every rank has called Fence (this many times): it
	// is a barrier that also publishes every earlier Put.
	Fence(ctx context.Context) error
}

// Adder is an optional capability of a Store: an atomic counter. Counters
// live in their own name space (a counter "n" and a value "n" are
// unrelated) and start at zero. PMI has no equivalent, so code that must
// run under PMI does not rely on it.
type Adder interface {
	// Add adds delta to the counter key and returns the new value.
	Add(ctx context.Context, key string, delta int64) (int64, error)
}

// Allgatherer is an optional capability of a Store: an allgather done in
// one round trip by the store itself. Allgather (the function) uses it when
// present.
type Allgatherer interface {
	// Allgather contributes value (at most MaxValueLen bytes) and returns
	// every rank's value indexed by rank. It is a collective: every rank
	// calls it with the same key, in the same order as its other
	// collectives.
	Allgather(ctx context.Context, key string, value []byte) ([][]byte, error)
}

// Aborter is an optional capability of a Store: ending the whole job.
// Client and Memory have it; under PMI the launcher's own abort (PMI_Abort)
// plays the part.
type Aborter interface {
	// Abort records that this rank ends the job with code and reason;
	// every pending and later operation of every rank then fails with an
	// *AbortError, and a launcher learns it (Server.Aborts).
	Abort(ctx context.Context, code int, reason string) error
}

// Allgather gives every rank the value of every rank: out[r] is what rank r
// contributed. key names this exchange and must be the same on all ranks
// and not be reused. It uses the store's own Allgather when it has one and
// Put, Fence and Get otherwise, so it works over PMI too.
func Allgather(ctx context.Context, s Store, key string, value []byte) ([][]byte, error) {
	if ag, ok := s.(Allgatherer); ok {
		return ag.Allgather(ctx, key, value)
	}
	if err := checkKey("allgather", key); err != nil {
		return nil, err
	}
	if err := checkValue("allgather", key, value); err != nil {
		return nil, err
	}
	prefix := "bs:ag:" + key + ":"
	if len(prefix)+10 > MaxKeyLen {
		return nil, &Error{Op: "allgather", Key: key, Err: ErrInvalid, Detail: "key too long"}
	}
	if err := s.Put(ctx, prefix+strconv.Itoa(s.Rank()), value); err != nil {
		return nil, err
	}
	if err := s.Fence(ctx); err != nil {
		return nil, err
	}
	out := make([][]byte, s.Size())
	for r := range out {
		v, err := s.Get(ctx, prefix+strconv.Itoa(r))
		if err != nil {
			return nil, err
		}
		out[r] = v
	}
	return out, nil
}

// Barrier returns once every rank has entered it. It is the store's Fence.
func Barrier(ctx context.Context, s Store) error { return s.Fence(ctx) }

// Sentinel causes, matched with errors.Is. The causes the verbs layer
// defines (invalid argument, authentication, mismatch, closed, protocol
// error) are its values under this package's names, so the name of any
// layer matches (comm.ErrClosed is bootstrap.ErrClosed).
var (
	// ErrInvalid: a bad argument (empty or long key, long value, bad
	// options). It is verbs.ErrInvalidArgument.
	ErrInvalid = verbs.ErrInvalidArgument
	// ErrAuth: the peer did not prove knowledge of the job token. It is
	// verbs.ErrAuth.
	ErrAuth = verbs.ErrAuth
	// ErrRefused: the server refused this rank's join (duplicate rank, rank
	// out of range).
	ErrRefused = errors.New("join refused")
	// ErrMismatch: ranks disagree (job size, library version, transport
	// configuration, or which collective they are in). It is
	// verbs.ErrMismatch (also collectives.ErrMismatch).
	ErrMismatch = verbs.ErrMismatch
	// ErrRankLeft: a rank closed or lost its connection before a collective
	// it had to join completed.
	ErrRankLeft = errors.New("rank left the job")
	// ErrAborted: a rank aborted the job (see AbortError).
	ErrAborted = errors.New("job aborted")
	// ErrClosed: the client or the server was closed. It is verbs.ErrClosed.
	ErrClosed = verbs.ErrClosed
	// ErrServerLost: the connection to the rendezvous server broke, or the
	// server sent something this client cannot parse.
	ErrServerLost = errors.New("rendezvous server lost")
	// ErrProtocol: a malformed frame. It is verbs.ErrProtocol.
	ErrProtocol = verbs.ErrProtocol
)

// Error is the error of a failed bootstrap operation.
type Error struct {
	Op     string // "join", "put", "get", "add", "fence", "allgather", "abort", "dial"
	Key    string // the key, when the operation has one
	Ranks  []int  // the ranks at fault, when known (missing, differing, left)
	Size   int    // job size, when Ranks is set
	Detail string // human-readable description
	Err    error  // cause: a sentinel above, a context error, or a network error
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("bootstrap: ")
	b.WriteString(e.Op)
	if e.Key != "" {
		fmt.Fprintf(&b, " %q", e.Key)
	}
	if e.Detail != "" {
		b.WriteString(": ")
		b.WriteString(e.Detail)
	}
	if e.Err != nil {
		b.WriteString(" (")
		b.WriteString(e.Err.Error())
		b.WriteString(")")
	}
	return b.String()
}

func (e *Error) Unwrap() error { return e.Err }

// AbortInfo describes a rank's call to Abort.
type AbortInfo struct {
	Rank   int
	Code   int
	Reason string
}

// AbortError is the cause every pending and later operation fails with once
// some rank has aborted the job. errors.Is(err, ErrAborted) holds.
type AbortError struct{ Info AbortInfo }

func (e *AbortError) Error() string {
	return fmt.Sprintf("job aborted by rank %d with code %d: %s", e.Info.Rank, e.Info.Code, e.Info.Reason)
}

func (e *AbortError) Is(target error) bool { return target == ErrAborted }

// Peer is what the rendezvous learned about a rank when it joined.
type Peer struct {
	Rank int
	// Host is the host name the rank reported (ClientOptions.Hostname),
	// for people to read.
	Host string
	// HostID is the host identity the rank reported (ClientOptions.HostID);
	// ranks with equal HostIDs share a host.
	HostID string
	// Addr is the IP address the server saw the rank's connection come from
	// (empty for in-memory stores). It is a hint: a rank on the server's own
	// host may show as loopback. Ranks advertise their transport addresses
	// themselves (Client.AdvertiseAddr).
	Addr string
}

func checkKey(op, key string) error {
	if key == "" {
		return &Error{Op: op, Err: ErrInvalid, Detail: "empty key"}
	}
	if len(key) > MaxKeyLen {
		return &Error{Op: op, Key: key[:32] + "...", Err: ErrInvalid,
			Detail: fmt.Sprintf("key of %d bytes exceeds %d", len(key), MaxKeyLen)}
	}
	return nil
}

func checkValue(op, key string, v []byte) error {
	if len(v) > MaxValueLen {
		return &Error{Op: op, Key: key, Err: ErrInvalid,
			Detail: fmt.Sprintf("value of %d bytes exceeds %d", len(v), MaxValueLen)}
	}
	return nil
}

// FormatRanks writes a rank list the way people read it: "rank 3",
// "ranks 3 and 7", "ranks 3, 7 and 10-250". ranks must be sorted ascending.
func FormatRanks(ranks []int) string { return ranklist.Format(ranks) }

// missingDetail builds "after 30s, ranks 3 and 7 of 8 have not joined".
func missingDetail(elapsed time.Duration, ranks []int, size int, verb string) string {
	have := "have"
	if len(ranks) == 1 {
		have = "has"
	}
	return fmt.Sprintf("after %s, %s of %d %s not %s", roundElapsed(elapsed), FormatRanks(ranks), size, have, verb)
}

func roundElapsed(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(time.Second)
	}
	return d.Round(time.Millisecond)
}
