package tcp

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// TestBatchStagesSmallPayloads: a batch copies the payloads up to
// stageMax next to their headers, so that a run of small frames (here
// WRITE_RUNs) is one buffer of the writev, and a larger payload is a
// buffer of its own between two runs; the writes arrive intact and in
// order.
func TestBatchStagesSmallPayloads(t *testing.T) {
	s, c, l := fakeLinkedSide(t, 8192)
	const big = stageMax + 1
	sizes := []int{8, 1, stageMax, big, 8, 16}
	wrs := make([]verbs.SendWR, len(sizes))
	off := 0
	for i, n := range sizes {
		for j := range n {
			s.mr.Bytes()[off+j] = byte(i*31 + j)
		}
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWrite,
			SGL: []verbs.SGE{verbs.SGEOf(s.mr, off, n)}, RemoteAddr: uint64(1<<20 + off), RKey: 5}
		off += n
	}
	q := s.qp.(*softrc.QP)
	q.HoldPosts()
	require.NoError(t, s.qp.PostSend(wrs...))
	// Asserted once the lock and the hold are let go: a failure with them
	// held would leave the device's Close waiting.
	l.wmu.Lock()
	k, err := l.batch(^uint32(0), false)
	var lens []int
	for _, b := range l.ss.bufs {
		lens = append(lens, len(b))
	}
	werr := l.write(l.ss.bufs)
	l.finishBatch(werr == nil)
	l.wmu.Unlock()
	q.ReleasePosts()
	require.NoError(t, err)
	require.NoError(t, werr)
	require.Equal(t, len(sizes), k)
	// A run of the first three writes and the header of the large one;
	// its payload; a run of the last two.
	run1 := HeaderLen + 3*softrc.RunDescLen + 8 + 1 + stageMax + HeaderLen
	run2 := HeaderLen + 2*softrc.RunDescLen + 8 + 16
	require.Equal(t, []int{run1, big, run2}, lens, "the writev's buffers")
	off = 0
	for i, w := range readWrites(t, c, len(sizes)) {
		n := sizes[i]
		require.Equal(t, softrc.FrameWrite, w.h.Op)
		require.Equal(t, uint64(1<<20+off), w.h.RAddr, "write %d out of order", i)
		require.Equal(t, s.mr.Bytes()[off:off+n], w.body, fmt.Sprintf("write %d's payload", i))
		off += n
	}
}
