//go:build linux

package softrc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/verbs"
)

// TestPostedBuffersMapped: a receive buffer of provider memory (mapped
// lazily by the kernel) has its pages mapped when it is posted, not at its
// first message, and only those pages; reposting it maps nothing more.
func TestPostedBuffersMapped(t *testing.T) {
	const page = 4096
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	mr, err := b.pd.AllocMR(64*page, allRemote)
	require.NoError(t, err)
	count := func(lo, hi int) (n int) {
		t.Helper()
		p, err := ntcopy.Present(mr.Bytes()[lo*page : hi*page])
		require.NoError(t, err)
		for _, x := range p {
			if x {
				n++
			}
		}
		return n
	}
	require.Zero(t, count(0, 64), "a fresh MR is not mapped yet")
	post := func(id uint64) {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: id, SGL: []verbs.SGE{verbs.SGEOf(mr, 8*page, 4*page)}}))
	}
	post(1)
	require.Equal(t, 4, count(8, 12), "posted pages")
	require.Zero(t, count(0, 8)+count(12, 64), "others")

	copy(a.mr.Bytes(), "first")
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 9, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 5)}}))
	require.Equal(t, verbs.StatusSuccess, wait(t, a.scq).Status)
	wc := wait(t, b.rcq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, "first", string(mr.Bytes()[8*page:8*page+5]))
	post(2)
	require.Equal(t, 4, count(0, 64), "a repost maps nothing more")
}
