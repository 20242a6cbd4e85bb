package comm_test

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/internal/stacks"
)

// collectiveWait matches the frames of a wait inside the collectives
// engine (shared-memory or p2p).
var collectiveWait = regexp.MustCompile(`collectives\.\(\*call\)\.(shmWait|shmNap|waitReq)`)

// collectiveWaitStates returns the states of the goroutines whose stacks
// show a wait inside the collectives engine.
func collectiveWaitStates() []string {
	var out []string
	for _, g := range stacks.All() {
		if collectiveWait.MatchString(g.Stack) {
			out = append(out, g.State)
		}
	}
	return out
}

// TestBackgroundCollectiveSleeps: a non-blocking collective whose peer is
// late waits asleep (a timer nap or a parked channel receive), not
// spinning, yielding or in futex(2), which would take the CPU, or with
// GOMAXPROCS 1 the only P, from the caller's work; and it completes with
// the right result once waited for.
func TestBackgroundCollectiveSleeps(t *testing.T) {
	for _, tr := range []string{"shm", "loop"} {
		t.Run(tr, func(t *testing.T) {
			sampled := make(chan struct{}) // rank 1 stays late until rank 0 has looked
			runOK(t, 2, comm.Options{Transport: tr}, func(ctx context.Context, c *comm.Comm) error {
				buf := []int64{int64(c.Rank() + 1), 10}
				if c.Rank() == 1 {
					select {
					case <-sampled:
					case <-ctx.Done():
						return ctx.Err()
					}
					return comm.Allreduce(ctx, c, buf, comm.Sum)
				}
				r, err := comm.Iallreduce(ctx, c, buf, comm.Sum)
				if err != nil {
					return err
				}
				// Past the spin and yield phases (a few ms) of a blocking
				// wait, sample the waiting goroutine's state: a blocking
				// wait sits in futex(2) ("syscall") from then on; a
				// background one naps ("sleep", "select") or is parked on
				// its request ("chan receive"), and is seen running only
				// for the few microseconds of a check.
				time.Sleep(50 * time.Millisecond)
				asleep := 0
				for range 10 {
					for _, s := range collectiveWaitStates() {
						switch s {
						case "sleep", "select", "chan receive":
							asleep++
						case "running", "runnable":
						default:
							return fmt.Errorf("the background collective waits in state %q, not asleep", s)
						}
					}
					time.Sleep(5 * time.Millisecond)
				}
				close(sampled)
				if asleep == 0 {
					return fmt.Errorf("no goroutine seen asleep in the collective")
				}
				if _, err := r.Wait(ctx); err != nil {
					return err
				}
				if buf[0] != 3 || buf[1] != 20 {
					return fmt.Errorf("result %v, want [3 20]", buf)
				}
				return nil
			})
		})
	}
}
