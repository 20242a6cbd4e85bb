package tcp

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// HeaderLen is the size of every frame header (docs/wire-tcp.md).
const HeaderLen = 48

// EncodeHeader writes h into b[:HeaderLen]. Multi-byte fields are big-endian.
func EncodeHeader(b []byte, h *softrc.Header) {
	_ = b[HeaderLen-1]
	b[0] = byte(h.Op)
	b[1] = h.Flags
	b[2] = h.Syndrome
	b[3] = h.RNRTimer
	binary.BigEndian.PutUint32(b[4:], h.QPN)
	binary.BigEndian.PutUint32(b[8:], h.Seq)
	binary.BigEndian.PutUint32(b[12:], h.Len)
	binary.BigEndian.PutUint64(b[16:], h.RAddr)
	binary.BigEndian.PutUint32(b[24:], h.RKey)
	binary.BigEndian.PutUint32(b[28:], h.Imm)
	binary.BigEndian.PutUint64(b[32:], h.CmpAdd)
	binary.BigEndian.PutUint64(b[40:], h.Swap)
}

// DecodeHeader parses and validates a frame header: the length of b, a known
// operation, known flags, a syndrome only on NAKs, a 24-bit QP number, and
// a payload length no larger than maxMsg. It never panics; the error wraps
// softrc.ErrProtocol.
func DecodeHeader(b []byte, maxMsg uint64) (softrc.Header, error) {
	var h softrc.Header
	if len(b) != HeaderLen {
		return h, fmt.Errorf("%w: frame header of %d bytes, want %d", softrc.ErrProtocol, len(b), HeaderLen)
	}
	h.Op = softrc.FrameOp(b[0])
	h.Flags = b[1]
	h.Syndrome = b[2]
	h.RNRTimer = b[3]
	h.QPN = binary.BigEndian.Uint32(b[4:])
	h.Seq = binary.BigEndian.Uint32(b[8:])
	h.Len = binary.BigEndian.Uint32(b[12:])
	h.RAddr = binary.BigEndian.Uint64(b[16:])
	h.RKey = binary.BigEndian.Uint32(b[24:])
	h.Imm = binary.BigEndian.Uint32(b[28:])
	h.CmpAdd = binary.BigEndian.Uint64(b[32:])
	h.Swap = binary.BigEndian.Uint64(b[40:])
	if err := h.Check(maxMsg); err != nil {
		return h, err
	}
	if h.QPN > 0xffffff {
		return h, fmt.Errorf("%w: QP number %#x exceeds 24 bits", softrc.ErrProtocol, h.QPN)
	}
	switch h.Op {
	case softrc.FrameCmpSwap, softrc.FrameFetchAdd, softrc.FrameAck, softrc.FrameNak, softrc.FrameAtomicAck:
		if h.Len != 0 {
			return h, fmt.Errorf("%w: %v frame with length %d", softrc.ErrProtocol, h.Op, h.Len)
		}
	}
	return h, nil
}

// Handshake constants (docs/wire-tcp.md).
const (
	helloMagic = "RDMAGOT4"
	nonceLen   = 32
	macLen     = sha256.Size
	connectLen = 24
)

// abortBit in a connect request's dialer QP number says the dialing QP is
// gone (closed, reset or failed before it connected): the acceptor fails
// its waiting QP at once instead of letting it wait out ConnectTimeout.
const abortBit = 1 << 31

// Accept status codes the acceptor answers a connect request with.
const (
	statusOK       byte = 0
	statusNoQP     byte = 1 // no such QP on this device
	statusMismatch byte = 2 // the QP is connected, or expects another peer
	statusStale    byte = 3 // the address names another device (restarted?)
)

func statusText(s byte) string {
	switch s {
	case statusOK:
		return "accepted"
	case statusNoQP:
		return "no such queue pair"
	case statusMismatch:
		return "queue pair expects another peer or is connected"
	case statusStale:
		return "address names another device instance"
	}
	return fmt.Sprintf("status %d", s)
}

// proof is HMAC-SHA256 over a role label and the handshake transcript, keyed
// with the job token; the token itself never crosses the wire.
func proof(token []byte, role string, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(role))
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// connectReq is what a dialer asks for once authenticated.
type connectReq struct {
	srcDev, dstDev uint64
	srcQP, dstQP   uint32
}

func (c connectReq) encode() []byte {
	b := make([]byte, 0, connectLen)
	b = binary.BigEndian.AppendUint64(b, c.srcDev)
	b = binary.BigEndian.AppendUint32(b, c.srcQP)
	b = binary.BigEndian.AppendUint64(b, c.dstDev)
	return binary.BigEndian.AppendUint32(b, c.dstQP)
}

func decodeConnect(b []byte) connectReq {
	return connectReq{srcDev: binary.BigEndian.Uint64(b), srcQP: binary.BigEndian.Uint32(b[8:]),
		dstDev: binary.BigEndian.Uint64(b[12:]), dstQP: binary.BigEndian.Uint32(b[20:])}
}

// addrPayload is the provider payload of a tcp QP address (version 2;
// version 1 had no kernel id: its host:port starts at 9):
//
//	0     1  version (2)
//	1     8  device instance id, big-endian
//	9     1  k, length of the kernel id
//	10    k  kernel id (the device's boot id), empty where unknown
//	10+k  n  advertised host:port (the rest)
type addrPayload struct {
	dev    uint64
	kernel string // the device's kernel (its boot id), "" where unknown
	host   string
}

// addrVersion is the version of the address payload encode writes;
// decodeAddrPayload also reads version 1, which has no kernel id.
const addrVersion = 2

func (a addrPayload) encode() []byte {
	k := a.kernel[:min(len(a.kernel), 255)]
	b := make([]byte, 10, 10+len(k)+len(a.host))
	b[0] = addrVersion
	binary.BigEndian.PutUint64(b[1:], a.dev)
	b[9] = byte(len(k))
	b = append(b, k...)
	return append(b, a.host...)
}

func decodeAddrPayload(b []byte) (addrPayload, error) {
	bad := func() (addrPayload, error) {
		return addrPayload{}, fmt.Errorf("malformed tcp address payload (%d bytes)", len(b))
	}
	if len(b) < 10 {
		return bad()
	}
	switch b[0] {
	case 1:
		return addrPayload{dev: binary.BigEndian.Uint64(b[1:]), host: string(b[9:])}, nil
	case 2:
		k := int(b[9])
		if len(b) < 10+k+1 {
			return bad()
		}
		return addrPayload{dev: binary.BigEndian.Uint64(b[1:]), kernel: string(b[10 : 10+k]), host: string(b[10+k:])}, nil
	}
	return bad()
}
