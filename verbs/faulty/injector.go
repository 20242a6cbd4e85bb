package faulty

import (
	"sync"
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// Injector holds the fault rules a wrapped device obeys. Its methods are
// safe for concurrent use, also while the wrapped objects are in use.
type Injector struct {
	mu         sync.Mutex
	posts      []*postRule
	comps      []*compRule
	qps        map[uint32][]*qp // wrapped QPs by number, for Disconnect
	synthesize bool
	stats      Stats
}

// Stats counts the faults an injector has caused.
type Stats struct {
	PostsFailed          int
	CompletionsLost      int
	CompletionsLate      int
	CompletionsCorrupted int
	Disconnects          int
	SynthesizedLoss      int // QPs moved to ERR by the wrapper itself
	RetryExcReported     int // flushed send completions reported as RETRY_EXC_ERR
	// SendsHeld counts the send requests posted while their QP's posts
	// were held (verbs.PostBatcher): not a fault, what the layer above
	// batched.
	SendsHeld int
}

func (i *Injector) noteHeld(n int) {
	i.mu.Lock()
	i.stats.SendsHeld += n
	i.mu.Unlock()
}

type postRule struct {
	n     int // remaining; < 0 is unlimited
	err   error
	match func(qpNum uint32, recv bool) bool
}

type compRule struct {
	n      int
	drop   bool
	delay  time.Duration
	mutate func(*verbs.WC)
	match  func(verbs.WC) bool
}

// NewInjector returns an injector with no rules.
func NewInjector() *Injector {
	return &Injector{qps: map[uint32][]*qp{}}
}

// FailPosts makes the next n PostSend or PostRecv calls that match fail with
// err (n < 0: every one). match gets the QP number and whether the call is
// a PostRecv; nil matches every call. A nil err means verbs.ErrQueueFull.
func (in *Injector) FailPosts(n int, err error, match func(qpNum uint32, recv bool) bool) {
	if err == nil {
		err = verbs.ErrQueueFull
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.posts = append(in.posts, &postRule{n: n, err: err, match: match})
}

// DropCompletions loses the next n completions that match (n < 0: every
// one); nil matches every completion.
func (in *Injector) DropCompletions(n int, match func(verbs.WC) bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.comps = append(in.comps, &compRule{n: n, drop: true, match: match})
}

// DelayCompletions holds back the next n completions that match (n < 0:
// every one) for d, together with whatever queues behind them on their CQ.
func (in *Injector) DelayCompletions(n int, d time.Duration, match func(verbs.WC) bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.comps = append(in.comps, &compRule{n: n, delay: d, match: match})
}

// CorruptCompletions passes the next n completions that match (n < 0:
// every one) through mutate before they are delivered: a provider bug on
// demand, for checking that a test notices one.
func (in *Injector) CorruptCompletions(n int, match func(verbs.WC) bool, mutate func(*verbs.WC)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.comps = append(in.comps, &compRule{n: n, mutate: mutate, match: match})
}

// Clear removes every post and completion rule. Completions already held
// back stay late.
func (in *Injector) Clear() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.posts, in.comps = nil, nil
}

// SynthesizeDisconnects makes Disconnect move QPs to ERR itself even when
// the wrapped provider could drop the link (to test the synthesis).
func (in *Injector) SynthesizeDisconnects(on bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.synthesize = on
}

// Stats reports the faults caused so far.
func (in *Injector) Stats() Stats {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.stats
}

// Disconnect drops the connection of every wrapped QP numbered qpNum (see
// the package documentation). It fails with verbs.ErrInvalidArgument when
// no such QP is open.
func (in *Injector) Disconnect(qpNum uint32) error {
	in.mu.Lock()
	qps := append([]*qp(nil), in.qps[qpNum]...)
	in.mu.Unlock()
	if len(qps) == 0 {
		return &verbs.Error{Op: "Disconnect", Provider: "faulty", QPNum: qpNum, Index: -1,
			Err: errorf(verbs.ErrInvalidArgument, "no open wrapped QP %#x", qpNum)}
	}
	for _, q := range qps {
		if err := q.Disconnect(); err != nil {
			return err
		}
	}
	return nil
}

// SendsOf matches the send-queue completions of QP qpNum that carry an
// opcode (successful ones); with Status set, use a custom predicate.
func SendsOf(qpNum uint32) func(verbs.WC) bool {
	return func(wc verbs.WC) bool {
		return wc.QPNum == qpNum && wc.Status == verbs.StatusSuccess && wc.Opcode < verbs.WCRecv
	}
}

// RecvsOf matches the successful receive completions of QP qpNum.
func RecvsOf(qpNum uint32) func(verbs.WC) bool {
	return func(wc verbs.WC) bool {
		return wc.QPNum == qpNum && wc.Status == verbs.StatusSuccess && wc.Opcode >= verbs.WCRecv
	}
}

// ID matches the completion of the request with ID id.
func ID(id uint64) func(verbs.WC) bool {
	return func(wc verbs.WC) bool { return wc.ID == id }
}

// onPost returns the error a post must fail with, or nil.
func (in *Injector) onPost(qpNum uint32, recv bool) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, r := range in.posts {
		if r.match != nil && !r.match(qpNum, recv) {
			continue
		}
		if r.n > 0 {
			r.n--
			if r.n == 0 {
				in.posts = append(in.posts[:i:i], in.posts[i+1:]...)
			}
		}
		in.stats.PostsFailed++
		return r.err
	}
	return nil
}

// onCompletion applies the completion rules to wc: it may be changed,
// dropped, or held for a delay (0 = delivered at once). The first matching
// rule decides.
func (in *Injector) onCompletion(wc *verbs.WC) (drop bool, delay time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for i, r := range in.comps {
		if r.match != nil && !r.match(*wc) {
			continue
		}
		if r.n > 0 {
			r.n--
			if r.n == 0 {
				in.comps = append(in.comps[:i:i], in.comps[i+1:]...)
			}
		}
		switch {
		case r.drop:
			in.stats.CompletionsLost++
		case r.mutate != nil:
			r.mutate(wc)
			in.stats.CompletionsCorrupted++
		default:
			in.stats.CompletionsLate++
		}
		return r.drop, r.delay
	}
	return false, 0
}

func (in *Injector) register(q *qp) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.qps[q.num] = append(in.qps[q.num], q)
}

func (in *Injector) unregister(q *qp) {
	in.mu.Lock()
	defer in.mu.Unlock()
	list := in.qps[q.num]
	for i, x := range list {
		if x == q {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(in.qps, q.num)
	} else {
		in.qps[q.num] = list
	}
}

func (in *Injector) lookup(num uint32) []*qp {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]*qp(nil), in.qps[num]...)
}

func (in *Injector) count(f func(*Stats)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	f(&in.stats)
}

func (in *Injector) synthesizing() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.synthesize
}
