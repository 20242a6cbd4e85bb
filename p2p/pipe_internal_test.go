package p2p

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A pipelined send is canceled only while none of its fragments has gone,
// and then all of them leave the queue.
func TestPipeUnqueue(t *testing.T) {
	ep := &Endpoint{}
	p := &peer{slot: hdrLen + 256} // no free staging slot: everything queues
	r := &Request{ep: ep, op: opSend}
	require.NoError(t, p.sendPipe(ep, r, 0, 1, make([]byte, 1000)))
	require.Len(t, p.queue, 5) // 240-byte fragments
	other := &outItem{h: header{kind: kEager}}
	p.queue = append(p.queue, other)
	for i, it := range p.queue[:5] {
		require.Equal(t, uint64(i*240), it.h.addr)
		require.Equal(t, i == 4, it.complete)
	}
	require.True(t, p.unqueue(r))
	require.Equal(t, []*outItem{other}, p.queue)

	// The first fragment has been posted: too late.
	p.queue = nil
	r2 := &Request{ep: ep, op: opSend}
	require.NoError(t, p.sendPipe(ep, r2, 0, 1, make([]byte, 1000)))
	p.queue = p.queue[1:]
	require.False(t, p.unqueue(r2))
	require.Len(t, p.queue, 4)
}
