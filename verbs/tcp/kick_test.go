package tcp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// fakeLinkedSide is a side with an n-byte region whose QP is connected to
// a fake peer (the returned conn, closed at the test's end), and its link.
func fakeLinkedSide(t *testing.T, n int) (*side2, net.Conn, *link) {
	t.Helper()
	o := testOptions()
	dev := openDev(t, o)
	s := bigSide(t, dev, n)
	c := fakePeer(t, dev, s.qp, o.Token)
	t.Cleanup(func() { c.Close() })
	return s, c, attachedLink(t, s.qp)
}

// readFrameFrom reads one frame the QP sent to the fake peer c.
func readFrameFrom(t *testing.T, c net.Conn) (softrc.Header, []byte) {
	t.Helper()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(10*time.Second)))
	hb := make([]byte, HeaderLen)
	_, err := io.ReadFull(c, hb)
	require.NoError(t, err)
	h, err := DecodeHeader(hb, 1<<30)
	require.NoError(t, err)
	body := make([]byte, h.PayloadLen())
	_, err = io.ReadFull(c, body)
	require.NoError(t, err)
	return h, body
}

// sentWrite is one WRITE the QP sent to the fake peer, alone or in a run.
type sentWrite struct {
	h    softrc.Header
	body []byte
}

// readWritesFrom reads the next frame the QP sent to c, a WRITE or a
// WRITE_RUN, and returns its writes: a run's each as the WRITE frame it
// stands for (its own sequence number, address, key and payload).
func readWritesFrom(t *testing.T, c net.Conn) []sentWrite {
	t.Helper()
	h, body := readFrameFrom(t, c)
	if h.Op != softrc.FrameWriteRun {
		return []sentWrite{{h, body}}
	}
	k := int(h.Imm)
	desc, data := body[:k*softrc.RunDescLen], body[k*softrc.RunDescLen:]
	ws := make([]sentWrite, 0, k)
	for i := range k {
		d := desc[i*softrc.RunDescLen:]
		n := binary.BigEndian.Uint32(d[12:])
		require.LessOrEqual(t, int(n), len(data), "write %d of the run overruns its body", i)
		ws = append(ws, sentWrite{softrc.Header{Op: softrc.FrameWrite, QPN: h.QPN, Seq: h.Seq + uint32(i), Len: n,
			RAddr: binary.BigEndian.Uint64(d), RKey: binary.BigEndian.Uint32(d[8:])}, data[:n]})
		data = data[n:]
	}
	require.Empty(t, data, "the run's body is longer than its writes")
	return ws
}

// readWrites reads frames from c until it has n writes (runs expanded).
func readWrites(t *testing.T, c net.Conn, n int) []sentWrite {
	t.Helper()
	var ws []sentWrite
	for len(ws) < n {
		ws = append(ws, readWritesFrom(t, c)...)
	}
	require.Len(t, ws, n, "more writes than posted")
	return ws
}

// TestReadLimitedRequestWakesNoWriter: a READ that must wait because as
// many READs are outstanding as the peer takes (MaxQPRdAtomic 1) is no work
// the link can do: neither the post that queued it nor the completion of an
// earlier request while it waits hands anything to the writer goroutine;
// the response that lets it go has the reading side write it at once
// (Kick writes inline); and both READs complete intact.
func TestReadLimitedRequestWakesNoWriter(t *testing.T) {
	const n = 4096
	a, mr, c := fakeTargetWith(t, testOptions(), 2*n, 0)
	l := attachedLink(t, a.qp)
	q := a.qp.(*softrc.QP)
	copy(mr.Bytes()[2*n-8:], "written!")
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(mr, 2*n-8, 8)}, RemoteAddr: 1 << 30, RKey: 5}))
	for i := range 2 {
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(10 + i), Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(mr, i*n, n-8)}, RemoteAddr: uint64(1<<20 + i*n), RKey: 7}))
	}
	w, body := readFrameFrom(t, c)
	require.Equal(t, softrc.FrameWrite, w.Op)
	require.Equal(t, "written!", string(body))
	r1, _ := readFrameFrom(t, c)
	require.Equal(t, softrc.FrameReadReq, r1.Op)
	require.Equal(t, uint64(1<<20), r1.RAddr)
	require.False(t, q.HasWork(), "a READ beyond the outstanding-READ limit counts as work that could go")

	// The WRITE's ACK completes it while the second READ still waits.
	ack := make([]byte, HeaderLen)
	EncodeHeader(ack, &softrc.Header{Op: softrc.FrameAck, QPN: a.qp.Num(), Seq: w.Seq})
	_, err := c.Write(ack)
	require.NoError(t, err)
	wc := wait(t, a.cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status)
	require.Equal(t, uint64(1), wc.ID)

	// The first READ's response lets the second go.
	resp := func(h softrc.Header, seed byte) []byte {
		f := make([]byte, HeaderLen+n-8)
		EncodeHeader(f, &softrc.Header{Op: softrc.FrameReadResp, QPN: a.qp.Num(), Seq: h.Seq, Len: n - 8})
		for i := range n - 8 {
			f[HeaderLen+i] = byte(i) ^ seed
		}
		return f
	}
	f1 := resp(r1, 0x5a)
	_, err = c.Write(f1)
	require.NoError(t, err)
	r2, _ := readFrameFrom(t, c)
	require.Equal(t, softrc.FrameReadReq, r2.Op)
	require.Equal(t, uint64(1<<20+n), r2.RAddr)
	f2 := resp(r2, 0xa5)
	_, err = c.Write(f2)
	require.NoError(t, err)
	for i, f := range [][]byte{f1, f2} {
		wc := wait(t, a.cq)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, uint64(10+i), wc.ID)
		require.True(t, bytes.Equal(f[HeaderLen:], mr.Bytes()[i*n:i*n+n-8]), "READ %d not placed intact", i)
	}
	require.Zero(t, l.writerKicks.Load(), "work went to the writer goroutine")
}

// TestKickPostWritesWholePost: a post of more requests than one batch
// takes (maxBatch) is written by the posting goroutine in several batches,
// in order, none of it left to the writer goroutine.
func TestKickPostWritesWholePost(t *testing.T) {
	const count = maxBatch + 8
	s, c, l := fakeLinkedSide(t, 4096)
	wrs := make([]verbs.SendWR, count)
	for i := range wrs {
		wrs[i] = verbs.SendWR{ID: uint64(i), Opcode: verbs.OpRDMAWrite,
			SGL: []verbs.SGE{verbs.SGEOf(s.mr, 8*i, 8)}, RemoteAddr: uint64(1<<20 + 8*i), RKey: 5}
		copy(s.mr.Bytes()[8*i:], fmt.Sprintf("write%03d", i))
	}
	require.NoError(t, s.qp.PostSend(wrs...))
	for i, w := range readWrites(t, c, count) {
		require.Equal(t, softrc.FrameWrite, w.h.Op)
		require.Equal(t, uint64(1<<20+8*i), w.h.RAddr, "write %d out of order", i)
		require.Equal(t, fmt.Sprintf("write%03d", i), string(w.body))
	}
	require.Zero(t, l.writerKicks.Load(), "part of the post went to the writer goroutine")
}
