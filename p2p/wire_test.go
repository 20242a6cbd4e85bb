package p2p

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestFrameRoundTrip(t *testing.T) {
	for _, h := range []header{
		{kind: kEager, flags: flagAckCtrl, credits: 7, ctx: 3, tag: 99, size: 0},
		{kind: kEager, flags: flagMarked, ctx: 3, tag: 99, aux: 0xfffffff0},
		{kind: kRTS, flags: flagMarked | flagCanWrite, ctx: 1, tag: 1, size: 9, aux: 12, rkey: 1, id: 2},
		{kind: kRTS, credits: 1, ctx: 0xffff0000, tag: 1, size: 1 << 30, addr: 0xdeadbeef000, rkey: 42, id: 1 << 40},
		{kind: kFIN, aux: finTruncated, id: 77},
		{kind: kCancel, id: 78},
		{kind: kCredit, credits: 16},
		{kind: kPing}, {kind: kBye, aux: 3}, {kind: kRevoke, size: 5, aux: 2},
		{kind: kPipe, ctx: 2, tag: 5, size: 100, id: 9, addr: 99},
	} {
		b := make([]byte, h.frameLen())
		if h.kind == kPipe {
			b = append(b, 1) // a PIPE frame carries payload
		}
		h.put(b)
		var got header
		require.NoError(t, parseFrame(b, &got), "%v", h.kind)
		require.Equal(t, h, got)
	}
}

func TestFrameRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"short":        make([]byte, 10),
		"kind zero":    make([]byte, hdrLen),
		"unknown kind": append([]byte{200}, make([]byte, hdrLen-1)...),
		"eager short": func() []byte {
			b := make([]byte, eagerHdrLen)
			(&header{kind: kEager}).put(b)
			return b[:eagerHdrLen-1]
		}(),
		"marked eager short": func() []byte {
			b := make([]byte, markedLen)
			(&header{kind: kEager, flags: flagMarked, aux: 1}).put(b)
			return b[:markedLen-1]
		}(),
		"ping short":     func() []byte { b := make([]byte, hdrLen); (&header{kind: kPing}).put(b); return b[:eagerHdrLen] }(),
		"rts short":      func() []byte { b := make([]byte, hdrLen); (&header{kind: kPing}).put(b); b[0] = byte(kRTS); return b }(),
		"rts size 0":     func() []byte { b := make([]byte, rtsLen); (&header{kind: kRTS}).put(b); return b }(),
		"ping with tail": func() []byte { b := make([]byte, hdrLen+1); (&header{kind: kPing}).put(b); return b }(),
		"pipe empty":     func() []byte { b := make([]byte, pipeLen); (&header{kind: kPipe, size: 10}).put(b); return b }(),
		"pipe past end": func() []byte {
			b := make([]byte, pipeLen+4)
			(&header{kind: kPipe, size: 10, addr: 7}).put(b)
			return b
		}(),
		"pipe offset": func() []byte {
			b := make([]byte, pipeLen+1)
			(&header{kind: kPipe, size: 10, addr: 11}).put(b)
			return b
		}(),
		"pipe huge": func() []byte { b := make([]byte, pipeLen+1); (&header{kind: kPipe, size: 1 << 50}).put(b); return b }(),
	} {
		var h header
		require.Error(t, parseFrame(b, &h), name)
	}
}

func FuzzParseFrame(f *testing.F) {
	b := make([]byte, rtsLen)
	(&header{kind: kRTS, size: 100, id: 3}).put(b)
	f.Add(b)
	e := make([]byte, hdrLen+5)
	(&header{kind: kEager, size: 5}).put(e)
	f.Add(e)
	pf := make([]byte, pipeLen+3)
	(&header{kind: kPipe, size: 10, id: 4, addr: 7}).put(pf)
	f.Add(pf)
	f.Fuzz(func(t *testing.T, b []byte) {
		var h header
		if parseFrame(b, &h) != nil {
			return
		}
		// Whatever parses re-encodes to the same bytes (except EAGER payload).
		out := make([]byte, h.frameLen())
		h.put(out)
		n := h.frameLen()
		if h.kind == kRTS || h.kind == kCTS {
			copy(out[36:40], b[36:40]) // reserved word is not checked
		}
		require.Equal(t, b[:n], out)
	})
}

// A marked EAGER's payload starts after the mark, and its size excludes it.
func TestMarkedEagerPayload(t *testing.T) {
	h := header{kind: kEager, flags: flagMarked, ctx: 1, tag: 2, aux: 77}
	b := make([]byte, h.frameLen()+3)
	h.put(b)
	copy(b[h.frameLen():], "abc")
	var got header
	require.NoError(t, parseFrame(b, &got))
	require.Equal(t, uint64(3), got.size)
	require.Equal(t, uint32(77), got.aux)
	require.Equal(t, "abc", string(b[got.frameLen():]))
}
