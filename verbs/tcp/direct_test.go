package tcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// TestPayloadsReadInPlace: once frames larger than the read buffer stream
// in, their payloads go from the socket straight into the registered
// memory, not through the read buffer (bufCopied counts what
// is copied out of it), whether the reader goroutine or a waiter reads;
// and frames of every size around the thresholds (directMin, spinFillMax,
// the read buffer, pollFrameMax, ProgressChunk), arriving in pieces that
// split headers and payloads, are placed intact with small frames between
// them.
func TestPayloadsReadInPlace(t *testing.T) {
	sizes := []int{0, 1, directMin - 1, directMin, directMin + 1, max(0, spinFillMax-HeaderLen), spinFillMax + 1,
		128 << 10, readBufSize - HeaderLen, readBufSize - HeaderLen + 1, readBufSize + 1,
		pollFrameMax - HeaderLen, pollFrameMax + 1, softrc.ProgressChunk + 1}
	most := 0
	for _, n := range sizes {
		most = max(most, n)
	}
	for _, mode := range []string{"reader", "waiter"} {
		t.Run(mode, func(t *testing.T) {
			o := testOptions()
			if mode == "reader" {
				o.PollGrace = -1 // the reader goroutine reads every frame
			}
			a, mr, c := fakeTargetWith(t, o, most, verbs.AccessRemoteWrite)
			l := attachedLink(t, a.qp)
			seq := uint32(0)
			send := func(n int, imm uint32, pieces bool) []byte {
				t.Helper()
				require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(imm)}))
				f := writeImmFrame(a.qp, mr, seq, n, imm)
				seq++
				wrote := make(chan error, 1)
				go func() {
					if !pieces {
						_, err := c.Write(f)
						wrote <- err
						return
					}
					// Split inside the header and inside the payload; the
					// pauses only make the pieces arrive apart, the test
					// holds however they arrive.
					cuts := []int{0, HeaderLen - 5, HeaderLen + n/3, len(f)}
					for i := 1; i < len(cuts); i++ {
						if cuts[i] <= cuts[i-1] {
							continue
						}
						if _, err := c.Write(f[cuts[i-1]:cuts[i]]); err != nil {
							wrote <- err
							return
						}
						time.Sleep(200 * time.Microsecond)
					}
					wrote <- nil
				}()
				wc := wait(t, a.cq)
				require.NoError(t, <-wrote)
				require.Equal(t, verbs.StatusSuccess, wc.Status, "frame of %d bytes", n)
				require.Equal(t, imm, wc.Imm)
				require.Equal(t, uint32(n), wc.ByteLen)
				require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:n]), "frame of %d bytes not placed intact", n)
				return f
			}
			imm := uint32(0)
			for _, pieces := range []bool{false, true} {
				for _, n := range sizes {
					for range 2 {
						imm++
						send(n, imm, pieces)
						imm++
						send(8, imm, pieces)
					}
				}
			}

			// A stream of frames larger than the read buffer (with small
			// ones between, as a rendezvous sends them): after the first,
			// nothing of their payloads may pass through the buffer but
			// what came with its header (at most headerRead bytes: see
			// sockReader.hdrOnly), and the 8-byte frames.
			const n, rounds = 256 << 10, 20
			imm++
			send(n, imm, false)
			before := l.copiedBytes()
			for range rounds {
				imm++
				send(n, imm, false)
				imm++
				send(8, imm, false)
			}
			copied := l.copiedBytes() - before
			t.Logf("%d of %d payload bytes copied out of the read buffer", copied, rounds*(n+8))
			assert.LessOrEqual(t, copied, int64(rounds*(8+headerRead)), "large payloads went through the read buffer")
		})
	}
}

// TestSpinBacksOff: a waiter whose spins keep running out before their frame
// comes (the peer answers far later than PollSpin) stops spinning on most
// waits (spinMissed), so it no longer burns a CPU the peer may need; every
// frame still arrives.
func TestSpinBacksOff(t *testing.T) {
	a, mr, c, l := spinningTarget(t, 200*time.Microsecond, 4096)
	const waits = 24
	before := l.spinMisses.Load()
	for i := range waits {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
		f := writeImmFrame(a.qp, mr, uint32(i), 100, uint32(i))
		wrote := make(chan error, 1)
		go func() {
			// A slow peer: the frame comes long after the spin ends. The
			// pause is the behaviour under test, not synchronisation.
			time.Sleep(20 * time.Millisecond)
			_, err := c.Write(f)
			wrote <- err
		}()
		wc := wait(t, a.cq)
		require.NoError(t, <-wrote)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint32(i), wc.Imm)
		require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:100]), "frame %d not placed intact", i)
	}
	misses := l.spinMisses.Load() - before
	t.Logf("%d of %d waits spun in vain", misses, waits)
	require.Positive(t, misses, "no wait spun")
	// Every wait spins without the backoff; with it, one in 1, 2, 4, ...
	// (a few more if a busy machine delays a waiter until its frame is in).
	assert.LessOrEqual(t, misses, int32(waits/2), "waits kept spinning in vain")
}

// TestSpinningWaiterReadsRestInPlace: a polling waiter that has buffered the
// start of a large frame and finds the rest queued in the socket reads that
// rest straight into place: only the start is copied out of the buffer.
func TestSpinningWaiterReadsRestInPlace(t *testing.T) {
	const n, first = 48 << 10, 1000 // over spinFillMax, within a new connection's window
	a, mr, c, l := spinningTarget(t, time.Hour, n)
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() {
		wc, err := waitCtx(ctx, a.cq)
		if err == nil && wc.Status != verbs.StatusSuccess {
			err = fmt.Errorf("completion %v", wc.Status)
		}
		res <- err
	}()
	require.Eventually(t, func() bool { return l.holder.Load() == holderPoller }, 5*time.Second, time.Millisecond)
	f := writeImmFrame(a.qp, mr, 0, n, 5)
	before, reads := l.copiedBytes(), l.spinReads.Load()
	_, err := c.Write(f[:HeaderLen+first])
	require.NoError(t, err)
	// The waiter reads the header and the start as they come (spinFill).
	require.Eventually(t, func() bool { return l.spinReads.Load() > reads }, 5*time.Second, time.Millisecond)
	_, err = c.Write(f[HeaderLen+first:])
	require.NoError(t, err)
	require.NoError(t, <-res)
	require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:n]), "payload not placed intact")
	copied := l.copiedBytes() - before
	assert.Less(t, copied, int64(n/2), "the rest of the frame went through the read buffer")
}

// TestSpinBacksOffPerWait: the spin backoff (spinMissed) holds when, as
// p2p's peers send them, another frame (the ACKs held back) leads the one
// that completes a wait in the same write, so that a wait reads two frames
// and the second, over spinFillMax, is polled for after its header: a peer
// that answers far later than PollSpin still makes most waits skip their
// spin, however the two frames' polls count.
func TestSpinBacksOffPerWait(t *testing.T) {
	const n = 40 << 10 // over spinFillMax: its payload is polled for after its header
	a, mr, c, l := spinningTarget(t, 200*time.Microsecond, 2*n)
	const waits = 24
	before := l.spinMisses.Load()
	for i := range waits {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
		// A plain WRITE elsewhere in mr, which completes nothing, leads.
		lead := make([]byte, HeaderLen+8)
		EncodeHeader(lead, &softrc.Header{Op: softrc.FrameWrite, QPN: a.qp.Num(), Seq: uint32(2 * i), Len: 8,
			RAddr: mr.Addr() + n, RKey: mr.RKey()})
		f := writeImmFrame(a.qp, mr, uint32(2*i+1), n, uint32(i))
		wrote := make(chan error, 1)
		go func() {
			// A slow peer: the frames come long after the spin ends. The
			// pause is the behaviour under test, not synchronisation.
			time.Sleep(20 * time.Millisecond)
			_, err := c.Write(append(lead, f...))
			wrote <- err
		}()
		wc := wait(t, a.cq)
		require.NoError(t, <-wrote)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint32(i), wc.Imm)
		require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[:n]), "frame %d not placed intact", i)
	}
	misses := l.spinMisses.Load() - before
	t.Logf("%d of %d waits spun in vain", misses, waits)
	require.Positive(t, misses, "no wait spun")
	// One wait in 1, 2, 4, ... spins (a few more if a busy machine delays
	// a waiter until its frames are in).
	assert.LessOrEqual(t, misses, int32(waits/2), "waits kept spinning in vain")
}

// answerWhenBlocked writes f to c once the link's polling waiter has
// stopped spinning and is about to sleep in the kernel (pblocked): for a
// waiter that spun, its spin has just run out, so the frame comes a little
// after PollSpin. It reports an error if no waiter got there in time.
func answerWhenBlocked(l *link, c net.Conn, f []byte) <-chan error {
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(20 * time.Second)
		for !l.pblocked.Load() {
			if time.Now().After(deadline) {
				done <- errors.New("no waiter came to sleep on the link")
				return
			}
			time.Sleep(20 * time.Microsecond)
		}
		_, err := c.Write(f)
		done <- err
	}()
	return done
}

// TestSpinNearMissKeepsSpinning: a wait whose spin runs out shortly before
// its frame comes, as when the peer slept rather than spun before it
// answered, does not make the next waits sleep at once (waitEnded): in a
// ping-pong such sleeps made the peer's spins run out in turn, and both
// ranks slept on most waits.
func TestSpinNearMissKeepsSpinning(t *testing.T) {
	// Long enough that a frame written as the waiter goes to sleep wakes it
	// well within 2*spin of the wait's start, however busy the machine.
	const spin = 100 * time.Millisecond
	a, mr, c, l := spinningTarget(t, spin, 4096)
	const waits = 6
	near := 0
	for i := range waits {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
		f := writeImmFrame(a.qp, mr, uint32(i), 100, uint32(i))
		wrote := answerWhenBlocked(l, c, f)
		began := time.Now()
		wc := wait(t, a.cq)
		took := time.Since(began)
		require.NoError(t, <-wrote)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint32(i), wc.Imm)
		if took > 2*spin {
			// A busy machine held the waiter up: that is a miss by far.
			t.Logf("wait %d took %v", i, took)
			continue
		}
		near++
		require.Zero(t, l.spinSkip, "wait %d (%v): a spin that ran out just before its frame made the next waits sleep", i, took)
	}
	require.GreaterOrEqual(t, near, waits/2, "too few waits ended soon after their spin to tell")
}

// TestSpinSkipEndsOnShortWait: a wait that skipped its spin after earlier
// misses but got its frame within 2*PollSpin ends the skipping: the next
// wait spins again rather than sleeping through the rest of the backoff.
func TestSpinSkipEndsOnShortWait(t *testing.T) {
	a, mr, c, l := spinningTarget(t, 100*time.Millisecond, 4096)
	// As after a few waits in a row that outlasted their spins by far
	// (set here by the goroutine that drives the link below).
	l.spinBackoff, l.spinSkip = 8, 8
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
	f := writeImmFrame(a.qp, mr, 0, 100, 7)
	wrote := answerWhenBlocked(l, c, f)
	wc := wait(t, a.cq)
	require.NoError(t, <-wrote)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint32(7), wc.Imm)
	assert.Zero(t, l.spinSkip, "a wait that skipped its spin and got its frame at once left the next waits skipping theirs")
}

// TestHeadersReadTogether: after frames larger than the read buffer, when
// headers are read alone, a waiter that finds a few small frames queued
// together reads them in one system call (sockReader.hdrOnly, takeQueued)
// and completes them all.
func TestHeadersReadTogether(t *testing.T) {
	const big = readBufSize + 1
	a, mr, c, l := spinningTarget(t, time.Hour, big) // the waiter polls until its frame comes
	// More small frames than a header read takes when nothing tells how
	// much is queued (headerRead).
	const smalls = 5
	for i := range smalls + 1 {
		require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: uint64(i)}))
	}
	_, err := c.Write(writeImmFrame(a.qp, mr, 0, big, 1))
	require.NoError(t, err)
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	before := l.hdrBatches.Load()
	var small []byte
	for i := range smalls {
		small = append(small, writeImmFrame(a.qp, mr, uint32(1+i), 8, uint32(2+i))...)
	}
	// The frames must come while a waiter polls the socket: the reader
	// goroutine reads each header alone.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := make(chan error, 1)
	go func() { res <- a.cq.Wait(ctx) }()
	awaitPoller(t, a.qp)
	_, err = c.Write(small)
	require.NoError(t, err)
	require.NoError(t, <-res)
	for i := range smalls {
		wc := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint32(2+i), wc.Imm)
	}
	require.Greater(t, l.hdrBatches.Load(), before, "the small frames queued together were read a header at a time")
}
