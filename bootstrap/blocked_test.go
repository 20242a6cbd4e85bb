package bootstrap

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/stacks"
)

// awaitBlocked waits until at least n goroutines blocked (not running or
// runnable) in frame, a method such as "(*Client).Get", appear in the stack
// dump: the state the tests that close, abort or cancel under a waiting
// call need, which a sleep only made likely. Only goroutines the running
// test started count (their stacks name it).
func awaitBlocked(t *testing.T, n int, frame string) {
	t.Helper()
	test, _, _ := strings.Cut(t.Name(), "/")
	require.Eventually(t, func() bool {
		found := 0
		for _, g := range stacks.All() {
			if g.State != "running" && g.State != "runnable" && strings.Contains(g.Stack, frame+"(") &&
				strings.Contains(g.Stack, "bootstrap."+test+".") {
				found++
			}
		}
		return found >= n
	}, 5*time.Second, time.Millisecond, "%d goroutines blocked in %s", n, frame)
}

// awaitArrived waits until the server has counted rank as arrived in
// collective seq. A client blocked in Fence may not have been read by the
// server yet; tests that make another rank leave next need the server's
// side, or the failure names the later event.
func awaitArrived(t *testing.T, s *Server, seq uint32, rank int) {
	t.Helper()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		cl := s.colls[seq]
		return cl != nil && rank < len(cl.arrived) && cl.arrived[rank]
	}, 5*time.Second, time.Millisecond, "rank %d never arrived in collective #%d", rank, seq)
}
