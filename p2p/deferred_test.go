package p2p_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs/faulty"
)

// deferredPair starts two endpoints over the loop provider (whose QPs can
// hold posts) behind fault injectors that count held posts, with no
// liveness traffic, and a window of size bytes on each, rank 1's in bufs.
func deferredPair(t *testing.T, ctx context.Context, size int) ([]*faulty.Injector, []*p2p.Endpoint, []*p2p.Window, []byte) {
	t.Helper()
	inj, open := faultyOpener(2)
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "loop", P2P: p2p.Options{
		LivenessTimeout: -1, OpenDevice: open}})
	require.NoError(t, err)
	t.Cleanup(func() { p2ptest.Close(eps) })
	bufs := [][]byte{make([]byte, size), make([]byte, size)}
	wins := make([]*p2p.Window, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { wins[r], errs[r] = eps[r].NewWindow(ctx, bufs[r]) })
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	return inj, eps, wins, bufs[1]
}

// deferredRun is deferredPair under a 20 s ctx, with deferred writes
// leaving after grace if nothing else releases them (restored at the
// test's end).
func deferredRun(t *testing.T, grace time.Duration, size int) (context.Context, []*faulty.Injector, []*p2p.Endpoint, []*p2p.Window, []byte) {
	t.Helper()
	old := p2p.SetDeferGrace(grace)
	t.Cleanup(func() { p2p.SetDeferGrace(old) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	inj, eps, wins, target := deferredPair(t, ctx, size)
	return ctx, inj, eps, wins, target
}

// writeBlocks writes src into rank 1's window with n IwriteNows of one
// block each, at the same offsets, and returns their requests.
func writeBlocks(t *testing.T, w *p2p.Window, src []byte, n int) []*p2p.Request {
	t.Helper()
	k := len(src) / n
	reqs := make([]*p2p.Request, n)
	for i := range n {
		r, err := w.IwriteNow(1, i*k, src[i*k:(i+1)*k])
		require.NoError(t, err)
		require.NotNil(t, r, "write %d over loop gave no request", i)
		reqs[i] = r
	}
	return reqs
}

// undisturbed runs a scenario of deferred writes, each time with a new
// pair, until a run reports that nothing else sent the writes before the
// test meant them to go, at most deferAttempts times. Any other post of
// the endpoint sends held writes first (holdPosts), and now and then a
// late frame of the window's setup makes one in the middle of a test; a
// run it disturbed still checks what it can (the writes complete, the
// data lands), and a fault that sends the writes early fails every run.
func undisturbed(t *testing.T, what string, run func() bool) {
	t.Helper()
	const deferAttempts = 5
	for attempt := range deferAttempts {
		if run() {
			return
		}
		t.Logf("attempt %d: the writes left early (%s); again with a new pair", attempt, what)
	}
	t.Fatalf("in %d attempts, the writes left early every time (%s)", deferAttempts, what)
}

// TestDeferredWritesLeaveTogether: window writes through IwriteNow to a
// peer whose QP can hold posts are held after the call returns (nothing
// reaches the peer), so that a burst of Puts leaves in one write at the
// wait that follows, which sends them and finds them complete, the data
// in place.
func TestDeferredWritesLeaveTogether(t *testing.T) {
	undisturbed(t, "a deferred write reached the peer before any wait", func() bool {
		ctx, inj, _, wins, target := deferredRun(t, time.Hour, 4096)
		const n = 16
		src := pattern(n*8, 3)
		before := sendsHeld(inj)
		reqs := writeBlocks(t, wins[0], src, n)
		held := sendsHeld(inj)-before == n && slices.Equal(make([]byte, n*8), target[:n*8])
		require.NoError(t, p2p.WaitAll(ctx, reqs...))
		require.Equal(t, src, target[:n*8])
		return held
	})
}

// TestDeferredWritesLeaveBeforeOtherPosts: a send posted after deferred
// writes to the same peer is not held behind them: the writes go first,
// then the send, so the receiver that has the message has the data too.
func TestDeferredWritesLeaveBeforeOtherPosts(t *testing.T) {
	ctx, inj, eps, wins, target := deferredRun(t, time.Hour, 4096)
	const n = 3
	src := pattern(n*8, 5)
	before := sendsHeld(inj)
	reqs := writeBlocks(t, wins[0], src, n)
	s, err := eps[0].Isend(1, 9, []byte("after"))
	require.NoError(t, err)
	require.Equal(t, n, sendsHeld(inj)-before, "the send was held with the deferred writes")
	buf := make([]byte, 5)
	_, err = eps[1].Recv(ctx, 0, 9, buf)
	require.NoError(t, err)
	require.Equal(t, "after", string(buf))
	require.Equal(t, src, target[:n*8], "the message arrived before the writes posted ahead of it")
	require.NoError(t, p2p.WaitAll(ctx, append(reqs, s)...))
}

// TestDeferredWriteLeavesWithoutPoll: a deferred write whose program
// never polls the endpoint again still lands (the grace timer releases
// it), and its request completes by the background goroutine's progress.
func TestDeferredWriteLeavesWithoutPoll(t *testing.T) {
	ctx, inj, _, wins, _ := deferredRun(t, time.Millisecond, 64)
	before := sendsHeld(inj)
	r, err := wins[0].IwriteNow(1, 0, []byte("lands"))
	require.NoError(t, err)
	require.Equal(t, 1, sendsHeld(inj)-before, "the write was not deferred")
	// Done reads a flag and does not poll.
	require.Eventually(t, r.Done, 10*time.Second, time.Millisecond, "the deferred write never left")
	st, err := r.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, st.Count)
}

// TestDeferredWritesFailWithTheirLink: writes held for their Flush when
// the link to their peer breaks complete with an error naming that peer;
// the wait for them returns instead of hanging. Writes that a disturbance
// (see undisturbed) sent before the break complete, their data in place.
func TestDeferredWritesFailWithTheirLink(t *testing.T) {
	undisturbed(t, "writes completed although the link broke", func() bool { return deferredWritesFail(t) })
}

// deferredWritesFail runs TestDeferredWritesFailWithTheirLink's scenario
// once and reports whether every write was still held when the link broke
// (false: some had left, and landed).
func deferredWritesFail(t *testing.T) bool {
	ctx, inj, eps, wins, target := deferredRun(t, time.Hour, 4096)
	const n = 8
	src := pattern(n*8, 7)
	before := sendsHeld(inj)
	reqs := writeBlocks(t, wins[0], src, n)
	require.Equal(t, n, sendsHeld(inj)-before, "the writes were not held")
	disconnect(t, inj, eps[0].Stats().Peers[1].QPNum)
	err := p2p.WaitAll(ctx, reqs...)
	require.NoError(t, ctx.Err(), "the wait for the held writes outlasted its ctx")
	held := true
	for i, r := range reqs {
		_, done, err := r.Test()
		require.True(t, done, "write %d never completed", i)
		if err == nil {
			require.Equal(t, src[i*8:(i+1)*8], target[i*8:(i+1)*8], "write %d completed, its data not in place", i)
			held = false
			continue
		}
		var lost *p2p.PeerLostError
		require.ErrorAs(t, err, &lost, "write %d: %v", i, err)
		require.Equal(t, 1, lost.Rank, "write %d", i)
	}
	if held {
		require.Error(t, err)
	}
	return held
}
