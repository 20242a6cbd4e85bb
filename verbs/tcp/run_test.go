package tcp

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// A window of small WRITEs that ask for no ACK goes as WRITE_RUN frames
// (docs/wire-tcp.md); these run it between two devices.

// TestWriteRunLands: small unsignaled WRITEs posted together, inline and
// from registered memory, of 1 to 512 bytes, go as a run and land intact
// in their places; a larger one and the signaled one after them go alone.
func TestWriteRunLands(t *testing.T) {
	a, b := connected(t, verbs.DefaultConnectOptions())
	requireWorks(t, a, b) // the link is up: the post below is written at once, in one batch
	l := attachedLink(t, a.qp)
	runs := l.runs.Load()
	sizes := []int{1, 8, 64, 512, 513, 3, 16}
	var wrs []verbs.SendWR
	off := 0
	for i, n := range sizes {
		for j := range n {
			a.mr.Bytes()[off+j] = byte(i*37 + j + 1)
		}
		wr := verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWrite, RemoteAddr: b.mr.Addr() + uint64(off) + 7, RKey: b.mr.RKey()}
		if n <= 64 {
			wr.Flags, wr.Inline = verbs.SendInline, a.mr.Bytes()[off:off+n]
		} else {
			wr.SGL = []verbs.SGE{verbs.SGEOf(a.mr, off, n)}
		}
		wrs = append(wrs, wr)
		off += n
	}
	wrs[len(wrs)-1].Flags |= verbs.SendSignaled
	clear(b.mr.Bytes())
	require.NoError(t, a.qp.PostSend(wrs...))
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint64(len(sizes)-1), wc.ID)
	require.True(t, bytes.Equal(a.mr.Bytes()[:off], b.mr.Bytes()[7:7+off]), "the writes did not land intact")
	require.Zero(t, b.mr.Bytes()[7+off], "a write overran its place")
	// 1, 8, 64, 512 in one run; 513 alone; 3 and the signaled 16 alone.
	require.Equal(t, runs+1, l.runs.Load(), "WRITE_RUN frames written")
}

// TestWriteRunStopsAtTheBadWrite: in a run whose third write names a
// wrong rkey, the two before it land, it completes with REM_ACCESS_ERR
// (the responder NAKs it and goes to ERR), and the rest are flushed,
// landing nothing.
func TestWriteRunStopsAtTheBadWrite(t *testing.T) {
	a, b := connected(t, verbs.DefaultConnectOptions())
	requireWorks(t, a, b)
	l := attachedLink(t, a.qp)
	runs := l.runs.Load()
	const n, count = 8, 6
	var wrs []verbs.SendWR
	for i := range count {
		copy(a.mr.Bytes()[n*i:], bytes.Repeat([]byte{byte('a' + i)}, n))
		wrs = append(wrs, verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWrite, Flags: verbs.SendInline,
			Inline: a.mr.Bytes()[n*i : n*i+n], RemoteAddr: b.mr.Addr() + uint64(n*i), RKey: b.mr.RKey()})
	}
	wrs[2].RKey ^= 0xff
	wrs[count-1].Flags |= verbs.SendSignaled
	clear(b.mr.Bytes())
	require.NoError(t, a.qp.PostSend(wrs...))
	wc := wait(t, a.cq)
	require.Equal(t, uint64(2), wc.ID)
	require.Equal(t, verbs.StatusRemAccessErr, wc.Status)
	for i := 3; i < count; i++ {
		wc = wait(t, a.cq)
		require.Equal(t, uint64(i), wc.ID)
		require.Equal(t, verbs.StatusWRFlushErr, wc.Status)
	}
	require.Equal(t, "aaaaaaaabbbbbbbb", string(b.mr.Bytes()[:2*n]), "the writes before the bad one")
	require.Equal(t, make([]byte, (count-2)*n), b.mr.Bytes()[2*n:count*n], "a write at or after the bad one landed")
	require.Equal(t, verbs.QPErr, b.qp.State(), "responder QP")
	require.Equal(t, runs+1, l.runs.Load(), "WRITE_RUN frames written")
}
