package collectives

import (
	"encoding/binary"

	"github.com/rdmago/rdmago/collectives/reduce"
)

// Every collectives message starts with a fixed 64-byte header, so a
// receiver learns what its peer thinks the call is before it touches its own
// buffers. Layout (little endian):
//
//	0  magic    uint16 (0xC011)
//	2  kind     uint8  (kindData, kindAbort, kindFingerprint)
//	3  alg      uint8  Algorithm index
//	4  seq      uint32 the call's sequence number on the Engine
//	8  coll     uint8  Collective
//	9  op       uint8  reduce.OpCode
//	10 dtype    uint8  reduce.DType
//	11 split    uint8  1: the payload follows as its own message (tag|1)
//	12 root     int32  (kindAbort of a mismatch: the suspect rank + 1, 0 if unknown)
//	16 count    int64  the element count the sender believes this message
//	                   (or call) has; the receiver compares it with its own
//	24 payload  int64  payload bytes (kindAbort for invalid arguments: the
//	                   refusing rank's error text, valA its sentinel code)
//	32 what     uint8  kindAbort: mismatch kind (whatCount, ...)
//	36 rankA    int32  kindAbort: the two ranks and their values;
//	                   kindStatus: the sender
//	40 rankB    int32
//	48 valA     int64
//	56 valB     int64
//
// Data messages (kindData) carry the first 32 bytes only (dataHdrLen): the
// rest is for aborts and probes. A 16-byte payload then fits in the first
// 48-byte line of a p2p shm ring message, one cache line to move instead
// of two.
//
// Payloads of at most the pair's inline limit (Options.InlineBytes, or
// what fits one eager message with the header: see inlineLimits) travel
// in the same message, right after the header; larger ones follow as a second message on tag|1, whose
// receive is posted once the header has said how large it is (so a
// receive never truncates, whatever the peer's count).
const (
	hdrLen     = 64
	dataHdrLen = 32
)

const hdrMagic = 0xC011

const (
	kindData        = 1
	kindAbort       = 2
	kindFingerprint = 3
	kindStatus      = 4 // "I am stuck in this call": see Engine.onStatus
)

type header struct {
	kind    uint8
	alg     uint8
	seq     uint32
	coll    uint8
	op      reduce.OpCode
	dtype   reduce.DType
	split   bool
	root    int32
	count   int64
	payload int64
	what    uint8
	rankA   int32
	rankB   int32
	valA    int64
	valB    int64
}

// encode writes the header into b: dataHdrLen bytes for kindData (b may
// be that short), hdrLen for the other kinds.
func (h *header) encode(b []byte) {
	_ = b[dataHdrLen-1]
	binary.LittleEndian.PutUint16(b[0:], hdrMagic)
	b[2] = h.kind
	b[3] = h.alg
	binary.LittleEndian.PutUint32(b[4:], h.seq)
	b[8] = h.coll
	b[9] = uint8(h.op)
	b[10] = uint8(h.dtype)
	b[11] = 0
	if h.split {
		b[11] = 1
	}
	binary.LittleEndian.PutUint32(b[12:], uint32(h.root))
	binary.LittleEndian.PutUint64(b[16:], uint64(h.count))
	binary.LittleEndian.PutUint64(b[24:], uint64(h.payload))
	if h.kind == kindData {
		return
	}
	_ = b[hdrLen-1]
	b[32] = h.what
	clear(b[33:36])
	binary.LittleEndian.PutUint32(b[36:], uint32(h.rankA))
	binary.LittleEndian.PutUint32(b[40:], uint32(h.rankB))
	clear(b[44:48])
	binary.LittleEndian.PutUint64(b[48:], uint64(h.valA))
	binary.LittleEndian.PutUint64(b[56:], uint64(h.valB))
}

func (h *header) decode(b []byte) bool {
	if len(b) < dataHdrLen || binary.LittleEndian.Uint16(b) != hdrMagic || b[11] > 1 {
		return false
	}
	h.kind = b[2]
	h.alg = b[3]
	h.seq = binary.LittleEndian.Uint32(b[4:])
	h.coll = b[8]
	h.op = reduce.OpCode(b[9])
	h.dtype = reduce.DType(b[10])
	h.split = b[11] == 1
	h.root = int32(binary.LittleEndian.Uint32(b[12:]))
	h.count = int64(binary.LittleEndian.Uint64(b[16:]))
	h.payload = int64(binary.LittleEndian.Uint64(b[24:]))
	if h.kind == kindData {
		h.what, h.rankA, h.rankB, h.valA, h.valB = 0, 0, 0, 0, 0
		return h.payload >= 0
	}
	if len(b) < hdrLen {
		return false
	}
	h.what = b[32]
	h.rankA = int32(binary.LittleEndian.Uint32(b[36:]))
	h.rankB = int32(binary.LittleEndian.Uint32(b[40:]))
	h.valA = int64(binary.LittleEndian.Uint64(b[48:]))
	h.valB = int64(binary.LittleEndian.Uint64(b[56:]))
	return h.kind >= kindData && h.kind <= kindStatus && h.payload >= 0
}

// Mismatch kinds carried by abort messages.
const (
	whatCount = iota + 1
	whatOp
	whatType
	whatRoot
	whatAlgorithm
	whatSequence
	whatBytes
	whatCollective
	whatInvalid
)

var whatNames = [...]string{"", "count", "op", "type", "root", "algorithm", "sequence", "bytes", "collective", "invalid"}

func whatCode(s string) uint8 {
	for i, n := range whatNames {
		if n == s && i > 0 {
			return uint8(i)
		}
	}
	return whatCount
}

// An abort for invalid arguments carries the refusing rank's error: a
// code for its sentinel in valA, its text (at most maxReason bytes) after
// the header.
const (
	maxReason         = 192
	reasonInvalid     = 1
	reasonUnsupported = 2
)

// mismatchFromAbort rebuilds the error an abort message describes; extra
// is what followed the header.
func mismatchFromAbort(h *header, extra []byte) error {
	if h.what == whatInvalid {
		sentinel := ErrInvalidArgument
		if h.valA == reasonUnsupported {
			sentinel = ErrUnsupported
		}
		n := min(int(h.payload), len(extra))
		if n == 0 {
			return &PeerError{Rank: int(h.rankA), Err: sentinel}
		}
		return &PeerError{Rank: int(h.rankA), Err: &remoteError{text: string(extra[:n]), sentinel: sentinel}}
	}
	what := "unknown"
	if int(h.what) < len(whatNames) && h.what > 0 {
		what = whatNames[h.what]
	}
	m := newMismatch(what, int(h.rankA), h.valA, int(h.rankB), h.valB)
	m.Suspect = int(h.root) - 1 // an abort's root field carries the suspect + 1
	return m
}

// suspectByOwn fills in the suspect of a mismatch between two other ranks
// that rank me heard of, from its own call h: the rank whose value is not
// me's. (A third rank that agrees with one side is evidence; me, when it
// is one of the two, is not: it would name the other whatever it is.)
func suspectByOwn(err error, h *header, me int) {
	m, ok := err.(*MismatchError)
	if !ok || m.Suspect >= 0 || m.Rank == me || m.Peer == me {
		return
	}
	var mine int64
	switch m.What {
	case "count":
		mine = h.count
	case "op":
		mine = int64(h.op)
	case "type":
		mine = int64(h.dtype)
	case "root":
		mine = int64(h.root)
	default:
		return
	}
	switch {
	case mine == m.Value && mine != m.PeerValue:
		m.Suspect = m.Peer
	case mine == m.PeerValue && mine != m.Value:
		m.Suspect = m.Rank
	}
}

// tableMismatch compares the calls of every rank (table, with known[r]
// false for a rank whose call is unknown) and returns the first
// difference from the call most ranks made, naming its rank as the
// suspect, or nil when all known calls agree. Every rank that has the
// same table reports the same difference.
func tableMismatch(table []header, known []bool, world func(int) int) *MismatchError {
	ref := -1
	same := true
	for r := range table {
		if !known[r] {
			continue
		}
		if ref < 0 {
			ref = r
		} else if compareCall(0, &table[ref], 0, &table[r]) != nil {
			same = false
			break
		}
	}
	if same {
		return nil
	}
	// The reference is the call of the most ranks (the first such rank).
	best, bestN := -1, 0
	for r := range table {
		if !known[r] {
			continue
		}
		n := 0
		for q := range table {
			if known[q] && compareCall(0, &table[r], 0, &table[q]) == nil {
				n++
			}
		}
		if n > bestN {
			best, bestN = r, n
		}
	}
	for r := range table {
		if known[r] {
			if m := compareCall(world(best), &table[best], world(r), &table[r]); m != nil {
				if 2*bestN > countTrue(known) {
					m.Suspect = world(r)
				}
				return m
			}
		}
	}
	return nil
}

func countTrue(b []bool) int {
	n := 0
	for _, x := range b {
		if x {
			n++
		}
	}
	return n
}

// newMismatch fills in names for values that are codes.
func newMismatch(what string, rank int, v int64, peer int, pv int64) *MismatchError {
	m := &MismatchError{What: what, Rank: rank, Value: v, Peer: peer, PeerValue: pv, Suspect: -1}
	switch what {
	case "op":
		m.Name, m.PeerName = reduce.OpCode(v).String(), reduce.OpCode(pv).String()
	case "type":
		m.Name, m.PeerName = reduce.DType(v).String(), reduce.DType(pv).String()
	case "algorithm":
		m.Name, m.PeerName = Algorithm(v).String(), Algorithm(pv).String()
	case "collective":
		m.Name, m.PeerName = Collective(v).String(), Collective(pv).String()
	}
	return m
}

// compareCall reports the first way two ranks' views of a call differ
// (rank a's header x, rank b's header y), or nil.
func compareCall(a int, x *header, b int, y *header) *MismatchError {
	switch {
	case x.seq != y.seq:
		return newMismatch("sequence", a, int64(x.seq), b, int64(y.seq))
	case x.coll != y.coll:
		return newMismatch("collective", a, int64(x.coll), b, int64(y.coll))
	case x.op != y.op:
		return newMismatch("op", a, int64(x.op), b, int64(y.op))
	case x.dtype != y.dtype:
		return newMismatch("type", a, int64(x.dtype), b, int64(y.dtype))
	case x.root != y.root:
		return newMismatch("root", a, int64(x.root), b, int64(y.root))
	case x.count != y.count:
		return newMismatch("count", a, x.count, b, y.count)
	case x.alg != y.alg:
		return newMismatch("algorithm", a, int64(x.alg), b, int64(y.alg))
	}
	return nil
}

// remoteError is another rank's error as its text, matching its sentinel.
type remoteError struct {
	text     string
	sentinel error
}

func (e *remoteError) Error() string        { return e.text }
func (e *remoteError) Is(target error) bool { return target == e.sentinel }
