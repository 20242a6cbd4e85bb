package tcp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/stacks"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// Tests of the send and receive fast paths: PostSend writing in the posting
// goroutine, the reading side writing responses, and CQ waiters reading the
// socket themselves (Drive).

// bigSide is a side with deep queues, separate send and receive CQs and a
// region of n bytes.
func bigSide(t *testing.T, dev verbs.Device, n int) *side2 {
	t.Helper()
	s := &side2{side: side{dev: dev}}
	var err error
	s.pd, err = dev.AllocPD()
	require.NoError(t, err)
	s.cq, err = dev.CreateCQ(4096)
	require.NoError(t, err)
	s.rcq, err = dev.CreateCQ(4096)
	require.NoError(t, err)
	s.qp, err = s.pd.CreateQP(verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.rcq,
		Cap: verbs.QPCap{MaxSendWR: 2048, MaxRecvWR: 2048, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
	require.NoError(t, err)
	s.mr, err = s.pd.AllocMR(n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	require.NoError(t, err)
	return s
}

type side2 struct {
	side
	rcq verbs.CQ
}

func bigPair(t *testing.T, o Options, n int) (*side2, *side2) {
	t.Helper()
	a, b := bigSide(t, openDev(t, o), n), bigSide(t, openDev(t, o), n)
	connectPair(t, &a.side, &b.side, verbs.DefaultConnectOptions())
	return a, b
}

// works2 checks that a and b move data both ways.
func works2(t *testing.T, a, b *side2) {
	t.Helper()
	copy(a.mr.Bytes(), "ping")
	require.NoError(t, a.qp.PostSend(writeWR(1, &a.side, &b.side, 4)))
	require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
	require.Equal(t, "ping", string(b.mr.Bytes()[:4]))
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 100, 8)}}))
	require.NoError(t, b.qp.PostSend(sendWR(2, &b.side)))
	require.Equal(t, verbs.StatusSuccess, wait(t, b.cq).Status)
	wc := wait(t, a.rcq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint64(9), wc.ID)
}

func waitCtx(ctx context.Context, cq verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	for {
		if cq.Poll(wc[:]) == 1 {
			return wc[0], nil
		}
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, err
		}
	}
}

// TestConcurrentPostersKeepOrder: goroutines posting on one QP at once, some
// large WRITEs (partly left to the writer goroutine when the socket is full)
// between small ones (written inline), each see their requests executed in their posting order, and a
// WRITE_WITH_IMM completes at the target only after the data of every
// earlier request of its poster has been placed.
func TestConcurrentPostersKeepOrder(t *testing.T) {
	const posters, per = 4, 100
	const big = 192 << 10 // several fill the socket: the writer goroutine writes the rest
	slot := func(g, i int) int { return (g*per + i) * 8 }
	bigOff := posters * per * 8
	// Each large WRITE lands in its own place at b (b checks it after
	// the poster may have moved on); a reuses one source buffer per poster.
	dst := func(g, i int) int { return bigOff + (g*per/10+i/10)*big }
	a, b := bigPair(t, testOptions(), bigOff+posters*per/10*big)
	for i := range posters * per {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var mu sync.Mutex // serializes reaping a's send completions into done
	done := map[uint64]bool{}
	errs := make(chan error, posters)
	for g := range posters {
		go func() {
			var wrs [2]verbs.SendWR
			for i := range per {
				src := a.mr.Bytes()[slot(g, i):]
				binary.LittleEndian.PutUint32(src, uint32(g))
				binary.LittleEndian.PutUint32(src[4:], uint32(i))
				k := 0
				if i%10 == 5 {
					// A large WRITE with this message's number in every word,
					// then the small WRITE_WITH_IMM that announces it.
					bs := a.mr.Bytes()[bigOff+g*big : bigOff+(g+1)*big]
					for j := 0; j < big; j += 4 {
						binary.LittleEndian.PutUint32(bs[j:], uint32(i))
					}
					wrs[k] = verbs.SendWR{ID: 1 << 40, Opcode: verbs.OpRDMAWrite,
						SGL: []verbs.SGE{verbs.SGEOf(a.mr, bigOff+g*big, big)}, RemoteAddr: b.mr.Addr() + uint64(dst(g, i)), RKey: b.mr.RKey()}
					k++
				}
				wrs[k] = verbs.SendWR{ID: uint64(g*per + i), Opcode: verbs.OpRDMAWriteWithImm, Imm: uint32(g<<16 | i), Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{verbs.SGEOf(a.mr, slot(g, i), 8)}, RemoteAddr: b.mr.Addr() + uint64(slot(g, i)), RKey: b.mr.RKey()}
				k++
				if err := a.qp.PostSend(wrs[:k]...); err != nil {
					errs <- err
					return
				}
				if i%10 == 5 {
					// Wait for this large one (its WRITE_WITH_IMM, after it)
					// before its source buffer is reused.
					mu.Lock()
					for !done[uint64(g*per+i)] {
						wc, err := waitCtx(ctx, a.cq)
						if err == nil && wc.Status != verbs.StatusSuccess {
							err = fmt.Errorf("send completion %d: %v", wc.ID, wc.Status)
						}
						if err != nil {
							mu.Unlock()
							errs <- err
							return
						}
						done[wc.ID] = true
					}
					mu.Unlock()
				}
			}
			errs <- nil
		}()
	}
	next := make([]int, posters)
	for range posters * per {
		wc, err := waitCtx(ctx, b.rcq)
		if err != nil {
			// This timed out, rarely and only under load, while the
			// waiter awaited a large WRITE whole that its window could
			// not hold (TestAwaitedFrameThatCannotComeWholeGoesToReader):
			// the goroutines' stacks tell where progress stops.
			buf := make([]byte, 1<<20)
			t.Logf("waiting for the target's completions: %v; goroutines:\n%s", err, buf[:runtime.Stack(buf, true)])
		}
		require.NoError(t, err)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		g, i := int(wc.Imm>>16), int(wc.Imm&0xffff)
		require.Less(t, g, posters)
		require.Equal(t, next[g], i, "poster %d: message %d arrived out of order", g, i)
		next[g]++
		got := b.mr.Bytes()[slot(g, i):]
		require.Equal(t, uint32(g), binary.LittleEndian.Uint32(got))
		require.Equal(t, uint32(i), binary.LittleEndian.Uint32(got[4:]))
		if i%10 == 5 {
			bs := b.mr.Bytes()[dst(g, i) : dst(g, i)+big]
			for j := 0; j < big; j += 4 {
				if binary.LittleEndian.Uint32(bs[j:]) != uint32(i) {
					t.Fatalf("poster %d message %d: large WRITE not placed at offset %d before the WRITE_WITH_IMM after it completed", g, i, j)
				}
			}
		}
	}
	for range posters {
		require.NoError(t, <-errs)
	}
	// The remaining signaled completions at a all succeed.
	mu.Lock()
	defer mu.Unlock()
	for {
		var wc [16]verbs.WC
		n := a.cq.Poll(wc[:])
		for _, w := range wc[:n] {
			require.Equal(t, verbs.StatusSuccess, w.Status)
		}
		if n == 0 {
			break
		}
	}
}

// TestWriteNowFullSocket: the inline write takes what the socket accepts
// and returns the rest at once, without blocking, when the peer does not
// read; the bytes it reports written are the ones the peer gets.
func TestWriteNowFullSocket(t *testing.T) {
	c, peer := rawConns(t)
	l := &link{c: c}
	var err error
	l.rc, err = c.(*net.TCPConn).SyscallConn()
	require.NoError(t, err)
	l.ws.init(l)
	// Small socket buffers, so that a few MiB fill them.
	require.NoError(t, c.(*net.TCPConn).SetWriteBuffer(64<<10))
	require.NoError(t, peer.(*net.TCPConn).SetReadBuffer(64<<10))
	src := make([]byte, 8<<20)
	for i := 0; i < len(src); i += 8 {
		binary.LittleEndian.PutUint64(src[i:], uint64(i)*0x9e3779b97f4a7c15)
	}
	bufs := net.Buffers{src[:100], src[100 : 4<<20], src[4<<20:]}
	start := time.Now()
	rest, err := l.writeNow(bufs)
	require.NoError(t, err)
	left := 0
	for _, b := range rest {
		left += len(b)
	}
	require.Positive(t, left, "8 MiB fit a socket nobody reads?")
	written := len(src) - left
	require.Positive(t, written)
	// A second try on the full socket writes nothing and returns at once.
	rest2, err := l.writeNow(rest)
	require.NoError(t, err)
	left2 := 0
	for _, b := range rest2 {
		left2 += len(b)
	}
	written += left - left2
	assert.Less(t, time.Since(start), 5*time.Second, "writeNow blocked on a full socket")
	// The rest goes out by a blocking write once the peer reads.
	got := make(chan []byte, 1)
	go func() {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(peer)
		got <- buf.Bytes()
	}()
	_, err = rest2.WriteTo(c)
	require.NoError(t, err)
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	select {
	case b := <-got:
		require.Equal(t, len(src), len(b))
		require.True(t, bytes.Equal(src, b), "the peer got different bytes (first %d were written inline)", written)
	case <-time.After(20 * time.Second):
		t.Fatal("peer did not get the stream")
	}
}

// TestWaitersDriveOneLink: a goroutine waiting on the send CQ and another
// on the receive CQ of the same QP, while the peer's waiter drives its own
// end, all get their completions (one drives, the other parks and is woken
// by the driver's pushes or the reader goroutine).
func TestWaitersDriveOneLink(t *testing.T) {
	for _, g := range []struct {
		name  string
		grace time.Duration
	}{
		{"default", 0},
		// The reader goroutine takes the token back at once after every
		// wait, so that nearly every Wait has to take it from the reader.
		{"eager-reader", time.Nanosecond},
		{"no-driving", -1},
	} {
		t.Run(g.name, func(t *testing.T) {
			o := testOptions()
			o.PollGrace = g.grace
			testWaitersDriveOneLink(t, o)
		})
		t.Run(g.name+"/poll-spin", func(t *testing.T) {
			o := testOptions()
			o.PollGrace, o.PollSpin = g.grace, 100*time.Microsecond
			testWaitersDriveOneLink(t, o)
		})
	}
}

func testWaitersDriveOneLink(t *testing.T, o Options) {
	const n = 300
	a, b := bigPair(t, o, 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
	}
	imm := func(from, to *side2, i int) verbs.SendWR {
		return verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWriteWithImm, Imm: uint32(i), Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(from.mr, 0, 8)}, RemoteAddr: to.mr.Addr(), RKey: to.mr.RKey()}
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	reap := func(cq verbs.CQ, what string) {
		defer wg.Done()
		for i := range n {
			wc, err := waitCtx(ctx, cq)
			if err == nil && wc.Status != verbs.StatusSuccess {
				err = fmt.Errorf("status %v", wc.Status)
			}
			if err != nil {
				errs <- fmt.Errorf("%s, completion %d: %w", what, i, err)
				return
			}
		}
	}
	wg.Add(4)
	go reap(a.cq, "a send")
	go reap(a.rcq, "a recv")
	go reap(b.cq, "b send")
	go reap(b.rcq, "b recv")
	for i := range n {
		require.NoError(t, a.qp.PostSend(imm(a, b, i)))
		require.NoError(t, b.qp.PostSend(imm(b, a, i)))
		if i%50 == 0 {
			// A pause in the stream, not synchronisation: the waiters run
			// dry, park, and drive by turns when it resumes.
			time.Sleep(time.Millisecond)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// TestManyWaitersOneCQ: several goroutines wait on one CQ at once; every
// completion reaches exactly one of them.
func TestManyWaitersOneCQ(t *testing.T) {
	const waiters, n = 4, 400
	a, b := bigPair(t, testOptions(), 4096)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range n {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
	}
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var wc [1]verbs.WC
			for {
				if b.rcq.Poll(wc[:]) == 1 {
					mu.Lock()
					assert.False(t, seen[wc[0].ID], "completion %d handed out twice", wc[0].ID)
					seen[wc[0].ID] = true
					done := len(seen) == n
					mu.Unlock()
					if done {
						close(stop)
					}
					continue
				}
				wctx, wcancel := context.WithTimeout(ctx, 50*time.Millisecond)
				err := b.rcq.Wait(wctx)
				wcancel()
				select {
				case <-stop:
					return
				default:
				}
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					assert.NoError(t, err)
					return
				}
				if ctx.Err() != nil {
					return
				}
			}
		}()
	}
	for i := range n {
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWriteWithImm, Imm: uint32(i),
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if i%64 == 63 || i == n-1 {
			wr.Flags = verbs.SendSignaled
		}
		require.NoError(t, a.qp.PostSend(wr))
		if wr.Flags != 0 {
			wc, err := waitCtx(ctx, a.cq)
			require.NoError(t, err)
			require.Equal(t, verbs.StatusSuccess, wc.Status)
		}
	}
	wg.Wait()
	require.Len(t, seen, n)
}

// TestDriveCancelThenNobodyPolls: a Wait that drives the link returns when
// its ctx ends (cancelled or past its deadline); afterwards, with nobody
// waiting, the reader goroutine serves the link again: a WRITE_WITH_IMM
// is received and an RDMA READ of this side is answered.
func TestDriveCancelThenNobodyPolls(t *testing.T) {
	o := testOptions()
	o.PollGrace = 5 * time.Millisecond
	a, b := bigPair(t, o, 4096)
	works2(t, a, b)

	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- b.rcq.Wait(ctx) }()
	awaitPoller(t, b.qp)
	cancel()
	select {
	case err := <-res:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(5 * time.Second):
		t.Fatal("Wait did not return after its ctx was cancelled")
	}
	dctx, dcancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer dcancel()
	_, err := waitCtx(dctx, b.rcq)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// Nobody waits at b from here on.
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 77}))
	copy(b.mr.Bytes()[64:], "served by the reader")
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWriteWithImm, Imm: 5, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 64, 20)}, RemoteAddr: b.mr.Addr() + 64, RKey: b.mr.RKey()}))
	require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
	require.Equal(t, "served by the reader", string(a.mr.Bytes()[64:84]))
	var wc [1]verbs.WC
	require.Eventually(t, func() bool { return b.rcq.Poll(wc[:]) > 0 }, 5*time.Second, time.Millisecond,
		"the receive never completed with nobody waiting")
	require.Equal(t, uint64(77), wc[0].ID)
	require.Equal(t, uint32(5), wc[0].Imm)
}

// TestDriveCQClosed: closing the CQ wakes with ErrClosed the goroutine that
// drives its link and those parked beside it.
func TestDriveCQClosed(t *testing.T) {
	const waiters = 3
	a, b := bigPair(t, testOptions(), 4096)
	works2(t, a, b)
	res := make(chan error, waiters)
	for range waiters {
		go func() { res <- b.rcq.Wait(context.Background()) }()
	}
	// One drives the link, the others park beside it.
	awaitPoller(t, b.qp)
	require.Eventually(t, func() bool {
		parked := 0
		for _, g := range stacks.All() {
			if strings.Contains(g.Stack, "TestDriveCQClosed") && strings.Contains(g.Stack, "(*CQ).Wait") &&
				!strings.Contains(g.Stack, "Drive(") && g.State == "select" {
				parked++
			}
		}
		return parked == waiters-1
	}, 5*time.Second, time.Millisecond, "waiters parked")
	require.NoError(t, b.rcq.Close())
	for range waiters {
		select {
		case err := <-res:
			require.ErrorIs(t, err, verbs.ErrClosed)
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not return after its CQ was closed")
		}
	}
}

// TestDriveLinkLost: a goroutine driving the link when the peer goes away
// gets the flushed completions.
func TestDriveLinkLost(t *testing.T) {
	a, b := bigPair(t, testOptions(), 4096)
	works2(t, a, b)
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 5}))
	res := make(chan error, 1)
	var got verbs.WC
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var err error
		got, err = waitCtx(ctx, b.rcq)
		res <- err
	}()
	awaitPoller(t, b.qp)
	require.NoError(t, a.dev.Close())
	select {
	case err := <-res:
		require.NoError(t, err)
		require.Equal(t, uint64(5), got.ID)
		require.Equal(t, verbs.StatusWRFlushErr, got.Status)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the peer went away")
	}
}

// TestHeldBackAckArrives: the ACK a waiter holds back (to send it with its
// next frame) reaches the requester even when the waiter's program then
// neither sends nor waits: the reader goroutine sends it when it resumes.
func TestHeldBackAckArrives(t *testing.T) {
	o := testOptions()
	o.PollGrace = 20 * time.Millisecond
	a, b := bigPair(t, o, 4096)
	works2(t, a, b)
	for round := range 3 {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(round)}))
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := waitCtx(ctx, b.rcq) // drives b's link, then goes quiet
			got <- err
		}()
		awaitPoller(t, b.qp) // b's waiter takes the socket
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(round), Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
		require.NoError(t, <-got)
		wc := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint64(round), wc.ID)
	}
}

// fakeTarget is a side with a remotely writable MR of n bytes, connected
// to a fake peer (the returned connection, closed when the test ends) that
// writes hand-made frames.
func fakeTarget(t *testing.T, n int) (*side, verbs.MR, net.Conn) {
	t.Helper()
	return fakeTargetWith(t, testOptions(), n, verbs.AccessRemoteWrite)
}

// fakeTargetWith is fakeTarget on a device opened with o, its MR open to
// the remote access given.
func fakeTargetWith(t *testing.T, o Options, n int, remote verbs.Access) (*side, verbs.MR, net.Conn) {
	t.Helper()
	dev := openDev(t, o)
	a := newSideOn(t, dev)
	mr, err := a.pd.AllocMR(n, verbs.AccessLocalWrite|remote)
	require.NoError(t, err)
	c := fakePeer(t, dev, a.qp, o.Token)
	t.Cleanup(func() { c.Close() })
	return a, mr, c
}

// attachedLink waits for q's connection and returns it, for the tests
// that look at a link's state.
func attachedLink(t *testing.T, q verbs.QP) *link {
	t.Helper()
	var l *link
	require.Eventually(t, func() bool {
		l, _ = q.(*softrc.QP).Link().(*link)
		return l != nil
	}, 5*time.Second, time.Millisecond)
	return l
}

// spinningTarget is fakeTargetWith over a device whose waiters poll their
// sockets for spin (Options.PollSpin), with its attached link. The spin is
// Linux-only: elsewhere the test is skipped.
func spinningTarget(t *testing.T, spin time.Duration, n int) (*side, verbs.MR, net.Conn, *link) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the spin is Linux-only")
	}
	o := testOptions()
	o.PollSpin = spin
	a, mr, c := fakeTargetWith(t, o, n, verbs.AccessRemoteWrite)
	return a, mr, c, attachedLink(t, a.qp)
}

// awaitPoller waits until a CQ waiter drives q's link itself (the state the
// sleeps of these tests used to hope for) and returns the link.
func awaitPoller(t *testing.T, q verbs.QP) *link {
	t.Helper()
	l := attachedLink(t, q)
	require.Eventually(t, func() bool { return l.holder.Load() == holderPoller }, 5*time.Second, time.Millisecond, "no waiter drives the link")
	return l
}

// writeImmFrame is a WRITE_WITH_IMM frame (sequence number seq) of size
// bytes into the start of mr, its payload a pattern seeded by imm.
func writeImmFrame(q verbs.QP, mr verbs.MR, seq uint32, size int, imm uint32) []byte {
	f := make([]byte, HeaderLen+size)
	EncodeHeader(f, &softrc.Header{Op: softrc.FrameWriteImm, QPN: q.Num(), Seq: seq, Len: uint32(size),
		RAddr: mr.Addr(), RKey: mr.RKey(), Imm: imm})
	for i := range size {
		f[HeaderLen+i] = byte(i*7 + int(imm))
	}
	return f
}

// TestDriveHonoursCtxMidFrame: a waiter that drives the link returns when
// its ctx ends even while a frame is half received (the peer stalls in
// the middle of it), small or larger than the read buffer; the frame
// completes once the rest arrives.
func TestDriveHonoursCtxMidFrame(t *testing.T) {
	for _, n := range []int{1000, 200 << 10} {
		t.Run(fmt.Sprintf("bytes=%d", n), func(t *testing.T) {
			a, mr, c := fakeTarget(t, n)
			require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
			frame := writeImmFrame(a.qp, mr, 0, n, 42)
			// The waiter takes the socket first, then half the frame comes.
			// The 50 ms only give the waiter a head start: the test holds
			// whether it is already polling or reads the half frame when it
			// gets there. (Waiting for it to be seen polling, awaitPoller,
			// missed it in 4 of 15 runs and in a CI-like run: it may be
			// parked in the poller by then.)
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- a.cq.Wait(ctx) }()
			time.Sleep(50 * time.Millisecond)
			half := HeaderLen + n/2
			_, err := c.Write(frame[:half])
			require.NoError(t, err)
			select {
			case err := <-res:
				require.ErrorIs(t, err, context.DeadlineExceeded)
			case <-time.After(5 * time.Second):
				t.Fatal("Wait overran its ctx while a frame was half received")
			}
			_, err = c.Write(frame[half:])
			require.NoError(t, err)
			wc := wait(t, a.cq)
			require.Equal(t, verbs.StatusSuccess, wc.Status)
			require.Equal(t, uint32(42), wc.Imm)
			require.Equal(t, uint32(n), wc.ByteLen)
			require.True(t, bytes.Equal(frame[HeaderLen:], mr.Bytes()[:n]), "payload not placed intact")
		})
	}
}

// TestDriveWholeLargeFrames: a waiter receives frames larger than its read
// buffer itself once they are all queued in the socket (awaitQueued): frames
// that arrive in pieces, with pauses, are placed intact; small frames after
// them still arrive (the socket's low-water mark is reset); and once the
// connection's window has grown, a frame half received when the waiter's
// ctx ends is still left intact for whoever reads next.
func TestDriveWholeLargeFrames(t *testing.T) {
	const n = 200 << 10
	a, mr, c := fakeTarget(t, n)
	seq := uint32(0)
	frame := func(size int, imm uint32) []byte {
		seq++
		return writeImmFrame(a.qp, mr, seq-1, size, imm)
	}
	check := func(f []byte, imm uint32) {
		t.Helper()
		wc := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, imm, wc.Imm)
		require.Equal(t, uint32(len(f)-HeaderLen), wc.ByteLen)
		require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:len(f)-HeaderLen]), "frame %d not placed intact", imm)
	}
	for round := range 40 {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(round)}))
		f := frame(n, uint32(round))
		wrote := make(chan error, 1)
		go func() {
			// The header and a third first, the rest a little later: the
			// waiter sees the frame's size and waits for the rest. The
			// pause is the arrival in pieces under test, not
			// synchronisation.
			third := HeaderLen + n/3
			if _, err := c.Write(f[:third]); err != nil {
				wrote <- err
				return
			}
			time.Sleep(time.Millisecond)
			_, err := c.Write(f[third:])
			wrote <- err
		}()
		check(f, uint32(round))
		require.NoError(t, <-wrote)
		// Small frames right after: a low-water mark left set would
		// strand them.
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1000}))
		s := frame(8, uint32(1000+round))
		_, err := c.Write(s)
		require.NoError(t, err)
		check(s, uint32(1000+round))
	}
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
	f := frame(n, 7)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.Write(f[:HeaderLen+n/2])
	require.NoError(t, err)
	require.ErrorIs(t, a.cq.Wait(ctx), context.DeadlineExceeded)
	_, err = c.Write(f[HeaderLen+n/2:])
	require.NoError(t, err)
	check(f, 7)
}

// TestDrivePollSpin: a waiter that polls its socket before sleeping
// (Options.PollSpin, here far longer than the test) still gets a message
// that arrives while it polls, gives up when its ctx ends, and leaves the
// link to the reader goroutine afterwards; and so does one that gives the
// CPU away between polls (PollYield, for ranks that outnumber the CPUs).
func TestDrivePollSpin(t *testing.T) {
	t.Run("spin", func(t *testing.T) { testDrivePollSpin(t, false) })
	t.Run("yield", func(t *testing.T) { testDrivePollSpin(t, true) })
}

func testDrivePollSpin(t *testing.T, yield bool) {
	o := testOptions()
	o.PollSpin, o.PollYield = time.Hour, yield
	a, b := bigPair(t, o, 4096)
	works2(t, a, b)

	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 9}))
	got := make(chan verbs.WC, 1)
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		wc, err := waitCtx(ctx, b.rcq)
		if err != nil {
			errc <- err
			return
		}
		got <- wc
	}()
	// The waiter drives the link itself and, not having slept in the
	// kernel, keeps polling (for an hour) when the frame comes.
	l := awaitPoller(t, b.qp)
	before := l.spinReads.Load()
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWriteWithImm, Imm: 42, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	select {
	case wc := <-got:
		require.Equal(t, uint64(9), wc.ID)
		require.Equal(t, uint32(42), wc.Imm)
	case err := <-errc:
		t.Fatal(err)
	case <-time.After(5 * time.Second):
		t.Fatal("a message that arrived while the waiter polled was not delivered")
	}
	if runtime.GOOS == "linux" { // elsewhere there is no poll (read_other.go)
		// Delivered by the poll's non-blocking reads, not by a blocking
		// read after the poll gave up (or never ran).
		require.Greater(t, l.spinReads.Load()-before, int32(0), "the frame was not read by polling the socket")
	}
	require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)

	// A ctx that ends during the poll ends the wait at once.
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- b.rcq.Wait(ctx) }()
	awaitPoller(t, b.qp)
	start := time.Now()
	cancel()
	select {
	case err := <-res:
		require.ErrorIs(t, err, context.Canceled)
		require.Less(t, time.Since(start), 2*time.Second)
	case <-time.After(5 * time.Second):
		t.Fatal("Wait kept polling after its ctx was cancelled")
	}
	works2(t, a, b) // and the link still works both ways
}

// TestHeldAcksWhileStreaming: a waiter polling its socket holds back the
// ACKs of frames that stream in (see pollFrame), but not past the stream:
// once nothing more arrives it sends them, although its poll goes on (here
// for an hour), so the requester's completions all come and it can go on.
// First with a fake peer that sends the frames in one write (they surely
// stream in): the ACKs leave in a few sends, not one per frame, and all
// reach the peer. Then between two devices, as users run it.
func TestHeldAcksWhileStreaming(t *testing.T) {
	o := testOptions()
	o.PollSpin = time.Hour
	t.Run("fake", func(t *testing.T) { heldAcksFake(t, o) })
	t.Run("pair", func(t *testing.T) { heldAcksPair(t, o) })
}

func heldAcksFake(t *testing.T, o Options) {
	const n, size = ackHoldMax - 3, 1000 // fewer than the hold limit: sent when the stream stops
	a, mr, c := fakeTargetWith(t, o, size, verbs.AccessRemoteWrite)
	l := attachedLink(t, a.qp)
	for i := range n + 1 {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	got := make(chan int, n+1)
	errc := make(chan error, 1)
	go func() {
		for i := range n + 1 { // one more than come: the poll goes on
			wc, err := waitCtx(ctx, a.cq)
			if err == nil && (wc.Status != verbs.StatusSuccess || wc.ID != uint64(i)) {
				err = fmt.Errorf("receive %d: %v (id %d)", i, wc.Status, wc.ID)
			}
			if err != nil {
				errc <- err
				return
			}
			got <- i
		}
		errc <- nil
	}()
	require.Eventually(t, func() bool { return l.holder.Load() == holderPoller }, 5*time.Second, time.Millisecond, "no waiter drives the link")
	const fl = HeaderLen + size
	var stream []byte
	for i := range n {
		f := make([]byte, fl)
		EncodeHeader(f, &softrc.Header{Op: softrc.FrameWriteImm, Flags: softrc.FlagAckReq, QPN: a.qp.Num(), Seq: uint32(i), Len: size,
			RAddr: mr.Addr(), RKey: mr.RKey(), Imm: uint32(i)})
		stream = append(stream, f...)
	}
	// The frames stream in: each write ends halfway through the next
	// frame, and the next write comes once the waiter has the frame
	// before it. So whenever the waiter has handled a frame, the next one
	// is arriving, and it holds the ACK back.
	before := l.respSends.Load()
	for i := range n {
		from, to := max(0, i*fl-fl/2), min(len(stream), (i+1)*fl+fl/2)
		_, err := c.Write(stream[from:to])
		require.NoError(t, err)
		select {
		case j := <-got:
			require.Equal(t, i, j)
		case err := <-errc:
			t.Fatalf("frame %d: %v", i, err)
		case <-time.After(10 * time.Second):
			t.Fatalf("frame %d never completed", i)
		}
	}
	// The ACKs come in order up to the last frame's; those held together
	// leave as one (an ACK covers the earlier ones: see respond).
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	hb := make([]byte, HeaderLen)
	acks := 0
	for last := int64(-1); last < n-1; acks++ {
		_, err := io.ReadFull(c, hb)
		require.NoError(t, err, "after the ACK of frame %d of %d: the ACKs stayed with the polling waiter", last, n)
		h, err := DecodeHeader(hb, 1<<30)
		require.NoError(t, err)
		require.Equal(t, softrc.FrameAck, h.Op, "response %d", acks)
		require.Greater(t, int64(h.Seq), last, "response %d", acks)
		last = int64(h.Seq)
	}
	// One send once the stream stopped (allow a few more, should the
	// kernel split a write), not one per frame.
	sends := l.respSends.Load() - before
	assert.Less(t, sends, int32(n/2), "%d sends for the ACKs of %d frames that streamed in: not held back", sends, n)
	assert.Less(t, acks, n/2, "%d ACK frames for %d frames that streamed in: not merged", acks, n)
	select {
	case err := <-errc:
		t.Fatalf("the waiter returned (%v) before the extra receive came", err)
	default:
	}
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}

func heldAcksPair(t *testing.T, o Options) {
	a, b := bigPair(t, o, 4096)
	works2(t, a, b)
	const n = ackHoldMax - 3 // fewer than the hold limit: sent when the stream stops
	for i := range n + 1 {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
	}
	errc := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for i := range n + 1 {
			wc, err := waitCtx(ctx, b.rcq)
			if err == nil && (wc.Status != verbs.StatusSuccess || wc.ID != uint64(i)) {
				err = fmt.Errorf("receive %d: %v (id %d)", i, wc.Status, wc.ID)
			}
			if err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	awaitPoller(t, b.qp) // b's waiter polls
	post := func(i int) {
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWriteWithImm, Imm: uint32(i), Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 1000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	}
	for i := range n {
		post(i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range n {
		wc, err := waitCtx(ctx, a.cq)
		require.NoError(t, err, "completion %d of %d: the ACKs stayed with the polling waiter", i, n)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
	}
	post(n)
	require.NoError(t, <-errc)
	require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
}

// TestReadResponsesLeaveTogether: READ requests that arrive together (one
// segment, as a READ in pieces does) are answered in one write, not one
// per request, whether the reader goroutine or a polling waiter handles
// them; every response is intact and in order.
func TestReadResponsesLeaveTogether(t *testing.T) {
	const pieces, piece = 8, 32 << 10
	for _, waiter := range []bool{false, true} {
		t.Run(fmt.Sprintf("waiter=%v", waiter), func(t *testing.T) {
			a, mr, c := fakeTargetWith(t, testOptions(), pieces*piece, verbs.AccessRemoteRead)
			src := mr.Bytes()
			for i := range src {
				src[i] = byte(i*13 + i>>9)
			}
			l := attachedLink(t, a.qp)
			if waiter {
				// A waiter that holds the socket when the requests come.
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan struct{})
				t.Cleanup(func() { cancel(); <-done })
				go func() { defer close(done); _ = a.cq.Wait(ctx) }()
				require.Eventually(t, func() bool { return l.holder.Load() == holderPoller }, 5*time.Second, time.Millisecond)
			}
			before := l.urgentSends.Load()
			var reqs []byte
			for i := range pieces {
				f := make([]byte, HeaderLen)
				EncodeHeader(f, &softrc.Header{Op: softrc.FrameReadReq, QPN: a.qp.Num(), Seq: uint32(i), Len: piece,
					RAddr: mr.Addr() + uint64(i*piece), RKey: mr.RKey()})
				reqs = append(reqs, f...)
			}
			_, err := c.Write(reqs)
			require.NoError(t, err)
			require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
			hb := make([]byte, HeaderLen)
			body := make([]byte, piece)
			for i := range pieces {
				_, err := io.ReadFull(c, hb)
				require.NoError(t, err, "response %d", i)
				h, err := DecodeHeader(hb, 1<<30)
				require.NoError(t, err)
				require.Equal(t, softrc.FrameReadResp, h.Op, "response %d", i)
				require.Equal(t, uint32(i), h.Seq)
				require.Equal(t, uint32(piece), h.Len)
				_, err = io.ReadFull(c, body)
				require.NoError(t, err)
				require.True(t, bytes.Equal(src[i*piece:(i+1)*piece], body), "response %d has other bytes", i)
			}
			// One write when the requests came in one read; allow a second
			// should the kernel have split them.
			assert.LessOrEqual(t, l.urgentSends.Load()-before, int32(2), "responses were written one by one")
		})
	}
}

// TestDriveSpinReadsFrames: a polling waiter reads small frames with
// non-blocking reads as they arrive (spinFill), assembling one that comes
// in pieces, and a peer that closes the connection while it polls fails
// the wait rather than leaving it polling.
func TestDriveSpinReadsFrames(t *testing.T) {
	a, mr, c, l := spinningTarget(t, time.Hour, 4096)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	wait := func() {
		go func() {
			wc, err := waitCtx(ctx, a.cq)
			if err == nil && wc.Status != verbs.StatusSuccess {
				err = fmt.Errorf("completion %v", wc.Status)
			}
			res <- err
		}()
		require.Eventually(t, func() bool { return l.holder.Load() == holderPoller }, 5*time.Second, time.Millisecond)
	}
	for round := range 3 {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(round)}))
		wait()
		before := l.spinReads.Load()
		frame := writeImmFrame(a.qp, mr, uint32(round), 1000, uint32(7+round))
		// In three pieces, the first shorter than a header, each sent once
		// the waiter has read the one before.
		parts := [][]byte{frame[:5], frame[5 : HeaderLen+300], frame[HeaderLen+300:]}
		for i, part := range parts {
			reads := l.spinReads.Load()
			_, err := c.Write(part)
			require.NoError(t, err)
			if i < len(parts)-1 {
				require.Eventually(t, func() bool { return l.spinReads.Load() > reads }, 5*time.Second, time.Millisecond,
					"round %d: piece %d was not read as it came", round, i)
			}
		}
		require.NoError(t, <-res, "round %d", round)
		require.True(t, bytes.Equal(frame[HeaderLen:], mr.Bytes()[:1000]), "round %d: payload not placed intact", round)
		assert.GreaterOrEqual(t, l.spinReads.Load()-before, int32(3), "round %d: the pieces were not read as they came", round)
	}

	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 9}))
	wait()
	require.NoError(t, c.Close())
	select {
	case err := <-res:
		require.Error(t, err, "the wait returned without an error after the peer closed")
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter kept polling a closed connection")
	}
}

// TestDriveQueuedHoldsAcks: a crowded waiter that takes the frames that
// arrived (DriveQueued) holds their ACKs back, to ride on the next frame
// its side sends, rather than write them before it goes on to its
// completion; with nothing sent after, they still reach the requester
// (ackFlush, PollGrace later). And it reads the socket once for a frame
// that came alone: a read that took less than it had room for emptied the
// socket, so another would only find nothing (EAGAIN, a system call).
func TestDriveQueuedHoldsAcks(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a look into the socket (socketQueued), Linux only")
	}
	o := testOptions()
	o.PollGrace = maxPollGrace // the reader goroutine stays away that long
	a, b := bigPair(t, o, 4096)
	works2(t, a, b)
	l := attachedLink(t, b.qp)
	rcq := b.rcq.(*softrc.CQ)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held := false
	for round := 0; round < 50 && !held; round++ {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(round)}))
		// Take the socket from the reader goroutine (nothing is queued):
		// it stays away for PollGrace.
		_, _ = l.DriveQueued(ctx, rcq)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(round), Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
		var wc [1]verbs.WC
		for rcq.Poll(wc[:]) == 0 {
			if n, ok := l.socketQueued(); ok && n > 0 {
				before, empty := l.respSends.Load(), l.emptyReads.Load()
				if took, _ := l.DriveQueued(ctx, rcq); took {
					held = l.respSends.Load() == before
					require.True(t, held, "DriveQueued wrote the ACK at once")
					require.Equal(t, empty, l.emptyReads.Load(), "DriveQueued read the emptied socket again")
				}
			}
			runtime.Gosched()
			require.NoError(t, ctx.Err())
		}
		require.Equal(t, verbs.StatusSuccess, wc[0].Status)
		// The requester gets its ACK though b sends nothing more.
		got := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, got.Status)
		require.Equal(t, uint64(round), got.ID)
	}
	require.True(t, held, "the reader goroutine took every frame first")
}

// TestFenceWriteAckedAtOnce: the ACK of a WRITE of no bytes with an ACK
// request (a fence: its requester waits for it to learn that the writes
// before it are placed) is sent the way an atomic's answer is, as soon as
// no whole frame is buffered (urgentSends), while the ACK of a WRITE with
// data goes the way of plain ACKs: with a later frame, or when the reading
// side is about to wait.
func TestFenceWriteAckedAtOnce(t *testing.T) {
	a, mr, c := fakeTarget(t, 64)
	l := attachedLink(t, a.qp)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	ack := func(n uint32) uint32 {
		f := make([]byte, HeaderLen+int(n))
		seq := uint32(0)
		if n == 0 {
			seq = 1
		}
		EncodeHeader(f, &softrc.Header{Op: softrc.FrameWrite, Flags: softrc.FlagAckReq, QPN: a.qp.Num(), Seq: seq, Len: n,
			RAddr: mr.Addr(), RKey: mr.RKey()})
		copy(f[HeaderLen:], "placed!!"[:n])
		_, err := c.Write(f)
		require.NoError(t, err)
		hb := make([]byte, HeaderLen)
		_, err = io.ReadFull(c, hb)
		require.NoError(t, err)
		h, err := DecodeHeader(hb, 1<<30)
		require.NoError(t, err)
		require.Equal(t, softrc.FrameAck, h.Op)
		return h.Seq
	}
	before := l.urgentSends.Load()
	require.Equal(t, uint32(0), ack(8))
	assert.Equal(t, before, l.urgentSends.Load(), "the ACK of a WRITE with data was sent like an atomic's answer")
	require.Equal(t, uint32(1), ack(0))
	assert.Equal(t, before+1, l.urgentSends.Load(), "the fence's ACK went the way of plain ACKs")
	assert.Equal(t, "placed!!", string(mr.Bytes()[:8]))
}
