package bootstrap

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// The wire format is documented in docs/wire-bootstrap.md. Every frame is
//
//	u32 length L (big-endian; counts the type byte and the body)
//	u8  type
//	L-1 bytes of body
//
// Bodies are fixed sequences of fields: u8, u32, i32, i64 (big-endian),
// str (u16 length + bytes) and fixed 32-byte nonces and MACs. A decoder
// rejects a frame whose body is shorter or longer than its fields, so every
// byte is accounted for.

const (
	protoMagic   = "RDBS"
	protoVersion = 2
	nonceLen     = 32
	macLen       = 32

	// maxClientFrame bounds frames a server accepts. The largest legitimate
	// one is a join (about 1.5 KiB) or a put (about 1.3 KiB).
	maxClientFrame = 4096
	// joinSeq is the Status sequence number that asks about the join.
	joinSeq = ^uint32(0)
)

// Frame types. Client to server: 0x01-0x1f; server to client: 0x20-0x3f
// (plus tChallenge and tWelcome in the handshake).
const (
	tHello     byte = 0x01 // magic[4] version u8 nonce[32]
	tChallenge byte = 0x02 // magic[4] version u8 nonce[32] mac[32]
	tProof     byte = 0x03 // mac[32]
	tJoin      byte = 0x04 // rank u32, size u32, version str, config str, host str, hostid str
	tWelcome   byte = 0x05 // n u32, n × (host str, hostid str, addr str)

	tPut    byte = 0x10 // id u32, key str, value str
	tGet    byte = 0x11 // id u32, key str
	tAdd    byte = 0x12 // id u32, key str, delta i64
	tColl   byte = 0x13 // id u32, seq u32, kind u8, key str, value str
	tCancel byte = 0x14 // id u32
	tStatus byte = 0x15 // id u32, seq u32
	tAbort  byte = 0x16 // id u32, code i32, reason str
	tBye    byte = 0x17 // (empty)

	tOK       byte = 0x20 // id u32
	tValue    byte = 0x21 // id u32, value str
	tCount    byte = 0x22 // id u32, count i64
	tGathered byte = 0x23 // id u32, n u32, n × value str
	tMissing  byte = 0x24 // id u32, n u32, n × rank u32, m u32, m × rank u32
	tError    byte = 0x25 // id u32, code u8, message str, n u32, n × rank u32
	tAborted  byte = 0x26 // rank u32, code i32, reason str
	tShutdown byte = 0x27 // reason str
)

// Collective kinds in tColl.
const (
	kindFence     byte = 1
	kindAllgather byte = 2
)

// Error codes in tError, mapped to the sentinels.
const (
	ecInvalid  byte = 1
	ecMismatch byte = 2
	ecRefused  byte = 3
	ecRankLeft byte = 4
	ecClosed   byte = 5
	ecAborted  byte = 6
)

var codeErr = map[byte]error{
	ecInvalid: ErrInvalid, ecMismatch: ErrMismatch, ecRefused: ErrRefused,
	ecRankLeft: ErrRankLeft, ecClosed: ErrClosed, ecAborted: ErrAborted,
}

// msg is the decoded form of any frame; each type uses some of the fields.
type msg struct {
	typ     byte
	id      uint32
	rank    uint32
	size    uint32
	seq     uint32
	kind    byte
	code    int32
	ecode   byte
	delta   int64
	key     string // key, or the version in tJoin, or a message/reason
	config  string
	host    string
	hostID  string
	value   []byte
	values  [][]byte // tGathered values; tWelcome hosts and addrs interleaved
	ranks   []uint32
	gone    []uint32 // tMissing: ranks that came and went
	nonce   [nonceLen]byte
	mac     [macLen]byte
	magicOK bool
}

func appendStr(b []byte, s []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// encode appends m as a complete frame to b.
func (m *msg) encode(b []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, m.typ)
	u32 := binary.BigEndian.AppendUint32
	switch m.typ {
	case tHello:
		b = append(b, protoMagic...)
		b = append(b, protoVersion)
		b = append(b, m.nonce[:]...)
	case tChallenge:
		b = append(b, protoMagic...)
		b = append(b, protoVersion)
		b = append(b, m.nonce[:]...)
		b = append(b, m.mac[:]...)
	case tProof:
		b = append(b, m.mac[:]...)
	case tJoin:
		b = u32(b, m.rank)
		b = u32(b, m.size)
		b = appendStr(b, []byte(m.key))
		b = appendStr(b, []byte(m.config))
		b = appendStr(b, []byte(m.host))
		b = appendStr(b, []byte(m.hostID))
	case tWelcome:
		b = u32(b, uint32(len(m.values)/3))
		for _, v := range m.values {
			b = appendStr(b, v)
		}
	case tPut:
		b = u32(b, m.id)
		b = appendStr(b, []byte(m.key))
		b = appendStr(b, m.value)
	case tGet:
		b = u32(b, m.id)
		b = appendStr(b, []byte(m.key))
	case tAdd:
		b = u32(b, m.id)
		b = appendStr(b, []byte(m.key))
		b = binary.BigEndian.AppendUint64(b, uint64(m.delta))
	case tColl:
		b = u32(b, m.id)
		b = u32(b, m.seq)
		b = append(b, m.kind)
		b = appendStr(b, []byte(m.key))
		b = appendStr(b, m.value)
	case tCancel, tOK:
		b = u32(b, m.id)
	case tStatus:
		b = u32(b, m.id)
		b = u32(b, m.seq)
	case tAbort:
		b = u32(b, m.id)
		b = u32(b, uint32(m.code))
		b = appendStr(b, []byte(m.key))
	case tBye:
	case tValue:
		b = u32(b, m.id)
		b = appendStr(b, m.value)
	case tCount:
		b = u32(b, m.id)
		b = binary.BigEndian.AppendUint64(b, uint64(m.delta))
	case tGathered:
		b = u32(b, m.id)
		b = u32(b, uint32(len(m.values)))
		for _, v := range m.values {
			b = appendStr(b, v)
		}
	case tMissing:
		b = u32(b, m.id)
		b = u32(b, uint32(len(m.ranks)))
		for _, r := range m.ranks {
			b = u32(b, r)
		}
		b = u32(b, uint32(len(m.gone)))
		for _, r := range m.gone {
			b = u32(b, r)
		}
	case tError:
		b = u32(b, m.id)
		b = append(b, m.ecode)
		b = appendStr(b, []byte(m.key))
		b = u32(b, uint32(len(m.ranks)))
		for _, r := range m.ranks {
			b = u32(b, r)
		}
	case tAborted:
		b = u32(b, m.rank)
		b = u32(b, uint32(m.code))
		b = appendStr(b, []byte(m.key))
	case tShutdown:
		b = appendStr(b, []byte(m.key))
	}
	binary.BigEndian.PutUint32(b[start:], uint32(len(b)-start-4))
	return b
}

// gatheredBody and gatheredHeader split a tGathered frame so that the body
// (count and values) can be shared by every rank's reply:
// gatheredHeader(id, len(body)) followed by body is exactly
// (&msg{typ: tGathered, id: id, values: vals}).encode(nil).
func gatheredBody(vals [][]byte) []byte {
	n := 4
	for _, v := range vals {
		n += 2 + len(v)
	}
	b := binary.BigEndian.AppendUint32(make([]byte, 0, n), uint32(len(vals)))
	for _, v := range vals {
		b = appendStr(b, v)
	}
	return b
}

func gatheredHeader(id uint32, bodyLen int) []byte {
	h := binary.BigEndian.AppendUint32(make([]byte, 0, 9), uint32(1+4+bodyLen))
	h = append(h, tGathered)
	return binary.BigEndian.AppendUint32(h, id)
}

// decoder reads fields from a body; the first failure sticks.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: truncated %s", ErrProtocol, what)
	}
}

func (d *decoder) take(n int, what string) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.fail(what)
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8(what string) byte {
	if v := d.take(1, what); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32(what string) uint32 {
	if v := d.take(4, what); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64(what string) uint64 {
	if v := d.take(8, what); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// str reads a u16-prefixed string of at most max bytes.
func (d *decoder) str(what string, max int) []byte {
	n := int(d.u32x16(what))
	if d.err != nil {
		return nil
	}
	if n > max {
		d.err = fmt.Errorf("%w: %s of %d bytes exceeds %d", ErrProtocol, what, n, max)
		return nil
	}
	v := d.take(n, what)
	if v == nil {
		return nil
	}
	// Frames are read into fresh buffers, so values may alias them; the
	// capacity limit keeps an append to one value off its neighbour.
	return v[:n:n]
}

func (d *decoder) u32x16(what string) uint16 {
	if v := d.take(2, what+" length"); v != nil {
		return binary.BigEndian.Uint16(v)
	}
	return 0
}

// count reads a u32 element count and checks that at least min bytes per
// element remain, so a lying count cannot make the decoder allocate.
func (d *decoder) count(what string, min int) int {
	n := d.u32(what + " count")
	if d.err != nil {
		return 0
	}
	if uint64(n)*uint64(min) > uint64(len(d.b)) {
		d.err = fmt.Errorf("%w: %s count %d exceeds the frame", ErrProtocol, what, n)
		return 0
	}
	return int(n)
}

// ranks reads a u32 count and that many u32 ranks.
func (d *decoder) ranks() []uint32 {
	n := d.count("rank", 4)
	out := make([]uint32, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.u32("rank"))
	}
	return out
}

// decode parses a frame body of type typ. It never panics; every malformed
// input is an error wrapping ErrProtocol.
func decode(typ byte, body []byte) (msg, error) {
	m := msg{typ: typ}
	d := &decoder{b: body}
	switch typ {
	case tHello, tChallenge:
		magic := d.take(4, "magic")
		ver := d.u8("version")
		if d.err == nil && (string(magic) != protoMagic || ver != protoVersion) {
			return m, fmt.Errorf("%w: bad magic %q version %d (want %q version %d)", ErrProtocol, magic, ver, protoMagic, protoVersion)
		}
		copy(m.nonce[:], d.take(nonceLen, "nonce"))
		if typ == tChallenge {
			copy(m.mac[:], d.take(macLen, "mac"))
		}
		m.magicOK = d.err == nil
	case tProof:
		copy(m.mac[:], d.take(macLen, "mac"))
	case tJoin:
		m.rank = d.u32("rank")
		m.size = d.u32("size")
		m.key = string(d.str("version", MaxVersionLen))
		m.config = string(d.str("config", MaxConfigLen))
		m.host = string(d.str("host", MaxHostLen))
		m.hostID = string(d.str("hostid", MaxHostLen))
	case tWelcome:
		n := d.count("peer", 4)
		if n > MaxSize {
			return m, fmt.Errorf("%w: welcome lists %d ranks, more than %d", ErrProtocol, n, MaxSize)
		}
		m.values = make([][]byte, 0, 3*n)
		for i := 0; i < n && d.err == nil; i++ {
			m.values = append(m.values, d.str("host", MaxHostLen), d.str("hostid", MaxHostLen), d.str("addr", MaxHostLen))
		}
	case tPut:
		m.id = d.u32("id")
		m.key = string(d.str("key", MaxKeyLen))
		m.value = d.str("value", MaxValueLen)
	case tGet:
		m.id = d.u32("id")
		m.key = string(d.str("key", MaxKeyLen))
	case tAdd:
		m.id = d.u32("id")
		m.key = string(d.str("key", MaxKeyLen))
		m.delta = int64(d.u64("delta"))
	case tColl:
		m.id = d.u32("id")
		m.seq = d.u32("seq")
		m.kind = d.u8("kind")
		m.key = string(d.str("key", MaxKeyLen))
		m.value = d.str("value", MaxValueLen)
		if d.err == nil && m.kind != kindFence && m.kind != kindAllgather {
			return m, fmt.Errorf("%w: unknown collective kind %d", ErrProtocol, m.kind)
		}
	case tCancel, tOK:
		m.id = d.u32("id")
	case tStatus:
		m.id = d.u32("id")
		m.seq = d.u32("seq")
	case tAbort:
		m.id = d.u32("id")
		m.code = int32(d.u32("code"))
		m.key = string(d.str("reason", MaxReasonLen))
	case tBye:
	case tValue:
		m.id = d.u32("id")
		m.value = d.str("value", MaxValueLen)
	case tCount:
		m.id = d.u32("id")
		m.delta = int64(d.u64("count"))
	case tGathered:
		m.id = d.u32("id")
		n := d.count("value", 2)
		if n > MaxSize {
			return m, fmt.Errorf("%w: allgather of %d values, more than %d", ErrProtocol, n, MaxSize)
		}
		m.values = make([][]byte, 0, n)
		for i := 0; i < n && d.err == nil; i++ {
			m.values = append(m.values, d.str("value", MaxValueLen))
		}
	case tMissing, tError:
		m.id = d.u32("id")
		if typ == tError {
			m.ecode = d.u8("code")
			m.key = string(d.str("message", 4*MaxReasonLen))
		}
		m.ranks = d.ranks()
		if typ == tMissing {
			m.gone = d.ranks()
		}
	case tAborted:
		m.rank = d.u32("rank")
		m.code = int32(d.u32("code"))
		m.key = string(d.str("reason", MaxReasonLen))
	case tShutdown:
		m.key = string(d.str("reason", MaxReasonLen))
	default:
		return m, fmt.Errorf("%w: unknown frame type %#x", ErrProtocol, typ)
	}
	if d.err != nil {
		return m, d.err
	}
	if len(d.b) != 0 {
		return m, fmt.Errorf("%w: %d trailing bytes after frame type %#x", ErrProtocol, len(d.b), typ)
	}
	return m, nil
}

// errFrameTooLarge marks a length prefix beyond the reader's limit.
var errFrameTooLarge = errors.New("frame too large")

// readFrame reads one frame of at most max bytes (type plus body) from r.
func readFrame(r *bufio.Reader, max int) (msg, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:4]); err != nil {
		return msg{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:4])
	if n == 0 {
		return msg{}, fmt.Errorf("%w: empty frame", ErrProtocol)
	}
	if uint64(n) > uint64(max) {
		return msg{}, fmt.Errorf("%w: %w: %d bytes, limit %d", ErrProtocol, errFrameTooLarge, n, max)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return msg{}, err
	}
	return decode(body[0], body[1:])
}

// maxServerFrame is the largest frame a client of a job of size ranks
// accepts: an allgather of size full values, or a welcome of size peers.
func maxServerFrame(size int) int {
	return 4096 + size*(3*(MaxHostLen+2)+MaxValueLen+2)
}
