package bootstrap

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sampleFrames has one frame of every type.
func sampleFrames() []msg {
	var n [nonceLen]byte
	copy(n[:], "nonce-nonce-nonce-nonce-nonce-32")
	return []msg{
		{typ: tHello, nonce: n},
		{typ: tChallenge, nonce: n, mac: n},
		{typ: tProof, mac: n},
		{typ: tJoin, rank: 3, size: 8, key: "v0.1.0", config: "tcp;mtu=4096", host: "node7", hostID: "boot/netns:4:1"},
		{typ: tWelcome, values: [][]byte{[]byte("a"), []byte("id-a"), []byte("10.0.0.1"), []byte("b"), []byte("id-b"), []byte("10.0.0.2")}},
		{typ: tPut, id: 1, key: "qp/3", value: []byte{1, 2, 3}},
		{typ: tGet, id: 2, key: "qp/4"},
		{typ: tAdd, id: 3, key: "n", delta: -5},
		{typ: tColl, id: 4, seq: 9, kind: kindAllgather, key: "qp", value: []byte("addr")},
		{typ: tColl, id: 4, seq: 10, kind: kindFence},
		{typ: tCancel, id: 5},
		{typ: tStatus, id: 6, seq: joinSeq},
		{typ: tAbort, id: 7, code: -2, key: "reason"},
		{typ: tBye},
		{typ: tOK, id: 8},
		{typ: tValue, id: 9, value: []byte("v")},
		{typ: tCount, id: 10, delta: 1 << 40},
		{typ: tGathered, id: 11, values: [][]byte{[]byte("x"), {}, []byte("zz")}},
		{typ: tMissing, id: 12, ranks: []uint32{3, 7}, gone: []uint32{1}},
		{typ: tError, id: 13, ecode: ecMismatch, key: "rank 2 has ...", ranks: []uint32{2}},
		{typ: tAborted, rank: 1, code: 3, key: "oom"},
		{typ: tShutdown, key: "bye"},
	}
}

// normalize makes nil and empty slices compare equal.
func normalize(m msg) msg {
	if len(m.value) == 0 {
		m.value = nil
	}
	if len(m.ranks) == 0 {
		m.ranks = nil
	}
	if len(m.gone) == 0 {
		m.gone = nil
	}
	if len(m.values) == 0 {
		m.values = nil
	}
	for i, v := range m.values {
		if len(v) == 0 {
			m.values[i] = []byte{}
		}
	}
	m.magicOK = false
	return m
}

func TestWireRoundTrip(t *testing.T) {
	for _, m := range sampleFrames() {
		b := m.encode(nil)
		assert.Equal(t, uint32(len(b)-4), binary.BigEndian.Uint32(b), "type %#x", m.typ)
		got, err := readFrame(bufio.NewReader(bytes.NewReader(b)), 1<<20)
		require.NoError(t, err, "type %#x", m.typ)
		assert.Equal(t, normalize(m), normalize(got), "type %#x", m.typ)
		// Every strict prefix of the body is rejected.
		for cut := 1; cut < len(b)-5; cut++ {
			_, err := decode(b[4], b[5:5+cut-1])
			if len(b)-5 == cut-1 {
				continue
			}
			assert.ErrorIs(t, err, ErrProtocol, "type %#x cut %d", m.typ, cut)
		}
		// A trailing byte is rejected.
		_, err = decode(b[4], append(append([]byte{}, b[5:]...), 0))
		assert.ErrorIs(t, err, ErrProtocol, "type %#x trailing", m.typ)
	}
}

func TestWireRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty frame":      {0, 0, 0, 0},
		"too large":        {0, 0, 0x10, 0x01, tPut},
		"unknown type":     {0, 0, 0, 1, 0xee},
		"bad magic":        append([]byte{0, 0, 0, 38, tHello}, make([]byte, 37)...),
		"long key":         append([]byte{0, 0, 0, 7, tGet, 0, 0, 0, 1, 0x01, 0x01}, make([]byte, 0)...),
		"lying count":      {0, 0, 0, 9, tGathered, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff},
		"bad kind":         {0, 0, 0, 14, tColl, 0, 0, 0, 1, 0, 0, 0, 0, 9, 0, 0, 0, 0},
		"truncated stream": {0, 0, 0, 9, tPut, 0},
	} {
		_, err := readFrame(bufio.NewReader(bytes.NewReader(b)), 4096)
		require.Error(t, err, name)
		if name == "truncated stream" {
			assert.ErrorIs(t, err, io.ErrUnexpectedEOF)
		} else {
			assert.ErrorIs(t, err, ErrProtocol, name)
		}
	}
	_, err := readFrame(bufio.NewReader(bytes.NewReader([]byte{0, 0, 0x10, 0x01, tPut})), 4096)
	assert.True(t, errors.Is(err, errFrameTooLarge))
}

// FuzzDecodeFrame feeds arbitrary bytes to the frame reader: it must never
// panic, and whatever it accepts must survive a round trip.
func FuzzDecodeFrame(f *testing.F) {
	for _, m := range sampleFrames() {
		f.Add(m.encode(nil))
	}
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add([]byte{0, 0, 0, 9, tGathered, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := readFrame(bufio.NewReader(bytes.NewReader(data)), 1<<16)
		if err != nil {
			return
		}
		b := m.encode(nil)
		m2, err := readFrame(bufio.NewReader(bytes.NewReader(b)), 1<<16)
		if err != nil {
			t.Fatalf("re-encoded frame %x does not decode: %v", b, err)
		}
		if !assert.ObjectsAreEqual(normalize(m), normalize(m2)) {
			t.Fatalf("round trip changed the frame:\n%+v\n%+v", m, m2)
		}
	})
}

func TestGatheredSplitEncoding(t *testing.T) {
	for _, vals := range [][][]byte{nil, {{}}, {[]byte("a"), {}, make([]byte, MaxValueLen)}} {
		body := gatheredBody(vals)
		split := append(gatheredHeader(77, len(body)), body...)
		assert.Equal(t, (&msg{typ: tGathered, id: 77, values: vals}).encode(nil), split)
	}
}
