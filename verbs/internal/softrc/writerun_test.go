package softrc_test

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// fence posts a signaled WRITE of no bytes to b's region: its completion
// says every request before it on a's QP completed.
func fence(t *testing.T, a, b *end, id uint64) verbs.WC {
	t.Helper()
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled | verbs.SendInline,
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}))
	return wait(t, a.scq)
}

// TestWriteRunPlacesInOrder: a run's writes land where each says, in
// order (a later write to the same bytes wins), without a completion of
// its own; the signaled request after it completes it, and the run's
// bytes were copied at post time.
func TestWriteRunPlacesInOrder(t *testing.T) {
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	rw, ok := a.qp.(verbs.RunWriter)
	require.True(t, ok, "softrc QPs write runs")
	base, key := b.mr.Addr(), b.mr.RKey()
	var run verbs.WriteRun
	run.Add(base+100, key, []byte("hello"))
	run.Add(base+0, key, []byte{1, 2, 3})
	run.Add(base+101, key, []byte("ELLO, world"))
	src := bytes.Repeat([]byte{7}, 200)
	run.Add(base+1000, key, src)
	require.NoError(t, rw.PostWriteRun(9, &run))
	clear(run.Data) // copied: what the run had stays what lands
	src[0] = 8
	wc := fence(t, a, b, 10)
	assert.Equal(t, verbs.StatusSuccess, wc.Status)
	assert.Equal(t, uint64(10), wc.ID)
	requireEmpty(t, a.scq)
	mem := b.mr.Bytes()
	assert.Equal(t, []byte{1, 2, 3}, mem[:3])
	assert.Equal(t, "hELLO, world", string(mem[100:112]))
	assert.Equal(t, bytes.Repeat([]byte{7}, 200), mem[1000:1200])

	// Sequence numbers: requests after a run are the peer's next ones.
	run.Reset()
	for i := range 5 {
		run.Add(base+uint64(2000+i), key, []byte{byte(10 + i)})
	}
	require.NoError(t, rw.PostWriteRun(11, &run))
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 12, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendInline | verbs.SendSignaled,
		Inline: []byte{99}, RemoteAddr: base + 2005, RKey: key}))
	wc = wait(t, a.scq)
	assert.Equal(t, verbs.WC{ID: 12, Opcode: verbs.WCRDMAWrite, ByteLen: 1, QPNum: a.qp.Num()}, wc)
	assert.Equal(t, []byte{10, 11, 12, 13, 14, 99}, mem[2000:2006])
}

// TestWriteRunFailsAtBadWrite: a write the target refuses fails the whole
// run with one error completion carrying the run's id; the writes before
// it land and none after it do.
func TestWriteRunFailsAtBadWrite(t *testing.T) {
	a, b := pair(t, cfg{}, cfg{}, opts(), opts())
	rw := a.qp.(verbs.RunWriter)
	base, key := b.mr.Addr(), b.mr.RKey()
	var run verbs.WriteRun
	run.Add(base, key, []byte{1})
	run.Add(base+1, key, []byte{2})
	run.Add(base+uint64(len(b.mr.Bytes())), key, []byte{3}) // past the region
	run.Add(base+3, key, []byte{4})
	require.NoError(t, rw.PostWriteRun(21, &run))
	wc := wait(t, a.scq)
	assert.Equal(t, uint64(21), wc.ID)
	assert.Equal(t, verbs.StatusRemAccessErr, wc.Status)
	assert.Equal(t, []byte{1, 2, 0, 0}, b.mr.Bytes()[:4])
	assert.Equal(t, verbs.QPErr, a.qp.State())
	// Later runs flush, each with its id.
	require.NoError(t, rw.PostWriteRun(22, &run))
	wc = wait(t, a.scq)
	assert.Equal(t, uint64(22), wc.ID)
	assert.Equal(t, verbs.StatusWRFlushErr, wc.Status)
}

// TestWriteRunPostErrors: runs the QP refuses at post time, naming why.
func TestWriteRunPostErrors(t *testing.T) {
	a, b := pair(t, cfg{qpCap: verbs.QPCap{MaxSendWR: 2, MaxRecvWR: 2, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}}, cfg{}, opts(), opts())
	rw := a.qp.(verbs.RunWriter)
	writes, limit := rw.RunLimits()
	require.Equal(t, softrc.RunMax, writes)
	require.Equal(t, softrc.RunBytesMax-softrc.RunMax*softrc.RunDescLen, limit)
	base, key := b.mr.Addr(), b.mr.RKey()
	many := verbs.WriteRun{}
	for range writes + 1 {
		many.Add(base, key, []byte{1})
	}
	big := verbs.WriteRun{}
	big.Add(base, key, make([]byte, limit+1))
	short := verbs.WriteRun{}
	short.Add(base, key, []byte{1, 2})
	short.Data = short.Data[:1]
	empty := verbs.WriteRun{Writes: []verbs.RunWrite{{RemoteAddr: base, RKey: key}}}
	for _, c := range []struct {
		name string
		run  *verbs.WriteRun
		want string
	}{
		{"no writes", &verbs.WriteRun{}, "a run of 0 writes"},
		{"too many writes", &many, "a run of 257 writes"},
		{"too many bytes", &big, "a run of 61441 bytes (max 61440)"},
		{"data short", &short, "add up to 2 bytes, its Data has 1"},
		{"write of no bytes", &empty, "write 0 of the run has no bytes"},
	} {
		err := rw.PostWriteRun(1, c.run)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
	}
	var one verbs.WriteRun
	one.Add(base, key, []byte{1})
	require.NoError(t, rw.PostWriteRun(1, &one))
	require.NoError(t, rw.PostWriteRun(2, &one))
	require.ErrorIs(t, rw.PostWriteRun(3, &one), verbs.ErrQueueFull)

	s, _ := pair(t, cfg{sigAll: true}, cfg{}, opts(), opts())
	require.ErrorIs(t, s.qp.(verbs.RunWriter).PostWriteRun(1, &one), verbs.ErrInvalidArgument)
	idle := newEnd(t, cfg{})
	require.ErrorIs(t, idle.qp.(verbs.RunWriter).PostWriteRun(1, &one), verbs.ErrInvalidState)
}
