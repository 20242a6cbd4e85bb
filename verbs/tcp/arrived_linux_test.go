package tcp

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// Tests of softrc.CQ.Arrived on tcp CQs (link.DriveQueued): a poller of a
// CQ that several connections feed, which keeps its thread (p2p's crowded
// policy), handles what has arrived on its own goroutine and never waits
// for the network. Incoming looks into the socket, which only Linux does.

// arrivedOptions keep the reader goroutine out for the longest grace, so
// that the frames after a poller's first are the poller's.
func arrivedOptions() Options {
	o := testOptions()
	o.PollGrace = maxPollGrace
	return o
}

// fedCQ is a CQ fed by two connections: b's QPs 0 and 1 (send and receive
// on cq) are connected to a's, which each have a CQ of their own.
type fedCQ struct {
	a, b []*side
	cq   *softrc.CQ
}

func newFedCQ(t *testing.T, o Options) *fedCQ {
	t.Helper()
	da, db := openDev(t, o), openDev(t, o)
	f := &fedCQ{}
	bcq, err := db.CreateCQ(256)
	require.NoError(t, err)
	f.cq = bcq.(*softrc.CQ)
	pd, err := db.AllocPD()
	require.NoError(t, err)
	for range 2 {
		a := newSideOn(t, da)
		b := &side{dev: db, pd: pd, cq: bcq}
		b.qp, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: bcq, RecvCQ: bcq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}})
		require.NoError(t, err)
		b.mr, err = pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		require.NoError(t, err)
		connectPair(t, a, b, verbs.DefaultConnectOptions())
		requireWorks(t, a, b)
		f.a, f.b = append(f.a, a), append(f.b, b)
	}
	return f
}

// arrivedNow is one CQ.Arrived that must return, whatever has arrived:
// its ctx bounds only a wait for the reader goroutine to hand the
// connection over; a wait for the network would outlast it.
func arrivedNow(t *testing.T, cq *softrc.CQ) (took, waiting bool) {
	t.Helper()
	type result struct{ took, waiting bool }
	res := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		took, waiting := cq.Arrived(ctx)
		res <- result{took, waiting}
	}()
	select {
	case r := <-res:
		return r.took, r.waiting
	case <-time.After(20 * time.Second):
		t.Fatal("Arrived waited for the network")
		return false, false
	}
}

// takeArrived calls Arrived until it takes something (took) or a
// completion shows up without it (the reader goroutine read the frame
// first), and returns the completion, whether Arrived took it and what
// that call reported waiting. A completion must be in the CQ as soon as
// Arrived returns having taken its frame.
func takeArrived(t *testing.T, cq *softrc.CQ) (wc verbs.WC, took, waiting bool) {
	t.Helper()
	var wcs [1]verbs.WC
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
		took, waiting = arrivedNow(t, cq)
		n := cq.Poll(wcs[:])
		if took {
			require.Equal(t, 1, n, "Arrived took a frame but its completion is not in the CQ")
			return wcs[0], true, waiting
		}
		if n == 1 {
			return wcs[0], false, false
		}
		runtime.Gosched()
	}
	t.Fatal("no completion: neither Arrived nor the reader goroutine took the frame")
	return verbs.WC{}, false, false
}

// TestArrivedTakesFrames: what has arrived on a connection of a CQ that
// several connections feed is handled by Arrived on the caller's
// goroutine: its completion is in the CQ when Arrived returns, with no
// hand-off from the link's reader goroutine; and the sender's completions
// come.
func TestArrivedTakesFrames(t *testing.T) {
	f := newFedCQ(t, arrivedOptions())
	const rounds = 30
	took := 0
	for round := range rounds {
		i := round % 2
		a, b := f.a[i], f.b[i]
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(round), SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 8)}}))
		copy(a.mr.Bytes(), fmt.Sprintf("round%03d", round))
		// An Arrived with nothing to take first takes the socket from the
		// reader goroutine, which then stays out for the grace, so the
		// frame waits for the next Arrived. Without it the reader, back
		// when the grace ended with the held ACKs' flush (as the last
		// round waited for), raced that call and once won every round.
		for deadline := time.Now().Add(20 * time.Second); ; runtime.Gosched() {
			if _, left := arrivedNow(t, f.cq); !left {
				break
			}
			require.True(t, time.Now().Before(deadline), "Arrived never got the socket from the reader goroutine")
		}
		require.NoError(t, a.qp.PostSend(sendWR(uint64(round), a)))
		wc, byArrived, _ := takeArrived(t, f.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status, "round %d", round)
		require.Equal(t, uint64(round), wc.ID)
		require.Equal(t, fmt.Sprintf("round%03d", round), string(b.mr.Bytes()[:8]))
		if byArrived {
			took++
		}
		send := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, send.Status, "round %d", round)
		require.Equal(t, uint64(round), send.ID)
	}
	t.Logf("took %d of %d", took, rounds)
	assert.Positive(t, took, "Arrived took none of %d frames: the reader goroutine read them all", rounds)
}

// TestArrivedAcksReachSender: the ACKs of the frames an Arrived takes
// reach the sender although its side sends nothing else and a poller
// keeps taking its frames: that poller may be waiting for another
// device's completions, and while pollers keep taking the frames the
// reader goroutine, which would send them before it blocks, stays out.
// They are held back to ride on the next frame (TestDriveQueuedHoldsAcks)
// and otherwise leave on a timer of their own (ackFlush). Once they
// waited for the reader goroutine, and a 2x2 alltoall failed with
// RETRY_EXC_ERR.
func TestArrivedAcksReachSender(t *testing.T) {
	f := newFedCQ(t, arrivedOptions())
	a, b := f.a[0], f.b[0]
	const rounds, burst = 10, 4
	checked := 0
	for round := range rounds {
		for i := range burst {
			require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(i), SGL: []verbs.SGE{verbs.SGEOf(b.mr, 8*i, 8)}}))
		}
		for i := range burst {
			require.NoError(t, a.qp.PostSend(sendWR(uint64(i), a)))
		}
		var wc [burst]verbs.WC
		for got := 0; got < burst; {
			if took, _ := arrivedNow(t, f.cq); took {
				checked++
			}
			got += f.cq.Poll(wc[got:])
			runtime.Gosched()
		}
		for i := range burst {
			require.Equal(t, verbs.StatusSuccess, wc[i].Status, "round %d", round)
		}
		// The poller keeps polling (a crowded p2p waiter does) while the
		// sender waits for its completions.
		stop := make(chan struct{})
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				f.cq.Arrived(ctx)
				cancel()
				runtime.Gosched()
			}
		}()
		for i := range burst {
			send := wait(t, a.cq)
			require.Equal(t, verbs.StatusSuccess, send.Status, "round %d, send %d", round, i)
		}
		close(stop)
		<-polled
	}
	assert.Positive(t, checked, "Arrived took no frames: nothing was checked")
}

// TestArrivedPastReadDeadline: a read deadline in the past left on the
// connection (how a poller interrupts the reader goroutine's blocked read,
// set when the reader had already left its read) does not fail the link
// when Arrived reads what is queued without blocking.
func TestArrivedPastReadDeadline(t *testing.T) {
	f := newFedCQ(t, arrivedOptions())
	a, b := f.a[0], f.b[0]
	l := attachedLink(t, b.qp)
	for round := range 20 {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: uint64(round), SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 8)}}))
		require.NoError(t, a.qp.PostSend(sendWR(uint64(round), a)))
		wc, _, _ := takeArrived(t, f.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status, "round %d", round)
		require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status, "round %d", round)
		// An interrupt that finds nobody to interrupt: the deadline stays.
		require.NoError(t, l.c.SetReadDeadline(aLongTimeAgo))
	}
	requireWorks(t, a, b)
}

// TestArrivedNeverWaits: Arrived handles the whole frames that are here
// and returns, leaving the rest of a frame that is still arriving to the
// link, and reports a frame larger than the read buffer as waiting (only
// the reader goroutine takes it); every frame completes intact once the
// rest comes.
func TestArrivedNeverWaits(t *testing.T) {
	const large = readBufSize + 4<<10
	for _, c := range []struct {
		name    string
		size    int // the second frame's payload
		part    int // how much of it comes first
		waiting bool
	}{
		{"part of a header", 100, 5, false},
		{"a header", 100, HeaderLen, false},
		{"half a payload", 1000, HeaderLen + 500, false},
		{"larger than the read buffer", large, HeaderLen + 1000, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, mr, conn := fakeTargetWith(t, arrivedOptions(), large, verbs.AccessRemoteWrite)
			cq := a.cq.(*softrc.CQ)
			// The first frame makes the poller the one who reads (the reader
			// goroutine stays out for PollGrace).
			require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
			_, err := conn.Write(writeImmFrame(a.qp, mr, 0, 8, 1))
			require.NoError(t, err)
			wc, _, _ := takeArrived(t, cq)
			require.Equal(t, verbs.StatusSuccess, wc.Status)

			// A whole frame and the start of the next arrive together.
			require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 2}))
			require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 3}))
			whole := writeImmFrame(a.qp, mr, 1, 8, 2)
			next := writeImmFrame(a.qp, mr, 2, c.size, 3)
			_, err = conn.Write(append(whole, next[:c.part]...))
			require.NoError(t, err)
			wc, byArrived, waiting := takeArrived(t, cq)
			require.Equal(t, verbs.StatusSuccess, wc.Status)
			require.Equal(t, uint32(2), wc.Imm)
			if byArrived {
				// Should the kernel have split the write, the next
				// Arrived sees the large frame's header.
				for i := 0; c.waiting && !waiting && i < 100; i++ {
					_, waiting = arrivedNow(t, cq)
				}
				assert.Equal(t, c.waiting, waiting, "Arrived's report of the bytes left to the link's goroutine")
			}
			_, err = conn.Write(next[c.part:])
			require.NoError(t, err)
			wc = wait(t, cq)
			require.Equal(t, verbs.StatusSuccess, wc.Status)
			require.Equal(t, uint32(3), wc.Imm)
			require.Equal(t, uint32(c.size), wc.ByteLen)
			require.Equal(t, next[HeaderLen:], mr.Bytes()[:c.size], "payload not placed intact")
		})
	}
}

// TestDriveQueuedReadsQueuedPayloadsInPlace: a frame within the read
// buffer whose payload of directMin or more is all queued (a crowded
// rendezvous's 128 KiB READ responses, a collective's steered SENDs) goes
// from the socket straight into place, not through the read buffer
// (bufCopied counts what is copied out of it), once large frames have
// been seen; one that arrives in pieces is placed intact all the same.
func TestDriveQueuedReadsQueuedPayloadsInPlace(t *testing.T) {
	// Over queuedDirectMin, within what a new connection's socket holds.
	const n, rounds = 100 << 10, 16
	a, mr, c := fakeTargetWith(t, arrivedOptions(), n, verbs.AccessRemoteWrite)
	l := attachedLink(t, a.qp)
	cq := a.cq.(*softrc.CQ)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	seq, imm := uint32(0), uint32(0)
	// send writes a frame of size bytes, in the pieces cuts gives (offsets
	// into it) with the link driven after each, and checks its
	// completion. It reports how many payload bytes went through the read
	// buffer while a frame written whole was taken, and whether this
	// poller took it (the reader goroutine may, on a slow run, once
	// maxPollGrace has passed).
	send := func(size int, cuts ...int) (copied int64, mine bool) {
		t.Helper()
		imm++
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(imm)}))
		frame := writeImmFrame(a.qp, mr, seq, size, imm)
		seq++
		f := frame
		for _, cut := range cuts {
			_, err := c.Write(f[:cut])
			require.NoError(t, err)
			f = f[cut:]
			// Drive what came. The reader goroutine, woken for a frame
			// half buffered, may be reading the rest itself, blocked until
			// it comes: a short ctx bounds the wait for the link.
			pctx, pcancel := context.WithTimeout(ctx, 50*time.Millisecond)
			l.DriveQueued(pctx, cq)
			pcancel()
			require.False(t, cq.Pending(), "a frame completed before its end arrived")
		}
		_, err := c.Write(f)
		require.NoError(t, err)
		if len(cuts) == 0 {
			require.Eventually(t, func() bool { return cq.Pending() || queuedIn(t, l) >= len(f) }, 5*time.Second, time.Millisecond)
			before := l.copiedBytes()
			mine, _ = l.DriveQueued(ctx, cq)
			copied = l.copiedBytes() - before
		}
		require.Eventually(t, func() bool { l.DriveQueued(ctx, cq); return cq.Pending() }, 5*time.Second, time.Millisecond)
		wc, err := waitCtx(ctx, a.cq)
		require.NoError(t, err)
		require.Equal(t, verbs.StatusSuccess, wc.Status, "frame of %d bytes: %v", size, wc)
		require.Equal(t, imm, wc.Imm)
		require.True(t, bytes.Equal(frame[HeaderLen:], mr.Bytes()[:size]), "frame of %d bytes not placed intact", size)
		return copied, mine
	}
	send(n) // a large frame seen
	var copied int64
	took := 0
	for range rounds {
		k, mine := send(n)
		if mine {
			copied += k
			took++
		}
		send(8)
	}
	t.Logf("this poller took %d of %d large frames whole, %d payload bytes of them copied out of the read buffer", took, rounds, copied)
	require.Greater(t, took, rounds/2, "the reader goroutine took the frames")
	assert.LessOrEqual(t, copied, int64(took*headerRead), "queued payloads went through the read buffer")
	for range 2 {
		send(n, HeaderLen-3, 3+1000) // in pieces: the header split, the payload's start, its rest
		send(8)
	}
}
