package tcp

import (
	"bytes"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// fakeSteer steers the bodies of SENDs whose head starts with "steer" into
// buffers of its own, and records what it was asked.
type fakeSteer struct {
	mu       sync.Mutex
	ids      []uint64
	heads    [][]byte
	bodies   [][][]byte // each steered body's pieces
	steered  []bool
	wrongLen bool
}

// Steer takes a body in two buffers of its own, the first of 3 bytes, as
// a consumer steers a message's head apart from its body.
func (f *fakeSteer) Steer(id uint64, head []byte, rest int) [][]byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ids = append(f.ids, id)
	f.heads = append(f.heads, bytes.Clone(head))
	if !bytes.HasPrefix(head, []byte("steer")) {
		return nil
	}
	k := min(3, rest)
	b := [][]byte{make([]byte, k), make([]byte, rest-k)}
	if f.wrongLen {
		b[1] = b[1][:len(b[1])-1]
	}
	f.bodies = append(f.bodies, b)
	return b
}

// body is the i-th steered body, its pieces joined.
func (f *fakeSteer) body(i int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Join(f.bodies[i], nil)
}

func (f *fakeSteer) Steered(ok bool) {
	f.mu.Lock()
	f.steered = append(f.steered, ok)
	f.mu.Unlock()
}

// With a SendSteer on the receiving QP, a SEND longer than the prefix has
// its first prefix bytes read into the receive buffer and the rest where
// the steer says (a small body from the read buffer, a large one from the
// socket), or into the receive buffer after the prefix when the steer
// says nothing; a SEND no longer than the prefix is not shown to the
// steer. The receive completes with the SEND's whole length either way.
// After SteerSends(0, nil) nothing is steered.
func TestSendSteer(t *testing.T) {
	const prefix = 8
	a, _ := lentSide(t, 64)
	b, rmr := lentSide(t, 1<<20)
	connectPair(t, a, b, verbs.DefaultConnectOptions())
	ss, ok := b.qp.(verbs.SendSteerer)
	require.True(t, ok, "the tcp QP is a SendSteerer")
	f := &fakeSteer{}
	ss.SteerSends(prefix, f)
	smr, err := a.pd.AllocMR(1<<20, verbs.AccessLocalWrite)
	require.NoError(t, err)

	send := func(id uint64, msg []byte) verbs.WC {
		t.Helper()
		clear(rmr.Bytes())
		for i := range rmr.Bytes() {
			rmr.Bytes()[i] = 0xee
		}
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: id, SGL: []verbs.SGE{verbs.SGEOf(rmr, 0, 1<<20)}}))
		copy(smr.Bytes(), msg)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(smr, 0, len(msg))}}))
		require.Equal(t, verbs.StatusSuccess, wait(t, a.cq).Status)
		return wait(t, b.cq)
	}
	for i, n := range []int{100, 300 << 10} {
		body := bytes.Repeat([]byte{byte(i + 1)}, n)
		msg := append([]byte("steer..."), body...)
		wc := send(uint64(10+i), msg)
		require.Equal(t, verbs.StatusSuccess, wc.Status)
		require.Equal(t, len(msg), int(wc.ByteLen))
		require.Equal(t, msg[:prefix], rmr.Bytes()[:prefix], "%d bytes: the prefix is in the receive buffer", n)
		require.Equal(t, byte(0xee), rmr.Bytes()[prefix], "%d bytes: the body went into the receive buffer too", n)
		require.Len(t, f.bodies, i+1)
		require.True(t, bytes.Equal(body, f.body(i)), "%d bytes: the steered body, in its two buffers", n)
		require.Equal(t, uint64(10+i), f.ids[len(f.ids)-1], "the id of the receive the SEND took")
		require.Equal(t, []bool{true}, f.steered[i:])
	}

	// Declined: everything in the receive buffer.
	msg := append([]byte("plain..."), bytes.Repeat([]byte{9}, 5000)...)
	wc := send(20, msg)
	require.Equal(t, len(msg), int(wc.ByteLen))
	require.Equal(t, msg, rmr.Bytes()[:len(msg)])
	asked := len(f.heads)
	require.Equal(t, []byte("plain..."), f.heads[asked-1])
	require.Len(t, f.steered, 2, "Steered after a declined Steer")

	// No longer than the prefix: not shown.
	send(21, []byte("steer..."))
	require.Len(t, f.heads, asked)
	// Steering off.
	ss.SteerSends(0, nil)
	msg = append([]byte("steer..."), 1, 2, 3)
	wc = send(22, msg)
	require.Equal(t, msg, rmr.Bytes()[:len(msg)])
	require.Equal(t, len(msg), int(wc.ByteLen))
	require.Len(t, f.heads, asked)

	// A steer that names a buffer of the wrong length breaks the
	// connection: the receive fails, and the steer hears of it.
	f.wrongLen = true
	ss.SteerSends(prefix, f)
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 30, SGL: []verbs.SGE{verbs.SGEOf(rmr, 0, 1<<20)}}))
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 30, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{verbs.SGEOf(smr, 0, 100)}}))
	copy(smr.Bytes(), "steer...")
	require.NotEqual(t, verbs.StatusSuccess, wait(t, b.cq).Status)
	f.mu.Lock()
	require.Equal(t, false, f.steered[len(f.steered)-1])
	f.mu.Unlock()
}
