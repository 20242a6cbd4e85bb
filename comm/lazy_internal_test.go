package comm

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// stopLazyWorker makes the lazy worker of the worlds made from now on nap
// for an hour, so that only the caller's own calls can start a lazily
// started collective; the naps come back after the test's communicators
// close.
func stopLazyWorker(t *testing.T) {
	lo, hi := lazyNapMin, lazyNapMax
	lazyNapMin, lazyNapMax = time.Hour, time.Hour
	t.Cleanup(func() { lazyNapMin, lazyNapMax = lo, hi })
}

// peer runs f as rank 1 and returns its error channel.
func peer(f func() error) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

func requireNoErr(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("rank 1 did not finish")
	}
}

// TestLazyCallsRunWhereWaited: small non-blocking collectives wait in the
// queue until claimed; a Wait for the later of two runs both on its own
// goroutine, in order, and so does a blocking collective for one started
// before it, with the worker asleep for the whole test.
func TestLazyCallsRunWhereWaited(t *testing.T) {
	stopLazyWorker(t)
	comms := initPair(t, "loop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := peer(func() error {
		for range 4 {
			if err := Allreduce(ctx, comms[1], []int64{10}, Sum); err != nil {
				return err
			}
		}
		return nil
	})
	a, b := []int64{1}, []int64{2}
	ra, err := Iallreduce(ctx, comms[0], a, Sum)
	require.NoError(t, err)
	rb, err := Iallreduce(ctx, comms[0], b, Sum)
	require.NoError(t, err)
	_, err = rb.Wait(ctx)
	require.NoError(t, err)
	require.True(t, ra.inline && rb.inline, "the Wait for the second did not run both")
	_, err = ra.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, []int64{11}, a)
	require.Equal(t, []int64{12}, b)

	c := []int64{3}
	rc, err := Iallreduce(ctx, comms[0], c, Sum)
	require.NoError(t, err)
	require.NoError(t, Allreduce(ctx, comms[0], []int64{4}, Sum))
	_, ok, err := rc.Test()
	require.NoError(t, err)
	require.True(t, ok && rc.inline, "the blocking Allreduce did not run the one started before it")
	require.Equal(t, []int64{13}, c)
	requireNoErr(t, done)
}

// TestLazyCallStartsOnTest: a program that polls a small non-blocking
// collective with Test, never calling Wait, sees it complete: Test gives
// it a goroutine (the worker sleeps through the test).
func TestLazyCallStartsOnTest(t *testing.T) {
	stopLazyWorker(t)
	comms := initPair(t, "loop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := peer(func() error { return Barrier(ctx, comms[1]) })
	r, err := Ibarrier(ctx, comms[0])
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		_, ok, err := r.Test()
		require.NoError(t, err)
		return ok
	}, 20*time.Second, 100*time.Microsecond, "Test never saw the barrier complete")
	require.False(t, r.inline)
	requireNoErr(t, done)
}

// TestLazyWorkerStartsUnclaimedCall: a small non-blocking collective that
// its rank neither waits for nor tests still does its part: the worker
// starts it, so the peer's blocking barrier returns before this rank
// calls anything again.
func TestLazyWorkerStartsUnclaimedCall(t *testing.T) {
	comms := initPair(t, "loop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := Ibarrier(ctx, comms[0])
	require.NoError(t, err)
	requireNoErr(t, peer(func() error { return Barrier(ctx, comms[1]) }))
	_, err = r.Wait(ctx)
	require.NoError(t, err)
	require.False(t, r.inline, "rank 0's part ran in its Wait, after the peer's barrier had returned")
}

// TestLargeCallStartsAtOnce: a non-blocking collective past lazyStartMax
// gets its goroutine at its start, worker or not.
func TestLargeCallStartsAtOnce(t *testing.T) {
	stopLazyWorker(t)
	comms := initPair(t, "loop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n := lazyStartMax/8 + 1
	r, err := Iallreduce(ctx, comms[0], make([]int64, n), Sum)
	require.NoError(t, err)
	requireNoErr(t, peer(func() error { return Allreduce(ctx, comms[1], make([]int64, n), Sum) }))
	_, err = r.Wait(ctx)
	require.NoError(t, err)
}

// TestLazyCallFailsAtClose: a small non-blocking collective nobody claimed
// when its world closes completes with an error instead of leaving its
// Wait blocked.
func TestLazyCallFailsAtClose(t *testing.T) {
	stopLazyWorker(t)
	comms := initPair(t, "loop")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := Ibarrier(ctx, comms[0])
	require.NoError(t, err)
	require.NoError(t, comms[0].Close())
	_, err = r.Wait(ctx)
	require.Error(t, err)
	require.False(t, errors.Is(err, context.DeadlineExceeded), "the Wait ran into its deadline: %v", err)
}

// TestWaitElsewhereWakesOnCompletion: a Wait whose ctx is not the start's
// may not run the call itself; it blocks on the request's done channel
// (made only then) until the call's own goroutine completes it, and a Test
// after sees it done.
func TestWaitElsewhereWakesOnCompletion(t *testing.T) {
	c := initWorldWith(t, 1, Options{Transport: "shm"})[0]
	ctx := context.Background()
	for i := range 200 {
		buf := []int64{int64(i)}
		r, err := Iallreduce(ctx, c, buf, Sum)
		require.NoError(t, err)
		wctx, cancel := context.WithTimeout(ctx, time.Minute)
		_, err = r.Wait(wctx)
		cancel()
		require.NoError(t, err)
		require.False(t, r.inline, "a Wait with another ctx ran the call")
		_, done, err := r.Test()
		require.True(t, done)
		require.NoError(t, err)
		require.Equal(t, int64(i), buf[0])
	}
}
