package p2p_test

import (
	"fmt"
	"strings"
	"time"

	"github.com/rdmago/rdmago/internal/stacks"
)

// awaitFutexSleep waits (up to 10 s) until a goroutine whose stack names
// test (a test function, so its ranks' goroutines) sleeps in futex(2): a
// waiter asleep in its completion queue, the state the tests that must wake
// one need, which a sleep only made likely.
func awaitFutexSleep(test string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, g := range stacks.All() {
			if g.State == "syscall" && strings.Contains(g.Stack, "futex.Wait(") && strings.Contains(g.Stack, test) {
				return nil
			}
		}
	}
	return fmt.Errorf("no goroutine of %s went to sleep in futex(2)", test)
}

// awaitBlocked waits (up to 10 s) until a goroutine whose stack names test
// is blocked (not running or runnable) in frame, such as
// "(*Endpoint).Recv(".
func awaitBlocked(test, frame string) error {
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		for _, g := range stacks.All() {
			if g.State != "running" && g.State != "runnable" && strings.Contains(g.Stack, frame) && strings.Contains(g.Stack, test) {
				return nil
			}
		}
	}
	return fmt.Errorf("no goroutine of %s blocked in %s", test, frame)
}
