package p2p

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type wakerKey struct{}

// TestWakerContext checks that a waker behaves as a context cancelled by
// wake: Done closes and Err says Canceled once woken, AfterFunc
// registrations (context.AfterFunc's included) run then unless stopped,
// values and deadline come from the parent, and reset makes it a fresh,
// unwoken context whose earlier registrations are gone.
func TestWakerContext(t *testing.T) {
	parent := context.WithValue(context.Background(), wakerKey{}, "v")
	ep := &Endpoint{}
	ep.mu.Lock()
	w := ep.getWakerLocked(parent)
	ep.mu.Unlock()

	require.NoError(t, w.Err())
	require.Equal(t, "v", w.Value(wakerKey{}))
	_, ok := w.Deadline()
	require.False(t, ok)
	done := w.Done()
	require.Equal(t, done, w.Done(), "Done is one channel per use")
	select {
	case <-done:
		t.Fatal("Done closed before wake")
	default:
	}

	ran := make(chan string, 4)
	stopBefore := w.AfterFunc(func() { ran <- "stopped" })
	require.True(t, stopBefore(), "stop before wake unregisters")
	w.AfterFunc(func() { ran <- "direct" })
	context.AfterFunc(w, func() { ran <- "context" })

	w.wake()
	w.wake() // a second wake does nothing
	<-done
	require.ErrorIs(t, w.Err(), context.Canceled)
	got := map[string]bool{}
	for range 2 {
		select {
		case s := <-ran:
			got[s] = true
		case <-time.After(10 * time.Second):
			t.Fatal("an AfterFunc registration did not run on wake")
		}
	}
	require.Equal(t, map[string]bool{"direct": true, "context": true}, got)
	late := make(chan struct{})
	w.AfterFunc(func() { close(late) }) // registered after the wake: runs at once
	<-late

	// The next use: not woken, a new channel; then one more, which drops
	// what the last left registered.
	w.reset(context.Background())
	require.NoError(t, w.Err())
	require.NotEqual(t, done, w.Done())
	done = w.Done()
	stale := w.AfterFunc(func() { ran <- "stale" })
	w.reset(context.Background())
	require.False(t, stale(), "a stop from an earlier use does nothing")
	require.NoError(t, w.Err())
	require.Equal(t, done, w.Done(), "an unwoken use leaves its channel to the next")
	w.wake()
	<-w.Done()
	select {
	case s := <-ran:
		t.Fatalf("registration %q ran after reset", s)
	case <-time.After(10 * time.Millisecond):
	}

	// Kept for reuse, a bounded number of them.
	ep.mu.Lock()
	for range 2 * maxSpareWakers {
		ep.putWakerLocked(&waker{})
	}
	n := len(ep.wakers)
	w2 := ep.getWakerLocked(parent)
	ep.mu.Unlock()
	require.Equal(t, maxSpareWakers, n)
	require.NoError(t, w2.Err())
	require.Equal(t, "v", w2.Value(wakerKey{}))
}

// TestWakerEndsWithParent checks a waker under a parent that can end: it
// registers with the parent only once Done or AfterFunc is asked for (a
// use that asks for neither allocates nothing), the parent's end then
// closes Done and runs the registrations, Err gives the parent's error
// with or without the registration, and neither a reset nor putting the
// waker back as a spare leaves the registration behind to wake a later use
// or the spare.
func TestWakerEndsWithParent(t *testing.T) {
	ep := &Endpoint{}
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	ep.mu.Lock()
	w := ep.getWakerLocked(parent)
	ep.mu.Unlock()

	require.Zero(t, testing.AllocsPerRun(100, func() {
		w.reset(parent)
		_ = w.Err()
	}), "a use that never asks for Done allocates")
	require.Nil(t, w.unlink, "registered with the parent before Done or AfterFunc")

	done := w.Done()
	ran := make(chan struct{})
	w.AfterFunc(func() { close(ran) })
	require.NotNil(t, w.unlink)
	cancel()
	for _, ch := range []<-chan struct{}{done, ran} {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatal("the parent's end did not wake the waker")
		}
	}
	require.ErrorIs(t, w.Err(), context.Canceled)

	// Err tells a parent's deadline apart from a wake, registered or not.
	expired, cancelExpired := context.WithTimeout(context.Background(), -time.Second)
	defer cancelExpired()
	w.reset(expired)
	require.ErrorIs(t, w.Err(), context.DeadlineExceeded)
	w.reset(context.Background())
	w.wake()
	require.ErrorIs(t, w.Err(), context.Canceled)

	// A reset drops the last use's registration: the old parent's end
	// leaves the next use alone.
	old, cancelOld := context.WithCancel(context.Background())
	w.reset(old)
	w.Done()
	require.NotNil(t, w.unlink)
	w.reset(context.Background())
	require.Nil(t, w.unlink)
	next := w.Done()
	cancelOld()
	requireStaysOpen(t, next, "an earlier use's parent woke the next use")
	require.NoError(t, w.Err())

	// So does putting it back as a spare.
	last, cancelLast := context.WithCancel(context.Background())
	w.reset(last)
	spare := w.Done()
	ep.mu.Lock()
	ep.putWakerLocked(w)
	ep.mu.Unlock()
	require.Nil(t, w.unlink)
	cancelLast()
	requireStaysOpen(t, spare, "a spare waker was woken by the parent of its last use")
	require.NoError(t, w.Err())
}

// requireStaysOpen fails the test if done closes within 20 ms: a late
// registration's goroutine would close it within microseconds.
func requireStaysOpen(t *testing.T, done <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-done:
		t.Fatal(msg)
	case <-time.After(20 * time.Millisecond):
	}
}

// TestWakerResetAfterWakeKeepsRegistrationsWhole wakes a waker with a
// context.AfterFunc registered on it and resets it at once, as a wait that
// is completed and then reused does. The context package's registration
// asks the waker's Err when it runs, and panics (crashing the test) if
// that says the waker never ended: reset must wait for it.
func TestWakerResetAfterWakeKeepsRegistrationsWhole(t *testing.T) {
	ep := &Endpoint{}
	ep.mu.Lock()
	w := ep.getWakerLocked(context.Background())
	ep.mu.Unlock()
	for i := range 1000 {
		ran := make(chan struct{})
		context.AfterFunc(w, func() { close(ran) })
		w.wake()
		ep.mu.Lock()
		ep.putWakerLocked(w)
		w = ep.getWakerLocked(context.Background())
		ep.mu.Unlock()
		select {
		case <-ran:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: the registration did not run", i)
		}
	}
}
