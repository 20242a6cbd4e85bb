package softrc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// A CQ that several links feed, whose waiter polls the links' Incoming
// (Config.YieldSpin) before it parks.

type fakeArriver struct {
	fakeDriver
	arrived atomic.Bool
	polls   atomic.Int32
}

func (f *fakeArriver) Incoming() bool {
	f.polls.Add(1)
	return f.arrived.Load()
}

// arriverTransport gives every QP that reaches RTR a link of its own.
type arriverTransport struct {
	mu    sync.Mutex
	links []*fakeArriver
}

func (*arriverTransport) AddressPayload(uint32) []byte { return []byte{1} }
func (*arriverTransport) CheckRemote([]byte) error     { return nil }
func (*arriverTransport) Close() error                 { return nil }
func (t *arriverTransport) Connect(q *softrc.QP) {
	l := &fakeArriver{fakeDriver: fakeDriver{intr: make(chan struct{}, 1)}}
	t.mu.Lock()
	t.links = append(t.links, l)
	t.mu.Unlock()
	q.Attach(l)
}

// twoLinks returns two connected QPs (each to itself) on one CQ, so that
// no waiter can drive a link, each with a receive posted that moving it
// to ERR flushes.
func twoLinks(t *testing.T, spin time.Duration) ([]verbs.QP, verbs.CQ, *arriverTransport) {
	t.Helper()
	tr := &arriverTransport{}
	dev := softrc.NewDevice(softrc.Config{Provider: "fake", Name: "fake", Caps: softrc.DefaultCaps(), YieldSpin: spin}, tr)
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	var qps []verbs.QP
	for range 2 {
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, verbs.Connect(qp, qp.Address(), verbs.DefaultConnectOptions()))
		require.NoError(t, qp.PostRecv(verbs.RecvWR{ID: 7}))
		qps = append(qps, qp)
	}
	require.Len(t, tr.links, 2)
	return qps, cq, tr
}

func (t *arriverTransport) polls() int32 {
	n := int32(0)
	for _, l := range t.links {
		n += l.polls.Load()
	}
	return n
}

// TestWaitSpinsOnIncoming: with YieldSpin, a waiter on a CQ of several
// links polls them for incoming bytes, and a completion that comes
// meanwhile ends its wait.
func TestWaitSpinsOnIncoming(t *testing.T) {
	qps, cq, tr := twoLinks(t, time.Hour)
	res := waitAsync(cq)
	require.Eventually(t, func() bool { return tr.polls() > 10 }, 5*time.Second, time.Millisecond)
	toErr(t, qps[1])
	require.NoError(t, <-res)
	var wc [1]verbs.WC
	require.Equal(t, 1, cq.Poll(wc[:]))
}

// TestWaitSpinStopsOnIncoming: links with bytes arriving that only their
// readers can take end the spin (the waiter parks, for the readers to
// complete their work) at the first look at each.
func TestWaitSpinStopsOnIncoming(t *testing.T) {
	qps, cq, tr := twoLinks(t, time.Hour)
	for _, l := range tr.links {
		l.arrived.Store(true)
	}
	res := waitAsync(cq)
	require.Eventually(t, func() bool { return tr.polls() > 0 }, 5*time.Second, time.Millisecond)
	toErr(t, qps[0])
	require.NoError(t, <-res)
	require.Equal(t, int32(len(tr.links)), tr.polls(), "the spin went on after bytes arrived")
}

// TestWaitNoSpinByDefault: without YieldSpin a waiter parks at once.
func TestWaitNoSpinByDefault(t *testing.T) {
	qps, cq, tr := twoLinks(t, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, cq.Wait(ctx), context.DeadlineExceeded)
	toErr(t, qps[0])
	require.NoError(t, cq.Wait(context.Background()))
	require.Zero(t, tr.polls())
}

// TestWaitSpinCtxEnds: the spin ends with the waiter's ctx.
func TestWaitSpinCtxEnds(t *testing.T) {
	_, cq, tr := twoLinks(t, time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, cq.Wait(ctx), context.DeadlineExceeded)
	require.Positive(t, tr.polls())
}
