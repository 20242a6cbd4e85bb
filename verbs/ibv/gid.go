package ibv

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/rdmago/rdmago/verbs"
)

// GIDType is a GID table entry's type, as ibv_gid_type.
type GIDType uint8

const (
	GIDTypeIB     GIDType = 0
	GIDTypeRoCEv1 GIDType = 1
	GIDTypeRoCEv2 GIDType = 2
)

func (t GIDType) String() string {
	switch t {
	case GIDTypeIB:
		return "IB"
	case GIDTypeRoCEv1:
		return "RoCE v1"
	case GIDTypeRoCEv2:
		return "RoCE v2"
	}
	return fmt.Sprintf("GIDType(%d)", uint8(t))
}

// LinkLayer is a port's link layer, as IBV_LINK_LAYER_*.
type LinkLayer uint8

const (
	LinkUnknown    LinkLayer = 0
	LinkInfiniBand LinkLayer = 1
	LinkEthernet   LinkLayer = 2
)

func (l LinkLayer) String() string {
	switch l {
	case LinkInfiniBand:
		return "InfiniBand"
	case LinkEthernet:
		return "Ethernet"
	}
	return "unknown"
}

// GIDEntry is one valid entry of a port's GID table (ibv_gid_entry).
type GIDEntry struct {
	Index int
	Type  GIDType
	GID   [16]byte
}

func (e GIDEntry) String() string {
	return fmt.Sprintf("%d:%v:%v", e.Index, e.Type, netip.AddrFrom16(e.GID))
}

// chooseGID picks the source GID for a port. An explicit index must name a
// valid entry. Automatic selection never assumes an index: on Ethernet it
// prefers RoCE v2 (routable, what rdma_cm uses) with an IPv4-mapped GID,
// then a global IPv6 one, then a link-local one, and falls back to RoCE v1
// only when there is no v2 entry; on InfiniBand it takes the lowest IB entry
// (the port GID, which is index 0 on every IB device we know of, but we ask).
func chooseGID(table []GIDEntry, ll LinkLayer, sel GIDSelector) (GIDEntry, error) {
	if i, ok := sel.Index(); ok {
		for _, e := range table {
			if e.Index == i {
				return e, nil
			}
		}
		return GIDEntry{}, fmt.Errorf("%w: GID index %d is not a valid entry of the port's GID table (valid: %s)",
			verbs.ErrInvalidArgument, i, describeTable(table))
	}
	rank := func(e GIDEntry) int {
		a := netip.AddrFrom16(e.GID)
		switch {
		case ll != LinkEthernet:
			if e.Type == GIDTypeIB {
				return 1
			}
			return 0
		case e.Type == GIDTypeRoCEv2 && a.Is4In6():
			return 5
		case e.Type == GIDTypeRoCEv2 && !a.IsLinkLocalUnicast():
			return 4
		case e.Type == GIDTypeRoCEv2:
			return 3
		case e.Type == GIDTypeRoCEv1:
			return 1
		}
		return 0
	}
	best, bestRank := GIDEntry{}, 0
	for _, e := range table {
		if e.GID == ([16]byte{}) {
			continue
		}
		if r := rank(e); r > bestRank || (r == bestRank && r > 0 && e.Index < best.Index) {
			best, bestRank = e, r
		}
	}
	if bestRank == 0 {
		return GIDEntry{}, fmt.Errorf("%w: no usable %v GID on the port (table: %s); on RoCE the netdev needs an IP address",
			verbs.ErrUnavailable, ll, describeTable(table))
	}
	return best, nil
}

func describeTable(table []GIDEntry) string {
	if len(table) == 0 {
		return "empty"
	}
	s := make([]string, len(table))
	for i, e := range table {
		s[i] = e.String()
	}
	return strings.Join(s, ", ")
}
