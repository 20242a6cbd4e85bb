package ibv

import (
	"encoding/binary"
	"fmt"

	"github.com/rdmago/rdmago/verbs"
)

// Endpoint is what a peer needs to connect to one of our queue pairs: the
// contents of the "ibv" payload of a verbs QP address, plus the QP number
// and PSN of its envelope.
//
// The payload (22 bytes) is:
//
//	offset size
//	0      1    version (1)
//	1      1    link layer (1 InfiniBand, 2 Ethernet, 0 unknown)
//	2      1    active MTU code of the port (1=256 .. 5=4096; 0 unknown)
//	3      1    reserved, 0
//	4      2    LID, big-endian (0 on RoCE)
//	6      16   GID, raw bytes in network order (all zero: no GRH possible)
type Endpoint struct {
	QPN       uint32
	PSN       uint32 // 24 bits
	LID       uint16
	GID       [16]byte
	MTU       verbs.MTU
	LinkLayer LinkLayer
}

const (
	payloadVersion = 1
	payloadLen     = 22
)

// EncodeAddress builds the verbs QP address of e.
func EncodeAddress(e Endpoint) ([]byte, error) {
	if e.PSN > 0xffffff {
		return nil, fmt.Errorf("%w: PSN %#x exceeds 24 bits", verbs.ErrInvalidArgument, e.PSN)
	}
	if e.QPN > 0xffffff {
		return nil, fmt.Errorf("%w: QP number %#x exceeds 24 bits", verbs.ErrInvalidArgument, e.QPN)
	}
	p := make([]byte, payloadLen)
	p[0] = payloadVersion
	p[1] = byte(e.LinkLayer)
	p[2] = byte(e.MTU)
	binary.BigEndian.PutUint16(p[4:], e.LID)
	copy(p[6:], e.GID[:])
	return verbs.QPAddress{Provider: ProviderName, QPNum: e.QPN, PSN: e.PSN, Payload: p}.Encode()
}

// DecodeAddress parses an "ibv" QP address. It never panics on bad input.
func DecodeAddress(b []byte) (Endpoint, error) {
	a, err := verbs.DecodeAddressFor(ProviderName, b)
	if err != nil {
		return Endpoint{}, err
	}
	p := a.Payload
	if len(p) != payloadLen {
		return Endpoint{}, fmt.Errorf("%w: ibv address payload of %d bytes, want %d", verbs.ErrInvalidArgument, len(p), payloadLen)
	}
	if p[0] != payloadVersion {
		return Endpoint{}, fmt.Errorf("%w: ibv address payload version %d, want %d", verbs.ErrInvalidArgument, p[0], payloadVersion)
	}
	if p[1] > byte(LinkEthernet) {
		return Endpoint{}, fmt.Errorf("%w: ibv address link layer %d", verbs.ErrInvalidArgument, p[1])
	}
	if p[2] > byte(verbs.MTU4096) {
		return Endpoint{}, fmt.Errorf("%w: ibv address MTU code %d", verbs.ErrInvalidArgument, p[2])
	}
	if a.QPNum > 0xffffff {
		return Endpoint{}, fmt.Errorf("%w: ibv address QP number %#x exceeds 24 bits", verbs.ErrInvalidArgument, a.QPNum)
	}
	e := Endpoint{QPN: a.QPNum, PSN: a.PSN & 0xffffff, LinkLayer: LinkLayer(p[1]), MTU: verbs.MTU(p[2]),
		LID: binary.BigEndian.Uint16(p[4:])}
	copy(e.GID[:], p[6:])
	return e, nil
}

// hasGID reports whether the GID can address a GRH: ibv_rc_pingpong's test
// is a non-zero interface id (the low 8 bytes).
func (e Endpoint) hasGID() bool {
	return binary.BigEndian.Uint64(e.GID[8:]) != 0
}

// pathFor is the AV a QP in RTR uses to reach e from a port with link layer
// ll, MTU code mtu, source GID index sgid: RoCE always needs a GRH; on
// InfiniBand a GRH is added when the peer has a GID and no LID.
type pathAttr struct {
	dlid      uint16
	isGlobal  bool
	dgid      [16]byte
	sgidIndex uint8
	hopLimit  uint8
	mtu       verbs.MTU
}

func pathFor(e Endpoint, ll LinkLayer, localMTU verbs.MTU, want verbs.MTU, sgid int) (pathAttr, error) {
	p := pathAttr{dlid: e.LID, mtu: want}
	// The path MTU may not exceed either port's active MTU; the neutral API
	// asks for 1024 everywhere, so clamp rather than fail.
	if localMTU != 0 && p.mtu > localMTU {
		p.mtu = localMTU
	}
	if e.MTU != 0 && p.mtu > e.MTU {
		p.mtu = e.MTU
	}
	switch {
	case ll == LinkEthernet:
		if !e.hasGID() {
			return p, fmt.Errorf("%w: RoCE needs the peer's GID, the address has none", verbs.ErrInvalidArgument)
		}
		p.isGlobal = true
	case e.LID == 0:
		if !e.hasGID() {
			return p, fmt.Errorf("%w: peer address has neither a LID nor a GID", verbs.ErrInvalidArgument)
		}
		p.isGlobal = true
	}
	if p.isGlobal {
		if sgid < 0 || sgid > 255 {
			return p, fmt.Errorf("%w: source GID index %d", verbs.ErrInvalidArgument, sgid)
		}
		p.dgid = e.GID
		p.sgidIndex = uint8(sgid)
		p.hopLimit = 64
	}
	return p, nil
}
