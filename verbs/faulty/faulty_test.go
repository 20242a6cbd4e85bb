package faulty_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
	"github.com/rdmago/rdmago/verbs/loop"
	"github.com/rdmago/rdmago/verbs/shm"
)

type end struct {
	dev      verbs.Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	mr       verbs.MR
}

const all = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func newEnd(t *testing.T, inj *faulty.Injector) *end {
	t.Helper()
	d, err := loop.Open(context.Background(), loop.Options{})
	require.NoError(t, err)
	return newEndOn(t, faulty.Wrap(d, inj))
}

// newEndOn is newEnd on a device already wrapped; it closes dev when the
// test ends.
func newEndOn(t *testing.T, dev verbs.Device) *end {
	t.Helper()
	e := &end{dev: dev}
	t.Cleanup(func() { _ = e.dev.Close() })
	var err error
	e.pd, err = e.dev.AllocPD()
	require.NoError(t, err)
	e.scq, err = e.dev.CreateCQ(64)
	require.NoError(t, err)
	e.rcq, err = e.dev.CreateCQ(64)
	require.NoError(t, err)
	e.mr, err = e.pd.AllocMR(4096, all)
	require.NoError(t, err)
	e.qp, err = e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	return e
}

// newPair connects two wrapped loop QPs with short timers; a's RNR retry is
// infinite so a SEND without a receive stays outstanding.
func newPair(t *testing.T, inj *faulty.Injector) (a, b *end) {
	t.Helper()
	a, b = newEnd(t, inj), newEnd(t, inj)
	o := verbs.DefaultConnectOptions()
	o.Timeout, o.RetryCnt, o.MinRNRTimer = 10, 2, 1
	require.NoError(t, verbs.Connect(a.qp, b.qp.Address(), o))
	require.NoError(t, verbs.Connect(b.qp, a.qp.Address(), o))
	return a, b
}

func write(a, b *end, id uint64, signaled bool) verbs.SendWR {
	wr := verbs.SendWR{ID: id, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if signaled {
		wr.Flags = verbs.SendSignaled
	}
	return wr
}

func send(e *end, id uint64) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8)}}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func next(t *testing.T, ctx context.Context, cq verbs.CQ) verbs.WC {
	t.Helper()
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		require.NoError(t, cq.Wait(ctx))
	}
	return wc[0]
}

func TestFailPosts(t *testing.T) {
	inj := faulty.NewInjector()
	a, b := newPair(t, inj)
	ctx := ctxT(t)

	inj.FailPosts(2, nil, nil)
	err := a.qp.PostSend(write(a, b, 1, true))
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve)
	assert.Equal(t, 0, ve.Index)
	assert.Equal(t, a.qp.Num(), ve.QPNum)
	assert.ErrorIs(t, err, verbs.ErrQueueFull)
	assert.Contains(t, err.Error(), "injected")
	require.ErrorIs(t, b.qp.PostRecv(verbs.RecvWR{ID: 1}), verbs.ErrQueueFull, "second injected failure")
	require.NoError(t, a.qp.PostSend(write(a, b, 2, true)), "the rule was for two posts")
	// The failed post posted nothing: the only completion is ID 2.
	assert.EqualValues(t, 2, next(t, ctx, a.scq).ID)

	// A rule for b's receives only, until cleared.
	boom := errors.New("boom")
	inj.FailPosts(-1, boom, func(qpNum uint32, recv bool) bool { return recv && qpNum == b.qp.Num() })
	for range 3 {
		require.ErrorIs(t, b.qp.PostRecv(verbs.RecvWR{ID: 1}), boom)
	}
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}), "a's receives do not match")
	require.NoError(t, a.qp.PostSend(write(a, b, 3, true)), "sends do not match")
	next(t, ctx, a.scq)
	inj.Clear()
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 1}))
	assert.Equal(t, 5, inj.Stats().PostsFailed)
}

func TestDropCompletions(t *testing.T) {
	inj := faulty.NewInjector()
	a, b := newPair(t, inj)
	ctx := ctxT(t)
	inj.DropCompletions(1, faulty.SendsOf(a.qp.Num()))
	require.NoError(t, a.qp.PostSend(write(a, b, 1, true), write(a, b, 2, true)))
	assert.EqualValues(t, 2, next(t, ctx, a.scq).ID, "the first completion is lost")

	// A lost completion does not wake a waiter.
	inj.DropCompletions(1, faulty.ID(3))
	require.NoError(t, a.qp.PostSend(write(a, b, 3, true)))
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, a.scq.Wait(short), context.DeadlineExceeded)
	var wc [4]verbs.WC
	assert.Zero(t, a.scq.Poll(wc[:]))

	// Receives too.
	inj.DropCompletions(1, faulty.RecvsOf(b.qp.Num()))
	rsge := []verbs.SGE{verbs.SGEOf(b.mr, 0, 8)}
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 10, SGL: rsge}, verbs.RecvWR{ID: 11, SGL: rsge}))
	require.NoError(t, a.qp.PostSend(send(a, 4), send(a, 5)))
	assert.EqualValues(t, 11, next(t, ctx, b.rcq).ID)
	assert.Equal(t, 3, inj.Stats().CompletionsLost)
}

func TestDelayCompletions(t *testing.T) {
	inj := faulty.NewInjector()
	a, b := newPair(t, inj)
	ctx := ctxT(t)
	const delay = 50 * time.Millisecond
	inj.DelayCompletions(1, delay, faulty.ID(1))
	start := time.Now()
	require.NoError(t, a.qp.PostSend(write(a, b, 1, true), write(a, b, 2, true)))
	first := next(t, ctx, a.scq)
	// A lower bound on the injected delay is what is being tested here,
	// not speed.
	assert.GreaterOrEqual(t, time.Since(start), delay, "a delayed completion came early")
	assert.EqualValues(t, 1, first.ID)
	assert.EqualValues(t, 2, next(t, ctx, a.scq).ID, "the CQ stays FIFO behind a delayed completion")

	inj.DelayCompletions(-1, time.Hour, nil)
	require.NoError(t, a.qp.PostSend(write(a, b, 3, true)))
	short, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, a.scq.Wait(short), context.DeadlineExceeded, "Wait honours its context while a completion is held")
	assert.Equal(t, 2, inj.Stats().CompletionsLate)
}

func TestDisconnect(t *testing.T) {
	for _, synth := range []bool{false, true} {
		name := "Inner"
		if synth {
			name = "Synthesized"
		}
		t.Run(name, func(t *testing.T) {
			inj := faulty.NewInjector()
			inj.SynthesizeDisconnects(synth)
			a, b := newPair(t, inj)
			ctx := ctxT(t)
			require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 50}))
			// b has no receive and a retries RNR forever: the SENDs stay outstanding.
			require.NoError(t, a.qp.PostSend(send(a, 1), send(a, 2)))
			require.NoError(t, inj.Disconnect(a.qp.Num()))
			w1, w2 := next(t, ctx, a.scq), next(t, ctx, a.scq)
			assert.Equal(t, verbs.StatusRetryExcErr, w1.Status, "outstanding SEND after Disconnect")
			assert.EqualValues(t, 1, w1.ID)
			assert.Equal(t, verbs.StatusWRFlushErr, w2.Status, "SEND queued behind it")
			r := next(t, ctx, a.rcq)
			assert.Equal(t, verbs.StatusWRFlushErr, r.Status)
			assert.EqualValues(t, 50, r.ID)
			assert.Equal(t, verbs.QPErr, a.qp.State())
			for b.qp.State() != verbs.QPErr {
				require.NoError(t, ctx.Err(), "the peer never went to ERR")
				time.Sleep(time.Millisecond)
			}
			require.NoError(t, b.qp.PostSend(send(b, 3)))
			w3 := next(t, ctx, b.scq)
			assert.Contains(t, []verbs.Status{verbs.StatusRetryExcErr, verbs.StatusWRFlushErr}, w3.Status, "peer's SEND after Disconnect")
			if synth {
				assert.Equal(t, verbs.StatusRetryExcErr, w3.Status, "synthesized: the peer's first send reports the loss")
				assert.Equal(t, 2, inj.Stats().SynthesizedLoss)
			}
			require.ErrorIs(t, inj.Disconnect(12345678), verbs.ErrInvalidArgument)
		})
	}
}

// TestRulesFromAnotherGoroutine changes rules while traffic flows (run
// with -race): every signaled request is either delivered or counted lost.
func TestRulesFromAnotherGoroutine(t *testing.T) {
	inj := faulty.NewInjector()
	a, b := newPair(t, inj)
	ctx := ctxT(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			switch i % 3 {
			case 0:
				inj.DropCompletions(1, nil)
			case 1:
				inj.DelayCompletions(1, time.Millisecond, nil)
			case 2:
				inj.Clear()
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	const n = 300
	delivered := 0
	for i := range n {
		require.NoError(t, a.qp.PostSend(write(a, b, uint64(i), true)))
		var wc [4]verbs.WC
		delivered += a.scq.Poll(wc[:])
	}
	close(stop)
	wg.Wait()
	inj.Clear()
	// Collect what is still in flight or held back.
	for delivered+inj.Stats().CompletionsLost < n {
		var wc [4]verbs.WC
		k := a.scq.Poll(wc[:])
		delivered += k
		if k == 0 {
			w, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			_ = a.scq.Wait(w)
			cancel()
			require.NoError(t, ctx.Err(), "delivered %d + lost %d of %d", delivered, inj.Stats().CompletionsLost, n)
		}
	}
	assert.Equal(t, n, delivered+inj.Stats().CompletionsLost)
}

type openFunc func(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error)

type testProvider struct{ open openFunc }

func (p testProvider) Name() string { return "loop" }
func (p testProvider) Traits() verbs.Traits {
	return verbs.Traits{EagerSize: 1234, Wait: verbs.WaitHint{Spin: 5}}
}
func (p testProvider) CanConnect(a, b verbs.PeerInfo) bool { return a.SameProcess(b) }
func (p testProvider) Open(ctx context.Context, o verbs.DeviceOptions) (verbs.Device, error) {
	return p.open(ctx, o)
}

func TestProviderAndForeignCQ(t *testing.T) {
	inj := faulty.NewInjector()
	p := faulty.New(testProvider{open: func(ctx context.Context, _ verbs.DeviceOptions) (verbs.Device, error) {
		return loop.Open(ctx, loop.Options{})
	}}, inj)
	assert.Equal(t, "loop", p.Name())
	assert.Equal(t, testProvider{}.Traits(), p.Traits(), "the wrapper describes itself as the inner provider")
	one := verbs.PeerInfo{Process: "a"}
	assert.True(t, p.CanConnect(one, one))
	assert.False(t, p.CanConnect(one, verbs.PeerInfo{Process: "b"}))
	dev, err := p.Open(context.Background(), verbs.DeviceOptions{})
	require.NoError(t, err)
	defer dev.Close()
	assert.Equal(t, "loop", dev.Provider())
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	defer pd.Close()
	raw, err := loop.Open(context.Background(), loop.Options{})
	require.NoError(t, err)
	defer raw.Close()
	foreign, err := raw.CreateCQ(4)
	require.NoError(t, err)
	defer foreign.Close()
	_, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: foreign, RecvCQ: foreign, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.ErrorIs(t, err, verbs.ErrInvalidArgument, "a CQ the wrapper did not create")
}

func TestCorruptCompletions(t *testing.T) {
	inj := faulty.NewInjector()
	a, b := newPair(t, inj)
	ctx := ctxT(t)
	inj.CorruptCompletions(1, faulty.ID(1), func(wc *verbs.WC) { wc.Status = verbs.StatusRemOpErr })
	require.NoError(t, a.qp.PostSend(write(a, b, 1, true), write(a, b, 2, true)))
	w1, w2 := next(t, ctx, a.scq), next(t, ctx, a.scq)
	assert.Equal(t, verbs.StatusRemOpErr, w1.Status)
	assert.Equal(t, verbs.StatusSuccess, w2.Status, "only one completion was to be corrupted")
	assert.Equal(t, 1, inj.Stats().CompletionsCorrupted)
}

// Closing a QP or its device removes it from the injector's table.
func TestClosedQPsAreForgotten(t *testing.T) {
	inj := faulty.NewInjector()
	a, b := newPair(t, inj)
	na, nb := a.qp.Num(), b.qp.Num()
	require.NoError(t, a.qp.Close())
	require.ErrorIs(t, inj.Disconnect(na), verbs.ErrInvalidArgument, "a closed QP")
	require.NoError(t, b.dev.Close())
	require.ErrorIs(t, inj.Disconnect(nb), verbs.ErrInvalidArgument, "a QP of a closed device")
}

// TestOpener: a device the Opener opens is the named provider's, wrapped:
// the injector's rules apply to its queue pairs; a provider that does not
// exist fails as verbs.Open does.
func TestOpener(t *testing.T) {
	inj := faulty.NewInjector()
	open := faulty.Opener(inj)
	d, err := open(context.Background(), "loop", verbs.DeviceOptions{})
	require.NoError(t, err)
	assert.Equal(t, "loop", d.Provider())
	e := newEndOn(t, d)
	require.NoError(t, verbs.Connect(e.qp, e.qp.Address(), verbs.DefaultConnectOptions()))
	inj.FailPosts(1, nil, nil)
	require.ErrorIs(t, e.qp.PostRecv(verbs.RecvWR{ID: 1}), verbs.ErrQueueFull, "the injector's rule")
	require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 2}))

	_, err = open(context.Background(), "no-such-provider", verbs.DeviceOptions{})
	require.Error(t, err)
	_, want := verbs.Open(context.Background(), "no-such-provider", verbs.DeviceOptions{})
	assert.Equal(t, want.Error(), err.Error())
}

// A wrapped QP writes runs as the QP it wraps does, under the same post
// failures as PostSend; wrapping one that writes none, it reports no runs
// and refuses them.
func TestWriteRuns(t *testing.T) {
	inj := faulty.NewInjector()
	a, b := newPair(t, inj)
	ctx := ctxT(t)
	rw, ok := a.qp.(verbs.RunWriter)
	require.True(t, ok)
	writes, bytes := rw.RunLimits()
	require.Greater(t, writes, 1, "loop QPs write runs")
	require.Positive(t, bytes)
	var run verbs.WriteRun
	run.Add(b.mr.Addr(), b.mr.RKey(), []byte("run"))
	inj.FailPosts(1, nil, nil)
	require.ErrorIs(t, rw.PostWriteRun(7, &run), verbs.ErrQueueFull)
	require.NoError(t, rw.PostWriteRun(8, &run))
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	assert.EqualValues(t, 9, next(t, ctx, a.scq).ID)
	assert.Equal(t, "run", string(b.mr.Bytes()[:3]))

	sd, err := shm.Open(ctx, shm.Options{DeviceOptions: verbs.DeviceOptions{Token: []byte("faulty-runs")}})
	require.NoError(t, err)
	plain := newEndOn(t, faulty.Wrap(sd, inj))
	prw := plain.qp.(verbs.RunWriter)
	w, _ := prw.RunLimits()
	assert.Zero(t, w)
	require.ErrorIs(t, prw.PostWriteRun(1, &run), verbs.ErrInvalidArgument)
}
