package collectives

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWaitedWakesNap: the call finds the Waited in its ctx, a nap's
// channel closes when the Waited is set, and the call stops counting as
// background.
func TestWaitedWakesNap(t *testing.T) {
	var w Waited
	c := &call{callState: &callState{parent: w.Context(context.Background())}}
	require.True(t, c.background())
	ch := w.wake()
	select {
	case <-ch:
		t.Fatal("a nap's channel closed before Set")
	default:
	}
	w.Set()
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("Set did not wake the nap")
	}
	require.False(t, c.background())
}

// TestWaitedContext: the ctx a Waited makes is its parent's (deadline,
// done, error, values) and carries the Waited.
func TestWaitedContext(t *testing.T) {
	type key struct{}
	parent, cancel := context.WithTimeout(context.WithValue(context.Background(), key{}, "v"), time.Hour)
	var w Waited
	ctx := w.Context(parent)
	dl, ok := ctx.Deadline()
	pdl, _ := parent.Deadline()
	assert.True(t, ok)
	assert.Equal(t, pdl, dl)
	assert.Equal(t, "v", ctx.Value(key{}))
	assert.Same(t, &w, ctx.Value(backgroundKey{}))
	assert.Equal(t, parent.Done(), ctx.Done())
	require.NoError(t, ctx.Err())
	cancel()
	assert.ErrorIs(t, ctx.Err(), context.Canceled)
	// A child of it is canceled with its parent.
	var w2 Waited
	child, cancel2 := context.WithCancel(w2.Context(context.Background()))
	defer cancel2()
	outer, cancelOuter := context.WithCancel(context.Background())
	var w3 Waited
	grandchild, cancel3 := context.WithCancel(w3.Context(outer))
	defer cancel3()
	cancelOuter()
	select {
	case <-grandchild.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a child of a Waited's ctx missed its parent's cancel")
	}
	assert.NoError(t, child.Err())
}

// TestLastAlgorithmTakesNoLock: LastAlgorithm answers from the activity
// record while the Engine's lock is held (a call's begin, a stall probe),
// and says Auto before any call.
func TestLastAlgorithmTakesNoLock(t *testing.T) {
	e := &Engine{}
	require.Equal(t, Auto, e.LastAlgorithm())
	e.act.begin(7, CollBcast, ScatterAllgather)
	e.mu.Lock()
	defer e.mu.Unlock()
	got := make(chan Algorithm, 1)
	go func() { got <- e.LastAlgorithm() }()
	select {
	case a := <-got:
		assert.Equal(t, ScatterAllgather, a)
	case <-time.After(10 * time.Second):
		t.Fatal("LastAlgorithm waited for the Engine's lock")
	}
}
