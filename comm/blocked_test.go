package comm_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/stacks"
)

// awaitBlocked waits (up to 10 s) until n goroutines whose stacks name
// test (a test function, so its ranks' goroutines) are blocked, not running
// or runnable, in frame (as the goroutine dump prints it, "comm.Allreduce["
// for a generic function): the state a test that injects a fault into a
// waiting call needs, which a sleep only made likely.
func awaitBlocked(test, frame string, n int) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		found := 0
		for _, g := range stacks.All() {
			if g.State != "running" && g.State != "runnable" && strings.Contains(g.Stack, frame) && strings.Contains(g.Stack, test) {
				found++
			}
		}
		if found >= n {
			return nil
		}
	}
	return fmt.Errorf("fewer than %d goroutines of %s blocked in %s", n, test, frame)
}
