package verbs

import (
	"encoding/binary"
	"fmt"
)

// MaxAddressLen bounds a queue pair address, so that bootstrap can carry it.
const MaxAddressLen = 512

// A queue pair address is opaque to everything above verbs, but every
// provider wraps its own part in one envelope so that a receiver can tell
// whose address it holds and refuse a foreign one with a clear error:
//
//	offset size
//	0      2    magic "QA"
//	2      1    version (1)
//	3      1    n = length of the provider name
//	4      n    provider name ("tcp", "shm", "ibv", ...)
//	4+n    4    QP number, big-endian
//	8+n    4    initial PSN (24 bits used), big-endian
//	12+n   2    m = length of the provider payload, big-endian
//	14+n   m    provider payload (its own documented encoding)
//
// docs/wire.md describes each provider's payload.

const addrVersion = 1

// QPAddress is the decoded envelope of a queue pair address.
type QPAddress struct {
	Provider string
	QPNum    uint32
	PSN      uint32
	Payload  []byte
}

// Encode builds the wire form of a.
func (a QPAddress) Encode() ([]byte, error) {
	if len(a.Provider) == 0 || len(a.Provider) > 255 {
		return nil, fmt.Errorf("%w: provider name %q", ErrInvalidArgument, a.Provider)
	}
	n := 14 + len(a.Provider) + len(a.Payload)
	if n > MaxAddressLen {
		return nil, fmt.Errorf("%w: QP address of %d bytes exceeds %d", ErrInvalidArgument, n, MaxAddressLen)
	}
	b := make([]byte, 0, n)
	b = append(b, 'Q', 'A', addrVersion, byte(len(a.Provider)))
	b = append(b, a.Provider...)
	b = binary.BigEndian.AppendUint32(b, a.QPNum)
	b = binary.BigEndian.AppendUint32(b, a.PSN&0xffffff)
	b = binary.BigEndian.AppendUint16(b, uint16(len(a.Payload)))
	return append(b, a.Payload...), nil
}

// DecodeAddress parses a queue pair address. It never panics on bad input.
func DecodeAddress(b []byte) (QPAddress, error) {
	bad := func(why string) (QPAddress, error) {
		return QPAddress{}, fmt.Errorf("%w: malformed QP address (%d bytes): %s", ErrInvalidArgument, len(b), why)
	}
	if len(b) > MaxAddressLen {
		return bad("too long")
	}
	if len(b) < 4 || b[0] != 'Q' || b[1] != 'A' {
		return bad("no QA magic")
	}
	if b[2] != addrVersion {
		return bad(fmt.Sprintf("version %d, want %d", b[2], addrVersion))
	}
	n := int(b[3])
	if n == 0 || len(b) < 14+n {
		return bad("truncated header")
	}
	a := QPAddress{Provider: string(b[4 : 4+n])}
	a.QPNum = binary.BigEndian.Uint32(b[4+n:])
	a.PSN = binary.BigEndian.Uint32(b[8+n:])
	if a.PSN > 0xffffff {
		return bad(fmt.Sprintf("PSN %#x exceeds 24 bits", a.PSN))
	}
	m := int(binary.BigEndian.Uint16(b[12+n:]))
	if len(b) != 14+n+m {
		return bad(fmt.Sprintf("payload length %d does not match %d remaining bytes", m, len(b)-14-n))
	}
	a.Payload = append([]byte(nil), b[14+n:]...)
	return a, nil
}

// DecodeAddressFor decodes b and checks that it belongs to provider.
func DecodeAddressFor(provider string, b []byte) (QPAddress, error) {
	a, err := DecodeAddress(b)
	if err != nil {
		return a, err
	}
	if a.Provider != provider {
		return a, fmt.Errorf("%w: QP address is for provider %q, not %q", ErrInvalidArgument, a.Provider, provider)
	}
	return a, nil
}
