package main

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
)

// ibv_rc_pingpong's out-of-band message (libibverbs/examples/rc_pingpong.c):
// sprintf(msg, "%04x:%06x:%06x:%s", lid, qpn, psn, gid) in a buffer of
// sizeof "0000:000000:000000:00000000000000000000000000000000" = 52 bytes,
// always sent whole (51 characters and the NUL). The GID is the 16 raw
// bytes as 32 lowercase hex digits in memory order (gid_to_wire_gid).
const msgLen = 52

// done is the client's final sync: write(sockfd, "done", sizeof "done").
var done = []byte("done\x00")

type peerInfo struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

func (p peerInfo) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", p.LID, p.QPN, p.PSN, formatGID(p.GID))
}

func formatGID(g [16]byte) string {
	// ibv_rc_pingpong prints inet_ntop(AF_INET6) of the GID.
	return netip.AddrFrom16(g).String()
}

func encodeMsg(p peerInfo) ([]byte, error) {
	if p.QPN > 0xffffff || p.PSN > 0xffffff {
		return nil, fmt.Errorf("QPN %#x or PSN %#x exceeds 24 bits", p.QPN, p.PSN)
	}
	s := fmt.Sprintf("%04x:%06x:%06x:%s", p.LID, p.QPN, p.PSN, hex.EncodeToString(p.GID[:]))
	b := make([]byte, msgLen)
	copy(b, s) // 51 characters, then the NUL
	return b, nil
}

// The C side parses with sscanf("%x:%x:%x:%s") and wire_gid_to_gid; be as
// strict as the fixed-width sender, so that garbage is refused by name.
var msgRE = regexp.MustCompile(`^([0-9a-fA-F]{4}):([0-9a-fA-F]{6}):([0-9a-fA-F]{6}):([0-9a-fA-F]{32})$`)

func decodeMsg(b []byte) (peerInfo, error) {
	if len(b) != msgLen {
		return peerInfo{}, fmt.Errorf("pingpong address message of %d bytes, want %d", len(b), msgLen)
	}
	if b[msgLen-1] != 0 {
		return peerInfo{}, fmt.Errorf("pingpong address message %q is not NUL-terminated", b)
	}
	m := msgRE.FindSubmatch(b[:msgLen-1])
	if m == nil {
		return peerInfo{}, fmt.Errorf("malformed pingpong address message %q (want LID:QPN:PSN:GID in hex)", b[:msgLen-1])
	}
	var p peerInfo
	lid, _ := strconv.ParseUint(string(m[1]), 16, 16)
	qpn, _ := strconv.ParseUint(string(m[2]), 16, 32)
	psn, _ := strconv.ParseUint(string(m[3]), 16, 32)
	p.LID, p.QPN, p.PSN = uint16(lid), uint32(qpn), uint32(psn)
	if _, err := hex.Decode(p.GID[:], m[4]); err != nil {
		return peerInfo{}, fmt.Errorf("pingpong address message GID %q: %w", m[4], err)
	}
	return p, nil
}
