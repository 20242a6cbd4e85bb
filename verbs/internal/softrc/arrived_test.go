package softrc_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// CQ.Arrived (verbs.Arrivals) over fake links: those with bytes arrived
// (Arriver) that can handle them on the caller's goroutine
// (QueuedDriver) do; what the others have arrived is reported waiting.

// fakeQueued is a link with bytes arrived or not (arrived) whose
// DriveQueued reports took and left, and counts its calls.
type fakeQueued struct {
	fakeArriver
	took, left bool
	calls      atomic.Int32
	cq         atomic.Pointer[softrc.CQ] // the CQ DriveQueued was given
}

func (f *fakeQueued) DriveQueued(ctx context.Context, cq *softrc.CQ) (took, left bool) {
	f.calls.Add(1)
	f.cq.Store(cq)
	return f.took, f.left
}

func queued(arrived, took, left bool) *fakeQueued {
	f := &fakeQueued{fakeArriver: fakeArriver{fakeDriver: fakeDriver{intr: make(chan struct{}, 1)}}, took: took, left: left}
	f.arrived.Store(arrived)
	return f
}

func arriving(arrived bool) *fakeArriver {
	f := &fakeArriver{fakeDriver: fakeDriver{intr: make(chan struct{}, 1)}}
	f.arrived.Store(arrived)
	return f
}

// listTransport attaches its links in turn to the QPs that reach RTR.
type listTransport struct {
	mu    sync.Mutex
	links []softrc.Link
}

func (*listTransport) AddressPayload(uint32) []byte { return []byte{1} }
func (*listTransport) CheckRemote([]byte) error     { return nil }
func (*listTransport) Close() error                 { return nil }
func (t *listTransport) Connect(q *softrc.QP) {
	t.mu.Lock()
	l := t.links[0]
	t.links = t.links[1:]
	t.mu.Unlock()
	q.Attach(l)
}

// linkedCQ is a CQ that QPs with the given links use, one each.
func linkedCQ(t *testing.T, links ...softrc.Link) *softrc.CQ {
	t.Helper()
	tr := &listTransport{links: links}
	dev := softrc.NewDevice(softrc.Config{Provider: "fake", Name: "fake", Caps: softrc.DefaultCaps()}, tr)
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	for range links {
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, verbs.Connect(qp, qp.Address(), verbs.DefaultConnectOptions()))
	}
	require.Empty(t, tr.links, "a link was not attached")
	return cq.(*softrc.CQ)
}

// TestArrived: links with nothing arrived are skipped (their DriveQueued
// is not called); a QueuedDriver with bytes arrived handles them, its took
// and left combined over the links; an Arriver that cannot handle them
// itself makes the CQ report waiting; a link that is no Arriver (the
// caller cannot tell) counts for nothing.
func TestArrived(t *testing.T) {
	type link struct {
		q *fakeQueued // nil: l is another kind
		l softrc.Link
	}
	q := func(arrived, took, left bool) link { f := queued(arrived, took, left); return link{f, f} }
	arr := func(arrived bool) link { return link{nil, arriving(arrived)} }
	plain := func() link { return link{nil, &fakeDriver{intr: make(chan struct{}, 1)}} }
	for _, c := range []struct {
		name          string
		links         []link
		took, waiting bool
	}{
		{"nothing arrived", []link{q(false, true, true), q(false, true, true)}, false, false},
		{"taken", []link{q(false, true, true), q(true, true, false)}, true, false},
		{"taken and left", []link{q(true, true, true)}, true, true},
		{"left by one, taken by another", []link{q(true, false, true), q(true, true, false)}, true, true},
		{"taken by one, left by another", []link{q(true, true, false), q(true, false, true)}, true, true},
		{"arrived, nothing to take", []link{q(true, false, false), q(true, false, false)}, false, false},
		{"arrived for a link that cannot take it", []link{arr(true), q(false, true, true)}, false, true},
		{"no bytes for a link that cannot take them", []link{arr(false), q(true, true, false)}, true, false},
		{"no Arriver", []link{plain(), q(false, true, true)}, false, false},
		{"all kinds", []link{plain(), arr(true), q(true, true, false), q(false, true, true)}, true, true},
	} {
		var ls []softrc.Link
		for _, l := range c.links {
			ls = append(ls, l.l)
		}
		cq := linkedCQ(t, ls...)
		took, waiting := cq.Arrived(context.Background())
		assert.Equal(t, c.took, took, "%s: took", c.name)
		assert.Equal(t, c.waiting, waiting, "%s: waiting", c.name)
		for i, l := range c.links {
			if l.q == nil {
				continue
			}
			if l.q.arrived.Load() {
				assert.Equal(t, int32(1), l.q.calls.Load(), "%s: link %d has bytes arrived but was not driven", c.name, i)
				assert.Same(t, cq, l.q.cq.Load(), "%s: link %d was driven for another CQ", c.name, i)
			} else {
				assert.Zero(t, l.q.calls.Load(), "%s: link %d has nothing arrived but was driven", c.name, i)
			}
		}
	}
}
