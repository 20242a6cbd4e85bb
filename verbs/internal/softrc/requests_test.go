package softrc_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// TestNextRequestsTakesARunInOrder: NextRequests hands out the queued
// requests in posting order with consecutive sequence numbers, stops at
// the first larger than max (leaving it queued) and at the end of rs, as
// NextRequestMax called in a loop would.
func TestNextRequestsTakesARunInOrder(t *testing.T) {
	d := &fakeDriver{intr: make(chan struct{}, 1)} // Kick does nothing: nothing is sent unless pulled here
	pd, qp, _ := selfConnected(t, d, fakeConfig, verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64})
	mr, err := pd.AllocMR(4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	big := bytes.Repeat([]byte{'z'}, 200)
	copy(mr.Bytes(), big)
	inline := func(s string) verbs.SendWR {
		return verbs.SendWR{Opcode: verbs.OpRDMAWrite, Flags: verbs.SendInline, Inline: []byte(s), RemoteAddr: mr.Addr(), RKey: mr.RKey()}
	}
	require.NoError(t, qp.PostSend(inline("a"), inline("bc"),
		verbs.SendWR{Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(mr, 0, len(big))}, RemoteAddr: mr.Addr(), RKey: mr.RKey()},
		inline("d")))
	q := qp.(*softrc.QP)
	rs := make([]softrc.Request, 8)
	payload := func(r *softrc.Request) string { return string(bytes.Join(r.Data, nil)) }

	n := q.NextRequests(rs, 100)
	require.Equal(t, 2, n, "the third request is larger than max")
	require.Equal(t, "a", payload(&rs[0]))
	require.Equal(t, "bc", payload(&rs[1]))
	require.Equal(t, rs[0].Seq+1, rs[1].Seq)
	for i := range n {
		require.Equal(t, softrc.FrameWrite, rs[i].Op)
		require.Equal(t, mr.RKey(), rs[i].RKey)
	}
	seq := rs[1].Seq
	rs[0].Done()
	rs[1].Done()

	require.Equal(t, 1, q.NextRequests(rs[:1], ^uint32(0)), "rs of one takes one")
	require.Equal(t, string(big), payload(&rs[0]))
	require.Equal(t, seq+1, rs[0].Seq)
	rs[0].Done()

	require.Equal(t, 1, q.NextRequests(rs, 100))
	require.Equal(t, "d", payload(&rs[0]))
	require.Equal(t, seq+2, rs[0].Seq)
	rs[0].Done()
	require.Zero(t, q.NextRequests(rs, 100), "the queue is empty")
}
