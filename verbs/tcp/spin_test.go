package tcp

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// nextSpin: a reply that came within PollSpin doubles the poll (from
// spinGrowMin when there was none, never beyond PollSpin); one that came
// later halves it, and below spinGrowMin there is no poll.
func TestNextSpin(t *testing.T) {
	const limit = 100 * time.Microsecond
	us := time.Microsecond
	require.Equal(t, 50*us, nextSpin(limit, limit, 300*us))
	require.Equal(t, 25*us, nextSpin(50*us, limit, limit+1))
	require.Equal(t, 12500*time.Nanosecond, nextSpin(25*us, limit, time.Second))
	require.Equal(t, time.Duration(0), nextSpin(12500*time.Nanosecond, limit, time.Second), "below spinGrowMin: no poll")
	require.Equal(t, time.Duration(0), nextSpin(0, limit, time.Second))

	require.Equal(t, spinGrowMin, nextSpin(0, limit, 30*us), "a short wait brings the poll back")
	require.Equal(t, 2*spinGrowMin, nextSpin(spinGrowMin, limit, limit))
	require.Equal(t, limit, nextSpin(80*us, limit, 5*us), "never beyond PollSpin")
	require.Equal(t, limit, nextSpin(limit, limit, 5*us))

	require.Equal(t, time.Duration(0), nextSpin(0, 0, us), "no PollSpin, no poll")
	require.Equal(t, 4*us, nextSpin(0, 4*us, us), "a PollSpin below spinGrowMin")
	require.Equal(t, time.Duration(0), nextSpin(4*us, 4*us, time.Second))

	// From PollSpin, a run of late replies ends the poll, and a run of
	// prompt ones restores it.
	d := limit
	for range 4 {
		d = nextSpin(d, limit, time.Millisecond)
	}
	require.Zero(t, d)
	for range 5 { // 10, 20, 40, 80, 100 µs
		d = nextSpin(d, limit, us)
	}
	require.Equal(t, limit, d)
}

// A waiter whose messages keep coming after its poll gave up stops
// polling (each poll takes CPU time the sender may need), and polls again
// once they come promptly.
func TestPollAdaptsToLateReplies(t *testing.T) {
	const limit = 5 * time.Millisecond
	o := testOptions()
	o.PollSpin = limit
	a, b := bigPair(t, o, 4096)
	works2(t, a, b)
	l := attachedLink(t, b.qp)

	round := func(late bool) {
		t.Helper()
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 9}))
		got := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := waitCtx(ctx, b.rcq)
			got <- err
		}()
		awaitPoller(t, b.qp)
		if late {
			// The poll is over once the waiter blocks; the message then
			// comes well after PollSpin.
			require.Eventually(t, l.pblocked.Load, 10*time.Second, 100*time.Microsecond, "the waiter never blocked")
			time.Sleep(2 * limit)
		}
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWriteWithImm, Imm: 7, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
		select {
		case err := <-got:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("the message was not delivered")
		}
		require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
	}

	require.LessOrEqual(t, l.spinFor.Load(), int64(limit))
	for range 14 { // 5 ms halved nine times is below spinGrowMin
		round(true)
	}
	require.Zero(t, l.spinFor.Load(), "late messages did not end the poll")
	// Prompt messages bring it back. A busy machine may delay the waiter's
	// wake-up beyond PollSpin now and then, so several rounds may take.
	for i := 0; l.spinFor.Load() == 0; i++ {
		require.Less(t, i, 200, "prompt messages did not bring the poll back")
		round(false)
	}
	works2(t, a, b)
}
