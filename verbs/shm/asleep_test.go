//go:build linux

package shm

import (
	"time"

	"github.com/rdmago/rdmago/verbs"
)

// awaitAsleep waits (up to 5 s) until a waiter of q has announced itself on
// the CQ's doorbell, about to sleep or asleep in futex(2): the state the
// tests that wake, cancel or close a sleeping waiter need, which sleeps
// only made likely. It reports whether that state came.
func awaitAsleep(q verbs.CQ) bool {
	c := q.(*cq)
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if c.db.bell.Sleepers() > 0 {
			return true
		}
	}
	return false
}
