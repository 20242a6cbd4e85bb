package verbstest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// peerEnv names the test whose re-executed binary is the two-process peer.
const peerEnv = "RDMAGO_VERBSTEST_PEER"

// Options configure Run.
type Options struct {
	// Open opens a new, independent device of the provider under test. It is
	// called several times, concurrently never, and in the two-process peer
	// as well. Required.
	Open func(ctx context.Context) (verbs.Device, error)
	// Name labels the provider in failure messages. Empty means the first
	// device's Provider().
	Name string
	// TwoProcess enables the cases that re-execute the test binary as a
	// peer process (see the package documentation). Leave it false for
	// providers that only work within one process.
	TwoProcess bool
	// Connect is what the suite passes to verbs.Connect, except where a case
	// sets the timers it tests (RNR retry, ACK timeout). The zero value means
	// ShortConnectOptions().
	Connect verbs.ConnectOptions
	// LargeSize is the size of the large-message case. Zero means 64 MiB.
	LargeSize int
	// ManyQPs is the number of queue pairs the scale case opens on one
	// device. Zero means 64.
	ManyQPs int
	// CaseTimeout bounds every wait of one case. Zero means 20 s.
	CaseTimeout time.Duration
	// Skip maps case names relative to Run ("Errors/RecvTooSmall") to the
	// reason this provider cannot run them: for documented limits, not bugs.
	// A name also skips every case below it ("Errors" skips the group).
	Skip map[string]string
}

// ShortConnectOptions are DefaultConnectOptions with timers suited to
// tests: ACK timeout code 16 (268 ms) with 3 retries, so that a peer that
// is only slow (a busy CI machine, the race detector, 128 connections on
// two cores) is not taken for dead; RNR timer code 1 (10 µs); and infinite
// RNR retry, so that a receive posted late still succeeds. The cases that
// wait for a lost peer shorten the ACK timeout themselves (code 12, about
// 17 ms, with 3 retries), so they finish in milliseconds.
func ShortConnectOptions() verbs.ConnectOptions {
	o := verbs.DefaultConnectOptions()
	o.Timeout = 16
	o.RetryCnt = 3
	o.MinRNRTimer = 1
	o.RNRRetry = 7
	return o
}

func (o *Options) setDefaults() {
	if o.Connect.PathMTU == 0 {
		o.Connect = ShortConnectOptions()
	}
	if o.LargeSize == 0 {
		o.LargeSize = 64 << 20
	}
	if o.ManyQPs == 0 {
		o.ManyQPs = 64
	}
	if o.CaseTimeout == 0 {
		o.CaseTimeout = 20 * time.Second
	}
}

// Run runs the conformance suite against the provider opts.Open opens, as
// subtests of t. In a two-process peer (see the package documentation) it
// serves the parent instead.
func Run(t *testing.T, opts Options) {
	t.Helper()
	opts.setDefaults()
	if name := os.Getenv(peerEnv); name != "" {
		if name != t.Name() {
			t.Skipf("verbstest peer process for %s: not running %s", name, t.Name())
		}
		runPeer(t, opts)
		return
	}
	if opts.Open == nil {
		t.Fatal("verbstest: Options.Open is required")
	}
	s := &suite{opts: opts, root: t.Name()}
	s.openShared(t)
	for _, g := range groups {
		s.run(t, g.name, func(t *testing.T) {
			for _, c := range g.cases {
				s.run(t, c.name, func(t *testing.T) { c.fn(t, s) })
			}
		})
	}
	if opts.TwoProcess {
		s.run(t, "TwoProcess", func(t *testing.T) { s.twoProcess(t) })
	}
}

type tcase struct {
	name string
	fn   func(t *testing.T, s *suite)
}

type group struct {
	name  string
	cases []tcase
}

// groups is the suite's table of contents; each file adds its group.
var groups = []group{
	{"Ops", opsCases},
	{"ReadServed", servedCases},
	{"Ordering", orderingCases},
	{"RNR", rnrCases},
	{"Errors", errorCases},
	{"Atomics", atomicCases},
	{"PostErrors", postErrorCases},
	{"StateMachine", stateCases},
	{"MemoryRegions", mrCases},
	{"Scale", scaleCases},
	{"Concurrency", concurrencyCases},
	{"CQ", cqCases},
	{"Teardown", teardownCases},
}

// run is t.Run honouring Options.Skip.
func (s *suite) run(t *testing.T, name string, fn func(t *testing.T)) bool {
	t.Helper()
	return t.Run(name, func(t *testing.T) {
		rel := strings.TrimPrefix(t.Name(), s.root+"/")
		for pat, why := range s.opts.Skip {
			pat = strings.ReplaceAll(pat, " ", "_")
			if rel == pat || strings.HasPrefix(rel, pat+"/") {
				t.Skipf("skipped for provider %s: %s", s.name(), why)
			}
		}
		fn(t)
	})
}
