package tcp

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// TestArrivedOneLookForAllLinks: a crowded waiter's look for bytes that
// arrived on any of its CQ's links (CQ.Arrived) is one epoll_wait for all
// of them, not an ioctl per link (Incoming), and it still finds the frame
// that arrives on either link and takes it on the waiter's goroutine.
func TestArrivedOneLookForAllLinks(t *testing.T) {
	o := testOptions()
	o.PollGrace = maxPollGrace // the reader goroutine stays away that long
	dev := openDev(t, o)
	pd, err := dev.AllocPD()
	require.NoError(t, err)
	vcq, err := dev.CreateCQ(256)
	require.NoError(t, err)
	mr, err := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	cq := vcq.(*softrc.CQ)
	var qps [2]verbs.QP
	var peers [2]*side2
	var links [2]*link
	for i := range qps {
		qps[i], err = pd.CreateQP(verbs.QPInitAttr{SendCQ: vcq, RecvCQ: vcq,
			Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		peers[i] = bigSide(t, openDev(t, o), 4096)
		require.NoError(t, verbs.Connect(qps[i], peers[i].qp.Address(), verbs.DefaultConnectOptions()))
		require.NoError(t, verbs.Connect(peers[i].qp, qps[i].Address(), verbs.DefaultConnectOptions()))
		links[i] = attachedLink(t, qps[i])
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 10 {
		took, waiting := cq.Arrived(ctx)
		require.False(t, took || waiting, "nothing was sent")
	}
	taken := false
	for round := 0; round < 50 && !taken; round++ {
		i := round % 2
		require.NoError(t, qps[i].PostRecv(verbs.RecvWR{ID: uint64(round)}))
		// Take the socket from the reader goroutine (nothing is queued):
		// it stays away for PollGrace, so that the waiter can take the
		// frame.
		_, _ = links[i].DriveQueued(ctx, cq)
		p := peers[i]
		require.NoError(t, p.qp.PostSend(verbs.SendWR{ID: uint64(round), Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(p.mr, 0, 8)}, RemoteAddr: mr.Addr(), RKey: mr.RKey()}))
		var wc [1]verbs.WC
		for cq.Poll(wc[:]) == 0 {
			if took, _ := cq.Arrived(ctx); took {
				taken = true
			}
			runtime.Gosched()
			require.NoError(t, ctx.Err())
		}
		require.Equal(t, verbs.StatusSuccess, wc[0].Status)
		require.Equal(t, uint64(round), wc[0].ID)
		require.Equal(t, qps[i].Num(), wc[0].QPNum)
		require.Equal(t, verbs.StatusSuccess, wait(t, p.cq).Status)
	}
	require.True(t, taken, "the reader goroutine took every frame first")
	for i, l := range links {
		require.Zero(t, l.incomings.Load(), "link %d was asked by an ioctl of its own", i)
	}
}

// TestPollGraceDefault: once a waiter puts the socket back, the link's
// reader goroutine stays out for 500 µs by default, and for 10 ms where
// waiters yield their CPU (PollYield: ranks outnumber the CPUs, and a
// waiter comes back when it gets one); an explicit PollGrace wins. The
// reader can only resume late on a loaded machine, never early, so the
// test asserts the lower bound only.
func TestPollGraceDefault(t *testing.T) {
	for _, tc := range []struct {
		name  string
		yield bool
		grace time.Duration
		want  time.Duration
	}{
		{"default", false, 0, defaultPollGrace},
		{"yield", true, 0, maxPollGrace},
		{"yield-explicit", true, 2 * time.Millisecond, 2 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions()
			o.PollYield, o.PollGrace = tc.yield, tc.grace
			a, b := bigPair(t, o, 4096)
			l := attachedLink(t, a.qp)
			require.Eventually(t, func() bool { return l.holder.Load() == holderReader }, 5*time.Second, time.Millisecond,
				"the reader goroutine never took the socket")
			cq := a.rcq.(*softrc.CQ)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			start := time.Now()
			took, left := l.DriveQueued(ctx, cq)
			require.False(t, took, "nothing was sent")
			require.False(t, left, "the waiter did not get the socket")
			require.Eventually(t, func() bool { return l.holder.Load() == holderReader }, 5*time.Second, 50*time.Microsecond,
				"the reader goroutine never resumed")
			require.GreaterOrEqual(t, time.Since(start), tc.want, "the reader goroutine resumed before the grace")
			copy(a.mr.Bytes(), "ping")
			require.NoError(t, a.qp.PostSend(writeWR(1, &a.side, &b.side, 4)))
			require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
		})
	}
}
