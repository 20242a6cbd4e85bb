package verbstest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var scaleCases = []tcase{
	{"ManyQPs", testManyQPs},
}

var concurrencyCases = []tcase{
	{"PostersAndPollersOneCQ", testPostersAndPollers},
	{"ConcurrentPostsOneQP", testConcurrentPostsOneQP},
}

var cqCases = []tcase{
	{"PollEmpty", testPollEmpty},
	{"WaitHonoursContext", testWaitContext},
	{"WaitWakesOnCompletion", testWaitWakes},
	{"WaitReturnsWhenNonEmpty", testWaitNonEmpty},
	{"WaitAfterClose", testWaitAfterClose},
}

// testManyQPs: ManyQPs queue pairs on each device, sharing CQs, each
// carrying its own SEND and WRITE; the completions name the right QP.
func testManyQPs(t *testing.T, s *suite) {
	n := s.opts.ManyQPs
	caps := s.devA.Caps()
	skipUnless(t, caps.MaxQP >= 2*n, "device allows %d QPs; the case needs %d", caps.MaxQP, 2*n)
	for _, same := range []bool{false, true} {
		name := "TwoDevices"
		if same {
			name = "SameDevice"
		}
		s.run(t, name, func(t *testing.T) {
			a, b := s.newHubs(t, n, pairConfig{sameDevice: same, cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
			ctx := s.ctx(t)
			nums := map[uint32]int{}
			for i, qp := range b.qps {
				_, dup := nums[qp.Num()]
				require.False(t, dup, "QP number %#x used twice on one device", qp.Num())
				nums[qp.Num()] = i
				require.NoError(t, qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{verbs.SGEOf(b.mr, i*8, 8)}}))
			}
			for i, qp := range a.qps {
				binary.LittleEndian.PutUint64(a.mr.Bytes()[i*8:], uint64(1000+i))
				require.NoError(t, qp.PostSend(
					rdmaWR(uint64(2*i), verbs.OpRDMAWrite, b.mr, 8192+i*8, verbs.SGEOf(a.mr, i*8, 8)),
					sendWR(uint64(2*i+1), verbs.OpSend, verbs.SGEOf(a.mr, i*8, 8))))
			}
			for _, wc := range collect(ctx, t, b.rcq, n) {
				i, ok := nums[wc.QPNum]
				require.True(t, ok, "receive completion names QP %#x, not one of ours", wc.QPNum)
				requireWC(t, wc, uint64(i), verbs.WCRecv, b.qps[i].Num(), "receive on one of many QPs")
				require.EqualValues(t, 1000+i, binary.LittleEndian.Uint64(b.mr.Bytes()[i*8:]), "QP %d received another QP's message", i)
				require.EqualValues(t, 1000+i, binary.LittleEndian.Uint64(b.mr.Bytes()[8192+i*8:]), "QP %d's WRITE", i)
			}
			perQP := map[uint32][]uint64{}
			for _, wc := range collect(ctx, t, a.scq, 2*n) {
				require.Equal(t, verbs.StatusSuccess, wc.Status, "%s", fmtWCs([]verbs.WC{wc}))
				perQP[wc.QPNum] = append(perQP[wc.QPNum], wc.ID)
			}
			for i, qp := range a.qps {
				require.Equal(t, []uint64{uint64(2 * i), uint64(2*i + 1)}, perQP[qp.Num()], "completions of QP %d", i)
			}
		})
	}
}

// testPostersAndPollers: goroutines post on their own QPs while several
// goroutines poll the shared send CQ and one polls the shared receive CQ.
// Every completion arrives exactly once; per QP, receives complete in order.
func testPostersAndPollers(t *testing.T, s *suite) {
	const nqp, msgs, window = 4, 64, 8
	a, b := s.newHubs(t, nqp, pairConfig{cap: verbs.QPCap{MaxSendWR: window, MaxRecvWR: msgs, MaxSendSGE: 1, MaxRecvSGE: 1}})
	ctx := s.ctx(t)
	qpIndex := map[uint32]int{}
	for i, qp := range a.qps {
		qpIndex[qp.Num()] = i
	}
	for i, qp := range b.qps {
		qpIndex[qp.Num()] = i
		for k := range msgs {
			require.NoError(t, qp.PostRecv(verbs.RecvWR{ID: uint64(i<<16 | k), SGL: []verbs.SGE{verbs.SGEOf(b.mr, (i*msgs+k)*8, 8)}}))
		}
	}
	credits := make([]chan struct{}, nqp)
	for i := range credits {
		credits[i] = make(chan struct{}, window)
		for range window {
			credits[i] <- struct{}{}
		}
	}
	var mu sync.Mutex
	seen := map[uint64]bool{}
	failed := make(chan error, 16)
	fail := func(err error) {
		select {
		case failed <- err:
		default:
		}
	}
	var posters, pollers sync.WaitGroup
	for i := range nqp {
		posters.Add(1)
		go func() {
			defer posters.Done()
			for k := range msgs {
				select {
				case <-credits[i]:
				case <-ctx.Done():
					fail(fmt.Errorf("QP %d waiting for a send credit: %w", i, ctx.Err()))
					return
				}
				off := (i*msgs + k) * 8
				binary.LittleEndian.PutUint64(a.mr.Bytes()[off:], uint64(i<<16|k))
				var wr verbs.SendWR
				if k%2 == 0 {
					wr = sendWR(uint64(i<<16|k), verbs.OpSend, verbs.SGEOf(a.mr, off, 8))
				} else {
					wr = rdmaWR(uint64(i<<16|k), verbs.OpRDMAWriteWithImm, b.mr, nqp*msgs*8+off, verbs.SGEOf(a.mr, off, 8))
					wr.Imm = uint32(i<<16 | k)
				}
				if err := a.qps[i].PostSend(wr); err != nil {
					fail(fmt.Errorf("QP %d request %d: %w", i, k, err))
					return
				}
			}
		}()
	}
	sendDone := make(chan struct{})
	var got int
	for range 2 {
		pollers.Add(1)
		go func() {
			defer pollers.Done()
			var wc [8]verbs.WC
			for {
				n := a.scq.Poll(wc[:])
				for _, w := range wc[:n] {
					if w.Status != verbs.StatusSuccess {
						fail(fmt.Errorf("send completion %s", fmtWCs([]verbs.WC{w})))
						return
					}
					mu.Lock()
					dup := seen[w.ID]
					seen[w.ID] = true
					got++
					all := got == nqp*msgs
					mu.Unlock()
					if dup {
						fail(fmt.Errorf("send completion %d delivered twice", w.ID))
						return
					}
					credits[qpIndex[w.QPNum]] <- struct{}{}
					if all {
						close(sendDone)
					}
				}
				if n > 0 {
					continue
				}
				select {
				case <-sendDone:
					return
				default:
				}
				wctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
				err := a.scq.Wait(wctx)
				cancel()
				if err != nil && ctx.Err() != nil {
					fail(fmt.Errorf("polling the send CQ: %w", err))
					return
				}
			}
		}()
	}
	next := make([]int, nqp)
	for received := 0; received < nqp*msgs; {
		var wc [8]verbs.WC
		n := b.rcq.Poll(wc[:])
		for _, w := range wc[:n] {
			received++
			require.Equal(t, verbs.StatusSuccess, w.Status, "%s", fmtWCs([]verbs.WC{w}))
			i := qpIndex[w.QPNum]
			k := next[i]
			next[i]++
			require.EqualValues(t, i<<16|k, w.ID, "receives of QP %d out of order", i)
			if k%2 == 0 {
				require.Equal(t, verbs.WCRecv, w.Opcode)
				require.EqualValues(t, i<<16|k, binary.LittleEndian.Uint64(b.mr.Bytes()[(i*msgs+k)*8:]))
			} else {
				require.Equal(t, verbs.WCRecvRDMAWithImm, w.Opcode)
				require.EqualValues(t, i<<16|k, w.Imm)
				require.EqualValues(t, i<<16|k, binary.LittleEndian.Uint64(b.mr.Bytes()[nqp*msgs*8+(i*msgs+k)*8:]))
			}
		}
		if n == 0 {
			select {
			case err := <-failed:
				t.Fatal(err)
			default:
			}
			if err := b.rcq.Wait(ctx); err != nil {
				t.Fatalf("receive CQ after %d of %d: %v", received, nqp*msgs, err)
			}
		}
	}
	posters.Wait()
	pollers.Wait()
	select {
	case err := <-failed:
		t.Fatal(err)
	default:
	}
	require.Len(t, seen, nqp*msgs)
}

// testConcurrentPostsOneQP: several goroutines post on one QP at once; the
// requests are ordered somehow, and each completes exactly once.
func testConcurrentPostsOneQP(t *testing.T, s *suite) {
	const goroutines, per = 4, 16
	p := s.newPair(t, pairConfig{cap: verbs.QPCap{MaxSendWR: goroutines * per, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	ctx := s.ctx(t)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range per {
				id := uint64(g*per + k)
				if err := p.a.qp.PostSend(rdmaWR(id, verbs.OpRDMAWrite, p.b.mr, int(id)*8, verbs.SGEOf(p.a.mr, int(id)*8, 8))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	seen := map[uint64]bool{}
	lastPerG := make([]int, goroutines)
	for i := range lastPerG {
		lastPerG[i] = -1
	}
	for _, wc := range collect(ctx, t, p.a.scq, goroutines*per) {
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.False(t, seen[wc.ID], "completion %d twice", wc.ID)
		seen[wc.ID] = true
		// One goroutine's requests keep their order.
		g, k := int(wc.ID)/per, int(wc.ID)%per
		require.Greater(t, k, lastPerG[g], "goroutine %d's requests completed out of order", g)
		lastPerG[g] = k
	}
}

func testPollEmpty(t *testing.T, s *suite) {
	cq := s.newCQ(t, s.devA, 4)
	var wc [4]verbs.WC
	require.Zero(t, cq.Poll(wc[:]))
	require.Zero(t, cq.Poll(nil))
}

func testWaitContext(t *testing.T, s *suite) {
	cq := s.newCQ(t, s.devA, 4)
	ctx, cancel := context.WithTimeout(s.ctx(t), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, cq.Wait(ctx), context.DeadlineExceeded, "Wait on an empty CQ past the deadline")
	ctx2, cancel2 := context.WithCancel(s.ctx(t))
	cancel2()
	require.ErrorIs(t, cq.Wait(ctx2), context.Canceled, "Wait with a canceled context")
	// A cancel while waiting ends the wait.
	ctx3, cancel3 := context.WithCancel(s.ctx(t))
	done := make(chan error, 1)
	go func() { done <- cq.Wait(ctx3) }()
	time.Sleep(5 * time.Millisecond)
	cancel3()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(s.opts.CaseTimeout):
		t.Fatal("CQ.Wait did not return after its context was canceled")
	}
}

func testWaitWakes(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	require.NoError(t, p.b.qp.PostRecv(verbs.RecvWR{ID: 1}))
	woke := make(chan error, 1)
	go func() { woke <- p.b.rcq.Wait(ctx) }()
	time.Sleep(10 * time.Millisecond) // let the waiter block
	require.NoError(t, p.a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpSend, Flags: verbs.SendSignaled}))
	select {
	case err := <-woke:
		require.NoError(t, err, "CQ.Wait woken by a completion")
	case <-ctx.Done():
		t.Fatal("a completion did not wake CQ.Wait")
	}
	requireWC(t, collect1(ctx, t, p.b.rcq), 1, verbs.WCRecv, p.b.qp.Num(), "the completion that woke the waiter")
	collect1(ctx, t, p.a.scq)
}

func testWaitNonEmpty(t *testing.T, s *suite) {
	p := s.newPair(t, pairConfig{})
	ctx := s.ctx(t)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(1, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8))))
	collect1(ctx, t, p.a.scq)
	require.NoError(t, p.a.qp.PostSend(rdmaWR(2, verbs.OpRDMAWrite, p.b.mr, 0, verbs.SGEOf(p.a.mr, 0, 8))))
	require.NoError(t, p.a.scq.Wait(ctx))
	// Once Wait said so, the completion is there (nobody else polls).
	require.NoError(t, p.a.scq.Wait(ctx), "Wait on a CQ that holds a completion")
	var wc [2]verbs.WC
	require.Equal(t, 1, p.a.scq.Poll(wc[:]))
	require.EqualValues(t, 2, wc[0].ID)
}

func testWaitAfterClose(t *testing.T, s *suite) {
	ctx := s.ctx(t)
	cq, err := s.devA.CreateCQ(4)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- cq.Wait(ctx) }()
	time.Sleep(5 * time.Millisecond)
	require.NoError(t, cq.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, verbs.ErrClosed, "Wait on a CQ closed while waiting")
	case <-ctx.Done():
		t.Fatal("CQ.Close did not wake a waiter")
	}
	require.ErrorIs(t, cq.Wait(ctx), verbs.ErrClosed, "Wait on a closed CQ")
	if err := cq.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("second CQ.Close: %v", err)
	}
}
