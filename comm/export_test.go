package comm

import (
	"io"
	"time"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/p2p"
)

// WithExit returns o with Abort's way to end the process replaced by exit,
// so that a test can abort a rank of an in-process job without ending the
// test binary.
func WithExit(o Options, exit func(code int)) Options {
	o.exit = exit
	return o
}

// SetShrinkHook makes f run at points of every Shrink ("in": after this
// rank announced itself) until the returned func is called; an error from
// f ends that rank's Shrink there.
func SetShrinkHook(f func(c *Comm, point string) error) (restore func()) {
	shrinkHook = f
	return func() { shrinkHook = nil }
}

// WithStatusOutput returns o with the stuck-job report going to out.
func WithStatusOutput(o Options, out io.Writer) Options {
	o.statusOut = out
	return o
}

// StatusRounds is how many times rank 0's stuck-job watch has asked the
// ranks (0 on other ranks).
func StatusRounds(c *Comm) int64 {
	if c.w.status == nil {
		return 0
	}
	return c.w.status.rounds.Load()
}

// TuningFromEnv is tuningFromEnv reading the variables from env.
func TuningFromEnv(env map[string]string, o collectives.Options) (collectives.Options, error) {
	return tuningFromEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, o)
}

// NewOpError builds the OpError that wrap makes of err on rank rank of
// size when the job was aborted by abort (nil: not aborted), with peer as
// the rank where the failure began, for tests of the message.
func NewOpError(op string, rank, size, peer int, abort, err error) error {
	if abort != nil {
		err = &abortedError{abort: abort, err: err}
	}
	return &OpError{Op: op, Rank: rank, Size: size, Peer: peer, Tag: NoTag, Err: err, origin: peer >= 0}
}

// WorkerAsleep reports whether p's background worker waits for a kick
// (rather than napping), for TestPersistentWorkerModes.
func (p *Persistent) WorkerAsleep() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.asleep
}

// P2P is the point-to-point request r wraps (nil for a collective's).
func (r *Request) P2P() *p2p.Request { return r.p }

// RanInline says whether a Wait ran the non-blocking collective r on its
// own goroutine (runInline). For TestNonBlockingWaitRunsInline.
func RanInline(r *Request) bool { return r.inline }

// SetLinkProbeMax sets how long Init's measurement of the network between
// hosts may take, and returns the previous bound.
func SetLinkProbeMax(d time.Duration) time.Duration {
	old := linkProbeMax
	linkProbeMax = d
	return old
}
