package p2p_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// TestSendNow: SendNow sends an eager message at once and its buffer may be
// reused as soon as it returns; it does nothing and says so where the
// message cannot go at once: to this rank, past the eager limit, and
// behind sends queued for want of credits (which it must not overtake).
func TestSendNow(t *testing.T) {
	for _, prov := range []string{"loop", "shm", "tcp"} {
		t.Run(prov, func(t *testing.T) {
			ctx, _, a, b := nowPair(t, prov)

			buf := []byte("now, at once")
			sent, err := a.SendNow(1, 5, buf)
			require.NoError(t, err)
			require.True(t, sent, "an eager message to an idle peer")
			copy(buf, "overwritten!") // the message went already
			got := make([]byte, 32)
			st, err := b.Recv(ctx, 0, 5, got)
			require.NoError(t, err)
			assert.Equal(t, "now, at once", string(got[:st.Count]))

			for _, tc := range []struct {
				name      string
				peer, tag int
				buf       []byte
			}{
				{"to itself", 0, 5, []byte("x")},
				{"past the eager limit", 1, 5, make([]byte, 4096)},
				{"to no rank", 2, 5, []byte("x")},
				{"with a negative tag", 1, -1, []byte("x")},
			} {
				sent, err := a.SendNow(tc.peer, tc.tag, tc.buf)
				assert.NoError(t, err, tc.name)
				assert.False(t, sent, tc.name)
			}

			// More sends than the peer has credits for: the rest queue, and
			// SendNow must leave its message to the general path, behind them.
			behindQueue(t, ctx, a, b, []byte{16}, func(m []byte) (bool, error) { return a.SendNow(1, 7, m) },
				func(m []byte) (*p2p.Request, error) { return a.Isend(1, 7, m) })
		})
	}
}

// TestSendPartsNow: SendPartsNow sends head and then body as one message at
// once, both buffers free on return, and counts it as a parts send; it
// does nothing and says so where IsendParts would join the two first (a
// head longer than a ring line's room), where SendNow would (to itself,
// past the eager limit), and behind queued sends, which it must not
// overtake.
func TestSendPartsNow(t *testing.T) {
	for _, prov := range []string{"loop", "shm", "tcp"} {
		t.Run(prov, func(t *testing.T) {
			ctx, eps, a, b := nowPair(t, prov)

			before := eps[0].Stats().Peers[1].PartsSent
			head, body := []byte("head|"), bytes.Repeat([]byte("body."), 60) // 305 bytes: past a ring line
			sent, err := a.SendPartsNow(1, 5, head, body)
			require.NoError(t, err)
			require.True(t, sent, "an eager message to an idle peer")
			want := string(head) + string(body)
			copy(head, "XXXXX") // the message went already
			copy(body, "YYYYYYYYYY")
			got := make([]byte, 512)
			st, err := b.Recv(ctx, 0, 5, got)
			require.NoError(t, err)
			assert.Equal(t, want, string(got[:st.Count]))
			after := eps[0].Stats().Peers[1].PartsSent
			assert.Equal(t, before.Msgs+1, after.Msgs)
			assert.Equal(t, before.Bytes+uint64(len(want)), after.Bytes)

			for _, tc := range []struct {
				name       string
				peer, tag  int
				head, body []byte
			}{
				{"to itself", 0, 5, []byte("h"), []byte("x")},
				{"past the eager limit", 1, 5, []byte("h"), make([]byte, 1024)},
				{"with a head past a ring line's room", 1, 5, make([]byte, 49), []byte("x")},
				{"to no rank", 2, 5, []byte("h"), []byte("x")},
				{"with a negative tag", 1, -1, []byte("h"), []byte("x")},
			} {
				sent, err := a.SendPartsNow(tc.peer, tc.tag, tc.head, tc.body)
				assert.NoError(t, err, tc.name)
				assert.False(t, sent, tc.name)
			}

			// Behind sends queued for want of credits it goes the general
			// way, in order.
			behindQueue(t, ctx, a, b, []byte{16, 16}, func(m []byte) (bool, error) { return a.SendPartsNow(1, 7, m[:1], m[1:]) },
				func(m []byte) (*p2p.Request, error) { return a.IsendParts(1, 7, m[:1], m[1:]) })
		})
	}
}

// nowPair starts two endpoints over prov with an eager limit of 1 KiB and 4
// credits, closed when the test ends, and returns a ctx bounding the test
// and each endpoint's channel 3.
func nowPair(t *testing.T, prov string) (context.Context, []*p2p.Endpoint, *p2p.Channel, *p2p.Channel) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: prov, P2P: p2p.Options{
		EagerLimit: 1024, EagerSlots: 4, LivenessTimeout: -1}})
	require.NoError(t, err)
	t.Cleanup(func() { p2ptest.Close(eps) })
	a, err := eps[0].Channel(3)
	require.NoError(t, err)
	b, err := eps[1].Channel(3)
	require.NoError(t, err)
	return ctx, eps, a, b
}

// behindQueue sends 16 one-byte messages from a to rank 1 with tag 7, more
// than the peer has credits for, then last by now or, when now says it
// did not, by late; b must receive all in order, last last.
func behindQueue(t *testing.T, ctx context.Context, a, b *p2p.Channel, last []byte,
	now func([]byte) (bool, error), late func([]byte) (*p2p.Request, error)) {
	t.Helper()
	const n = 16
	reqs := make([]*p2p.Request, n)
	for i := range n {
		var err error
		reqs[i], err = a.Isend(1, 7, []byte{byte(i)})
		require.NoError(t, err)
	}
	sent, err := now(last)
	require.NoError(t, err)
	if !sent {
		r, err := late(last)
		require.NoError(t, err)
		reqs = append(reqs, r)
	}
	got := make([]byte, 32)
	for i := range n + 1 {
		st, err := b.Recv(ctx, 0, 7, got)
		require.NoError(t, err)
		require.Equal(t, byte(i), got[0], "message %d out of order", i)
		if i == n {
			require.Equal(t, last, got[:st.Count])
		} else {
			require.Equal(t, 1, st.Count)
		}
	}
	require.NoError(t, p2p.WaitAll(ctx, reqs...))
}
