//go:build linux

package shm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/ntcopy"
	"github.com/rdmago/rdmago/verbs"
)

// TestPostedBuffersMappedAhead: the pages of receive buffers in provider
// memory are mapped before their first SEND, in the owner's process when
// it posts them and in the sender's when it connects, so that the first
// messages through fresh buffers do not pay a page fault per page in each
// process; pages nobody posted stay unmapped in both, and a buffer posted
// after the connection is mapped by its owner and reached by the sender
// at its first use as before.
func TestPostedBuffersMappedAhead(t *testing.T) {
	const page = 4096
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	present := func(m []byte) []bool {
		t.Helper()
		p, err := ntcopy.Present(m)
		require.NoError(t, err)
		return p
	}
	count := func(p []bool) (n int) {
		for _, x := range p {
			if x {
				n++
			}
		}
		return n
	}
	// Far from the pages the connection reads (the segment, the region
	// table), whose faults also map the neighbours the page cache holds.
	big, err := b.pd.AllocMR(1<<20, allAccess)
	require.NoError(t, err)
	const at = 512 << 10
	mine := big.Bytes()[at : at+16*page]
	require.Zero(t, count(present(mine)), "a fresh MR is not mapped yet")
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: allAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	require.NoError(t, b.qp.PostRecv(
		verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(big, at, 4*page)}},
		verbs.RecvWR{ID: 2, SGL: []verbs.SGE{verbs.SGEOf(big, at+4*page, 4*page)}}))
	p := present(mine)
	require.Equal(t, 8, count(p[:8]), "the owner maps what it posts: %v", p)
	require.Zero(t, count(p[8:]), "and nothing else: %v", p)

	connectPair(t, a, b)
	off := big.(*mr).off + at
	theirs := a.qp.linkPtr().mem[off : off+16*page]
	p = present(theirs)
	require.Equal(t, 8, count(p[:8]), "the sender maps the posted receives when it connects: %v", p)
	require.Zero(t, count(p[8:]), "and nothing else: %v", p)

	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 3, SGL: []verbs.SGE{verbs.SGEOf(big, at+8*page, 4*page)}}))
	require.Equal(t, 12, count(present(mine)[:12]), "posted after the connection: mapped by its owner")
	for i, id := range []uint64{1, 2, 3} {
		data := pattern(4*page, byte(i+1))
		copy(a.mr.Bytes(), data)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 10 + id, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, len(data))}}))
		okWC(t, a.scq, 10+id)
		require.Equal(t, 4*page, int(okWC(t, b.rcq, id).ByteLen))
		require.Equal(t, data, mine[i*4*page:(i+1)*4*page], "receive %d", id)
	}
}

// TestPrefaultBudget: past the device's budget (PrefaultBytes), posted
// buffers are left to their first access, in the owner and in the sender,
// and still take their messages.
func TestPrefaultBudget(t *testing.T) {
	const page = 4096
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	a.dev.touch, b.dev.touch = ntcopy.NewBudget(4*page), ntcopy.NewBudget(6*page)
	big, err := b.pd.AllocMR(1<<20, allAccess)
	require.NoError(t, err)
	const at = 512 << 10
	require.NoError(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: allAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	require.NoError(t, b.qp.PostRecv(
		verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(big, at, 4*page)}},
		verbs.RecvWR{ID: 2, SGL: []verbs.SGE{verbs.SGEOf(big, at+4*page, 4*page)}}))
	p, err := ntcopy.Present(big.Bytes()[at : at+8*page])
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, true, true, true, false, false}, p, "the owner stops at its budget")
	connectPair(t, a, b)
	off := big.(*mr).off + at
	p, err = ntcopy.Present(a.qp.linkPtr().mem[off : off+8*page])
	require.NoError(t, err)
	// (Pages 4 and 5 may come along with a read fault nearby, which also
	// maps the neighbours the page cache holds: the owner's.)
	require.Equal(t, []bool{true, true, true, true}, p[:4], "the sender maps the first receive")
	require.Equal(t, []bool{false, false}, p[6:], "then stops")
	data := pattern(4*page, 7)
	for _, id := range []uint64{1, 2} {
		copy(a.mr.Bytes(), data)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 10 + id, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, len(data))}}))
		okWC(t, a.scq, 10+id)
		require.Equal(t, 4*page, int(okWC(t, b.rcq, id).ByteLen))
	}
	require.Equal(t, data, big.Bytes()[at+4*page:at+8*page])
}
