package softrc_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// CQ.Wait and a softrc.Driver, with a fake driving link: its Drive blocks
// until the CQ has a completion or Interrupt is called, as the tcp
// provider's does, and records how the CQ used it.

type fakeDriver struct {
	refuse     bool // Drive returns false: another goroutine drives
	drives     atomic.Int32
	interrupts atomic.Int32
	parked     atomic.Int32
	intr       chan struct{}
}

func (f *fakeDriver) Kick()  {}
func (f *fakeDriver) Close() {}

func (f *fakeDriver) Drive(ctx context.Context, cq *softrc.CQ) bool {
	if f.refuse {
		return false
	}
	f.drives.Add(1)
	for !cq.Pending() && ctx.Err() == nil {
		select {
		case <-f.intr:
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			panic("fakeDriver: not interrupted")
		}
	}
	return true
}

func (f *fakeDriver) Interrupt() {
	f.interrupts.Add(1)
	select {
	case f.intr <- struct{}{}:
	default:
	}
}

func (f *fakeDriver) Parked(on bool) {
	if on {
		f.parked.Add(1)
	} else {
		f.parked.Add(-1)
	}
}

// fakeTransport attaches its driver to every QP that reaches RTR.
type fakeTransport struct{ d *fakeDriver }

func (fakeTransport) AddressPayload(uint32) []byte { return []byte{1} }
func (fakeTransport) CheckRemote([]byte) error     { return nil }
func (t fakeTransport) Connect(q *softrc.QP)       { q.Attach(t.d) }
func (fakeTransport) Close() error                 { return nil }

// driven returns a connected QP (to itself) whose link is d, its CQ (send
// and receive), and a posted receive, which moving the QP to ERR flushes:
// a completion that reaches the CQ by another way than the driver.
func driven(t *testing.T, d *fakeDriver) (verbs.QP, verbs.CQ) {
	t.Helper()
	return drivenWith(t, d, softrc.Config{Provider: "fake", Name: "fake", Caps: softrc.DefaultCaps()})
}

// crowded is the config of a device whose ranks outnumber the CPUs.
var crowded = softrc.Config{Provider: "fake", Name: "fake", Caps: softrc.DefaultCaps(), YieldSpin: time.Millisecond}

// drivenWith is driven on a device made with cfg.
func drivenWith(t *testing.T, d *fakeDriver, cfg softrc.Config) (verbs.QP, verbs.CQ) {
	t.Helper()
	_, qp, cq := selfConnected(t, d, cfg, verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1})
	require.NoError(t, qp.PostRecv(verbs.RecvWR{ID: 7}))
	return qp, cq
}

// selfConnected is a QP of caps connected to itself on a device made with
// cfg whose link is d, with its PD and CQ (send and receive).
func selfConnected(t *testing.T, d *fakeDriver, cfg softrc.Config, caps verbs.QPCap) (verbs.PD, verbs.QP, verbs.CQ) {
	t.Helper()
	dev := softrc.NewDevice(cfg, fakeTransport{d})
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	cq, err := dev.CreateCQ(16)
	require.NoError(t, err)
	qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: caps})
	require.NoError(t, err)
	require.NoError(t, verbs.Connect(qp, qp.Address(), verbs.DefaultConnectOptions()))
	return pd, qp, cq
}

// fakeConfig is the config of a device of the fake provider.
var fakeConfig = softrc.Config{Provider: "fake", Name: "fake", Caps: softrc.DefaultCaps()}

func toErr(t *testing.T, qp verbs.QP) {
	t.Helper()
	require.NoError(t, qp.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState))
}

func waitAsync(cq verbs.CQ) chan error { return async(cq.Wait) }

// sleepAsync is waitAsync with the CQ's WaitSleep.
func sleepAsync(cq verbs.CQ) chan error { return async(cq.(verbs.SleepWaiter).WaitSleep) }

// async runs wait under a 10 s timeout on a goroutine of its own.
func async(wait func(context.Context) error) chan error {
	res := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res <- wait(ctx)
	}()
	return res
}

func TestWaitDrivesTheLink(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)}
	qp, cq := driven(t, d)
	res := waitAsync(cq)
	require.Eventually(t, func() bool { return d.drives.Load() == 1 }, 5*time.Second, time.Millisecond)
	toErr(t, qp) // a flush completion: pushed by this goroutine, not the driver
	require.NoError(t, <-res)
	require.Positive(t, d.interrupts.Load(), "a push while a waiter drives must interrupt it")
	var wc [1]verbs.WC
	require.Equal(t, 1, cq.Poll(wc[:]))
	require.Equal(t, verbs.StatusWRFlushErr, wc[0].Status)
}

func TestWaitParksWhenSomeoneElseDrives(t *testing.T) {
	d := &fakeDriver{refuse: true, intr: make(chan struct{}, 1)}
	qp, cq := driven(t, d)
	res := waitAsync(cq)
	require.Eventually(t, func() bool { return d.parked.Load() == 1 }, 5*time.Second, time.Millisecond)
	toErr(t, qp)
	require.NoError(t, <-res)
	require.Zero(t, d.parked.Load(), "Parked(true) without Parked(false)")
}

func TestWaitDrivingCQClosed(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)}
	_, cq := driven(t, d)
	res := waitAsync(cq)
	res2 := waitAsync(cq) // parks beside the driver
	require.Eventually(t, func() bool { return d.drives.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, cq.Close())
	require.ErrorIs(t, <-res, verbs.ErrClosed)
	require.ErrorIs(t, <-res2, verbs.ErrClosed)
}

func TestWaitDrivingCtxEnds(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)}
	_, cq := driven(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, cq.Wait(ctx), context.DeadlineExceeded)
	require.Equal(t, int32(1), d.drives.Load())
}

func TestNoDriverAfterLinkLost(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)}
	qp, cq := driven(t, d)
	qp.(*softrc.QP).LinkLost(d, context.Canceled)
	// The QP flushed its receive and dropped the link from its CQ: Wait
	// parks without driving.
	var wc [1]verbs.WC
	require.Equal(t, 1, cq.Poll(wc[:]))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, cq.Wait(ctx), context.DeadlineExceeded)
	require.Zero(t, d.drives.Load())
}

// Where the ranks outnumber the CPUs, WaitSleep never drives the link,
// even when nobody else does: it parks with the link marked parked (its
// own goroutine reads), returns the completion another goroutine pushes,
// and unmarks the link.
func TestWaitSleepParksWithoutDriving(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)}
	qp, cq := drivenWith(t, d, crowded)
	_, ok := cq.(verbs.SleepWaiter)
	require.True(t, ok, "softrc's CQ is a verbs.SleepWaiter")
	res := sleepAsync(cq)
	require.Eventually(t, func() bool { return d.parked.Load() == 1 }, 5*time.Second, time.Millisecond)
	toErr(t, qp)
	require.NoError(t, <-res)
	require.Zero(t, d.drives.Load(), "WaitSleep drove the link")
	require.Zero(t, d.parked.Load(), "Parked(true) without Parked(false)")
	var wc [1]verbs.WC
	require.Equal(t, 1, cq.Poll(wc[:]))
}

func TestWaitSleepEnds(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)}
	_, cq := drivenWith(t, d, crowded)
	sw := cq.(verbs.SleepWaiter)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, sw.WaitSleep(ctx), context.DeadlineExceeded)
	require.Zero(t, d.parked.Load())

	res := sleepAsync(cq)
	require.Eventually(t, func() bool { return d.parked.Load() == 1 }, 5*time.Second, time.Millisecond)
	require.NoError(t, cq.Close())
	require.ErrorIs(t, <-res, verbs.ErrClosed)
	require.Zero(t, d.drives.Load())
}

// With a CPU a rank, WaitSleep is Wait: it drives the link, which serves
// the traffic nobody polls for.
func TestWaitSleepDrivesWithACPUEach(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)}
	qp, cq := driven(t, d)
	res := sleepAsync(cq)
	require.Eventually(t, func() bool { return d.drives.Load() == 1 }, 5*time.Second, time.Millisecond)
	toErr(t, qp)
	require.NoError(t, <-res)
}
