package stacks_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/stacks"
)

func parkedOnChannel(ch chan struct{}) { <-ch }

// TestAll finds a goroutine blocked on a channel with its state and frames,
// and the calling goroutine running.
func TestAll(t *testing.T) {
	ch := make(chan struct{})
	defer close(ch)
	go parkedOnChannel(ch)
	var found, self bool
	for deadline := time.Now().Add(5 * time.Second); !found && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, g := range stacks.All() {
			// Before it first runs, the goroutine shows as runnable.
			if strings.Contains(g.Stack, "stacks_test.parkedOnChannel") && g.State != "runnable" {
				require.Equal(t, "chan receive", g.State)
				found = true
			}
			if strings.Contains(g.Stack, "stacks_test.TestAll") && g.State == "running" {
				self = true
			}
		}
	}
	require.True(t, found, "the goroutine parked on a channel")
	require.True(t, self, "the calling goroutine, running")
}
