package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// -c is ibv_rc_pingpong's --chk, off by default as there.
func TestCheckFlag(t *testing.T) {
	cfg, err := parseFlags([]string{"-d", "rxe0", "10.0.0.1"}, io.Discard)
	require.NoError(t, err)
	assert.False(t, cfg.Check)
	assert.Equal(t, "10.0.0.1", cfg.Server)
	cfg, err = parseFlags([]string{"-c", "-s", "8192", "10.0.0.1"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.Check)
	assert.Equal(t, 8192, cfg.Size)
	cfg, err = parseFlags([]string{"-c"}, io.Discard)
	require.NoError(t, err)
	assert.True(t, cfg.Check)
	assert.Empty(t, cfg.Server, "no host: the server")
	_, err = parseFlags([]string{"a", "b"}, io.Discard)
	assert.ErrorContains(t, err, "one <host> at most")
}

// With -c, a message is rc_pingpong's buffer with the first byte of every
// page zeroed (what its client sends and its server checks), and every
// message received must be one; without, every byte is 0x7b.
func TestCheckPattern(t *testing.T) {
	const page = 4096
	buf := make([]byte, 3*page+10)
	fill(buf, false, page)
	for i, b := range buf {
		require.Equal(t, byte(pattern), b, "byte %d", i)
	}
	require.NoError(t, verify(buf, false, page))
	assert.ErrorContains(t, verify(buf, true, page), "invalid data in page 0: byte 0 is 0x7b, want 0x0 (does the peer run with -c too?)")

	fill(buf, true, page)
	for i, b := range buf {
		want := byte(pattern)
		if i%page == 0 {
			want = 0
		}
		require.Equal(t, want, b, "byte %d", i)
	}
	require.NoError(t, verify(buf, true, page))
	assert.ErrorContains(t, verify(buf, false, page), "byte 0 is 0x0, want 0x7b")

	buf[2*page] = 0x7b
	assert.ErrorContains(t, verify(buf, true, page), "invalid data in page 2: byte 8192 is 0x7b, want 0x0")
	buf[2*page] = 0
	buf[page+1] = 0
	assert.ErrorContains(t, verify(buf, true, page), "invalid data in page 1: byte 4097 is 0x0, want 0x7b")
}
