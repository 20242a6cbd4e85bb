//go:build !race

// The race detector allocates on its own: this test runs without it.

package comm

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNonblockingCallAllocatesTwo: a small non-blocking collective started
// and waited for at once allocates its request and the closure of its body,
// nothing else. Its Waited, the background ctx made from it and its done
// channel (made only for somebody who blocks on it) made five more, and a
// 2-rank Iallreduce+Wait of 8 bytes took 0.9 µs against the blocking call's
// 0.3.
func TestNonblockingCallAllocatesTwo(t *testing.T) {
	ctx := context.Background()
	c := initWorldWith(t, 1, Options{Transport: "shm"})[0]
	buf := make([]float32, 2)
	var callErr error
	var inline bool
	step := func() {
		r, err := Iallreduce(ctx, c, buf, Sum)
		if err == nil {
			_, err = r.Wait(ctx)
			inline = r.inline
		}
		if err != nil && callErr == nil {
			callErr = err
		}
	}
	for range 100 {
		step()
	}
	allocs := testing.AllocsPerRun(1000, step)
	require.NoError(t, callErr)
	require.True(t, inline, "the Wait did not run the call itself")
	require.LessOrEqual(t, allocs, 2.0, "allocations per Iallreduce+Wait")
}
