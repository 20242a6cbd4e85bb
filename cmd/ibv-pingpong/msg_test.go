package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMsgFormat(t *testing.T) {
	p := peerInfo{LID: 0, QPN: 0x11, PSN: 0xabcdef,
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 198, 13: 18, 14: 0, 15: 1}}
	b, err := encodeMsg(p)
	require.NoError(t, err)
	// Byte for byte what rc_pingpong's sprintf produces for this QP.
	assert.Equal(t, "0000:000011:abcdef:00000000000000000000ffffc6120001\x00", string(b))
	assert.Len(t, b, 52)
	got, err := decodeMsg(b)
	require.NoError(t, err)
	assert.Equal(t, p, got)
	assert.Equal(t, "LID 0x0000, QPN 0x000011, PSN 0xabcdef, GID ::ffff:198.18.0.1", p.String())

	for _, bad := range []string{
		"0000:000011:abcdef:00000000000000000000ffffc6120001",         // no NUL: 51 bytes
		"0000:000011:abcdef:00000000000000000000ffffc612000g\x00",     // not hex
		"0000-000011:abcdef:00000000000000000000ffffc6120001\x00",     // wrong separator
		"0000:000011:abcdef:00000000000000000000ffffc6120001\x00\x00", // 53 bytes
	} {
		_, err := decodeMsg([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
	_, err = encodeMsg(peerInfo{QPN: 1 << 24})
	assert.Error(t, err)
}

func FuzzDecodeMsg(f *testing.F) {
	b, _ := encodeMsg(peerInfo{QPN: 1, PSN: 2})
	f.Add(b)
	f.Fuzz(func(t *testing.T, in []byte) {
		p, err := decodeMsg(in)
		if err != nil {
			return
		}
		out, err := encodeMsg(p)
		require.NoError(t, err)
		again, err := decodeMsg(out)
		require.NoError(t, err)
		assert.Equal(t, p, again)
	})
}
