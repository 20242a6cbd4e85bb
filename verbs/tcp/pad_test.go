package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// TestReadPad: readPad takes exactly the pad a handshake step ends with,
// leaving what follows, and refuses an over-long or cut-short one with a
// protocol error naming it.
func TestReadPad(t *testing.T) {
	pad := func(n uint32, body int) []byte {
		b := binary.BigEndian.AppendUint32(nil, n)
		return append(b, make([]byte, body)...)
	}
	tests := []struct {
		name string
		in   []byte
		err  string
	}{
		{"empty pad", pad(0, 0), ""},
		{"full segment", pad(1448, 1448), ""},
		{"largest", pad(maxPad, maxPad), ""},
		{"too long", pad(maxPad+1, maxPad+1), "handshake pad of 65537 bytes, at most 65536"},
		{"cut short", pad(100, 40), "reading handshake pad"},
		{"no length", []byte{0, 0}, "reading handshake pad"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(bytes.NewReader(append(tc.in, "next"...)))
			err := readPad(br)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				require.True(t, errors.Is(err, softrc.ErrProtocol))
				return
			}
			require.NoError(t, err)
			rest := make([]byte, 4)
			_, err = br.Read(rest)
			require.NoError(t, err)
			require.Equal(t, "next", string(rest), "readPad took more or less than the pad")
		})
	}
}
