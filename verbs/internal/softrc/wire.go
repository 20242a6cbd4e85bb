package softrc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/rdmago/rdmago/verbs"
)

// FrameOp is the operation a frame carries between a requester and a
// responder. The names follow the IBTA opcodes and AETH syndromes so that
// behaviour maps 1:1 to rxe; the values are rdmago's own and are what the tcp
// provider puts on the wire (docs/wire-tcp.md).
type FrameOp uint8

// Request operations, sent by a requester to its peer's responder.
const (
	FrameSend     FrameOp = 1 // SEND: payload of Len bytes follows
	FrameSendImm  FrameOp = 2 // SEND with immediate: payload follows
	FrameWrite    FrameOp = 3 // RDMA WRITE to RAddr/RKey: payload follows
	FrameWriteImm FrameOp = 4 // RDMA WRITE with immediate: payload follows, consumes a recv
	FrameReadReq  FrameOp = 5 // RDMA READ request of Len bytes at RAddr/RKey: no payload
	FrameCmpSwap  FrameOp = 6 // ATOMIC CMP_AND_SWP at RAddr/RKey with CmpAdd, Swap
	FrameFetchAdd FrameOp = 7 // ATOMIC FETCH_AND_ADD at RAddr/RKey with CmpAdd
	// WRITE_RUN: Imm RDMA WRITEs in one frame, the messages Seq to
	// Seq+Imm−1 (EncodeRun); Len is the whole body. A transport may send
	// a run of small WRITEs that ask for no ACK this way: one header and
	// one pass through the responder for all of them.
	FrameWriteRun  FrameOp = 8
	FrameAck       FrameOp = 16
	FrameNak       FrameOp = 17 // Syndrome says why; RNRTimer for an RNR NAK
	FrameReadResp  FrameOp = 18 // READ response: payload of Len bytes follows
	FrameAtomicAck FrameOp = 19 // atomic response: CmpAdd holds the original value
)

// IsRequest reports whether op travels from requester to responder.
func (op FrameOp) IsRequest() bool { return op >= FrameSend && op <= FrameWriteRun }

// IsResponse reports whether op travels from responder to requester.
func (op FrameOp) IsResponse() bool { return op >= FrameAck && op <= FrameAtomicAck }

func (op FrameOp) String() string {
	switch op {
	case FrameSend:
		return "SEND"
	case FrameSendImm:
		return "SEND_IMM"
	case FrameWrite:
		return "WRITE"
	case FrameWriteImm:
		return "WRITE_IMM"
	case FrameReadReq:
		return "READ_REQ"
	case FrameCmpSwap:
		return "CMP_SWAP"
	case FrameFetchAdd:
		return "FETCH_ADD"
	case FrameWriteRun:
		return "WRITE_RUN"
	case FrameAck:
		return "ACK"
	case FrameNak:
		return "NAK"
	case FrameReadResp:
		return "READ_RESP"
	case FrameAtomicAck:
		return "ATOMIC_ACK"
	}
	return fmt.Sprintf("FrameOp(%d)", uint8(op))
}

// Frame flags.
const (
	FlagAckReq    uint8 = 1 << 0 // the requester wants an ACK for this request
	FlagSolicited uint8 = 1 << 1 // the solicited-event bit of the WR
	FlagFence     uint8 = 1 << 2 // informational: the WR was fenced
	// FlagServed, on a READ request only: the requester wants the
	// responder's QP to report the response written (verbs.SendReportServed),
	// with CmpAdd as the tag.
	FlagServed uint8 = 1 << 3
	knownFlags       = FlagAckReq | FlagSolicited | FlagFence | FlagServed
)

// NAK syndromes (after the AETH NAK codes).
const (
	SynRNR       uint8 = 1 // receiver not ready: no receive posted; RNRTimer says how long to wait
	SynInvReq    uint8 = 2 // invalid request → REM_INV_REQ_ERR
	SynRemAccess uint8 = 3 // remote access error → REM_ACCESS_ERR
	SynRemOp     uint8 = 4 // remote operational error → REM_OP_ERR
)

// Header is one frame's header, transport-neutral. For requests QPN is the
// destination (responder) QP; for responses it is the requester's QP.
type Header struct {
	Op       FrameOp
	Flags    uint8
	Syndrome uint8 // NAK only
	RNRTimer uint8 // RNR NAK only: the responder's min_rnr_timer code
	QPN      uint32
	Seq      uint32 // message sequence number, starting at the requester's PSN
	Len      uint32 // message length (READ_REQ: bytes requested)
	RAddr    uint64
	RKey     uint32
	Imm      uint32 // host order here; big-endian on the wire
	CmpAdd   uint64 // atomic compare / addend; ATOMIC_ACK: original value
	Swap     uint64
}

// PayloadLen is how many payload bytes follow the header on the wire.
func (h *Header) PayloadLen() int {
	switch h.Op {
	case FrameSend, FrameSendImm, FrameWrite, FrameWriteImm, FrameReadResp, FrameWriteRun:
		return int(h.Len)
	}
	return 0
}

// Check validates the header's fields for a transport decoder: a known
// operation, known flags, a syndrome only on NAKs, and a payload no larger
// than maxMsg.
func (h *Header) Check(maxMsg uint64) error {
	if !h.Op.IsRequest() && !h.Op.IsResponse() {
		return fmt.Errorf("%w: unknown frame op %d", ErrProtocol, uint8(h.Op))
	}
	if h.Flags&^knownFlags != 0 {
		return fmt.Errorf("%w: unknown frame flags %#x", ErrProtocol, h.Flags)
	}
	if h.Flags&FlagServed != 0 && h.Op != FrameReadReq {
		return fmt.Errorf("%w: served flag on a %v frame", ErrProtocol, h.Op)
	}
	if h.Op == FrameNak {
		if h.Syndrome < SynRNR || h.Syndrome > SynRemOp {
			return fmt.Errorf("%w: unknown NAK syndrome %d", ErrProtocol, h.Syndrome)
		}
		if h.RNRTimer > 31 {
			return fmt.Errorf("%w: RNR timer code %d", ErrProtocol, h.RNRTimer)
		}
	} else if h.Syndrome != 0 || h.RNRTimer != 0 {
		return fmt.Errorf("%w: syndrome on a %v frame", ErrProtocol, h.Op)
	}
	if uint64(h.Len) > maxMsg {
		return fmt.Errorf("%w: %v of %d bytes exceeds the maximum message %d", ErrProtocol, h.Op, h.Len, maxMsg)
	}
	if h.Op == FrameWriteRun {
		if h.Imm < 1 || h.Imm > RunMax || uint64(h.Len) < uint64(h.Imm)*RunDescLen || h.Flags != 0 {
			return fmt.Errorf("%w: WRITE_RUN of %d writes in %d bytes with flags %#x", ErrProtocol, h.Imm, h.Len, h.Flags)
		}
	}
	return nil
}

// A WRITE_RUN frame's body is Imm descriptors of RunDescLen bytes, each
// the remote address (8 bytes), rkey (4) and length (4) of one WRITE,
// big-endian, and then the WRITEs' payloads one after the other: the
// responder checks every write of the run under one hold of its QP's lock
// before it reads any payload.
const (
	RunDescLen = 16
	// RunMax is the most WRITEs one run may carry.
	RunMax = 256
	// RunWriteMax is the largest WRITE a transport puts in a run: small
	// ones, whose header would cost more than their payload.
	RunWriteMax = 512
)

// RunMember reports whether a transport may put r in a WRITE_RUN: a WRITE
// of 1 to RunWriteMax bytes without flags (no ACK asked for, not fenced
// or solicited).
func RunMember(r *Request) bool {
	return r.Op == FrameWrite && r.Flags == 0 && r.Len > 0 && r.Len <= RunWriteMax
}

// EncodeRun fills h with the header of a WRITE_RUN of rs (2 to RunMax
// RunMember requests in the order NextRequests gave them, so with
// consecutive sequence numbers) and desc, len(rs)*RunDescLen bytes, with
// their descriptors. The payloads follow desc, each request's Data in
// order.
func EncodeRun(h *Header, desc []byte, rs []Request) {
	n := len(rs) * RunDescLen
	for i := range rs {
		r := &rs[i]
		putRunDesc(desc[i*RunDescLen:], r.RAddr, r.RKey, r.Len)
		n += int(r.Len)
	}
	*h = Header{Op: FrameWriteRun, QPN: rs[0].QPN, Seq: rs[0].Seq, Len: uint32(n), Imm: uint32(len(rs))}
}

// putRunDesc writes one write's descriptor at the start of d: remote
// address, rkey and length, big-endian.
func putRunDesc(d []byte, raddr uint64, rkey, n uint32) {
	binary.BigEndian.PutUint64(d, raddr)
	binary.BigEndian.PutUint32(d[8:], rkey)
	binary.BigEndian.PutUint32(d[12:], n)
}

// ErrProtocol is the cause of a transport error due to a malformed or
// unexpected frame; the transport drops the connection.
var ErrProtocol = verbs.ErrProtocol

// Payload is the body of an incoming frame, positioned at its first byte.
// The core reads exactly PayloadLen bytes from it: straight into registered
// memory (ReadFull) or, when the request is refused, by Skip.
type Payload interface {
	ReadFull(dst []byte) error
	Skip(n int) error
}

// ErrSuspended is what a READ response's or a SEND's handling returns
// when its Payload's ReadFull stopped part way with a *SuspendError: the
// rest of the frame is still to come, and whoever reads the connection
// next finishes it with QP.Resume before anything else. (A transport
// whose waiter streams a large response itself suspends it when the
// waiter must return; see verbs/tcp.)
var ErrSuspended = errors.New("softrc: payload read suspended mid-frame")

// SuspendError is a Payload.ReadFull's answer when it stopped before dst
// was full and the frame's handling is to be resumed later: Filled bytes
// of dst hold data. Only the handling of a READ response and of a SEND
// accepts it (the transport suspends no other frame); anywhere else it is
// an error like any other, and the connection is dropped.
type SuspendError struct{ Filled int }

func (e *SuspendError) Error() string {
	return fmt.Sprintf("softrc: payload read suspended after %d bytes", e.Filled)
}

// BytesPayload is a Payload over in-memory segments (the loop provider hands
// the requester's own buffers to the responder, which copies once, as a DMA
// engine would).
type BytesPayload struct {
	Segs [][]byte
	// Progress, if set, is called after every ProgressChunk bytes copied,
	// so the requester's ACK timer measures stalls, not message sizes.
	Progress func()
	i        int
	off      int
	since    int
}

// ProgressChunk is how many payload bytes a transport moves between calls
// to QP.Progress.
const ProgressChunk = 1 << 20

// ReadFull copies the next len(dst) bytes into dst.
func (p *BytesPayload) ReadFull(dst []byte) error {
	for len(dst) > 0 {
		if p.i >= len(p.Segs) {
			return io.ErrUnexpectedEOF
		}
		seg := p.Segs[p.i][p.off:]
		if len(seg) > ProgressChunk {
			seg = seg[:ProgressChunk]
		}
		n := copy(dst, seg)
		if p.Progress != nil {
			if p.since += n; p.since >= ProgressChunk {
				p.since = 0
				p.Progress()
			}
		}
		dst = dst[n:]
		p.off += n
		if p.off == len(p.Segs[p.i]) {
			p.i++
			p.off = 0
		}
	}
	return nil
}

// Skip drops the next n bytes.
func (p *BytesPayload) Skip(n int) error {
	for n > 0 {
		if p.i >= len(p.Segs) {
			return io.ErrUnexpectedEOF
		}
		k := min(n, len(p.Segs[p.i])-p.off)
		n -= k
		p.off += k
		if p.off == len(p.Segs[p.i]) {
			p.i++
			p.off = 0
		}
	}
	return nil
}

// Request is an outgoing request produced by QP.NextRequest.
type Request struct {
	Header
	// Data is the payload (PayloadLen bytes in total), pointing into
	// registered memory or the WR's inline copy. It stays valid until Done.
	Data [][]byte
	refs []*MR
	inl  []byte
}

// Done releases the memory Data points into. The transport calls it once
// the payload has been written (or abandoned).
func (r *Request) Done() {
	for i, m := range r.refs {
		m.release()
		r.refs[i] = nil
	}
	r.refs = r.refs[:0]
	r.Data = r.Data[:0]
}

// Response is what the responder answers to one request, produced by
// QP.HandleRequest. Op 0 means nothing is to be sent.
type Response struct {
	Header
	// Data is a READ response's payload, pointing into registered memory.
	// It stays valid until Done.
	Data []byte
	ref  *MR
	// served is the responder QP that reports this READ response written
	// (FlagServed), with tag, once the transport says so (Sent).
	served *QP
	tag    uint64
}

// Sent is the transport's word that it has handed the whole response to
// its peer (written it into the connection, or copied it into the
// requester's memory): a READ response whose requester asked
// (verbs.SendReportServed) is reported on the responder's send CQ. Call it
// before Done, and only when the response went out whole.
func (r *Response) Sent() {
	if q := r.served; q != nil {
		r.served = nil
		q.sendCQ.push(verbs.WC{ID: r.tag, Status: verbs.StatusSuccess, Opcode: verbs.WCReadServed,
			ByteLen: r.Len, QPNum: q.num})
	}
}

// Done releases the memory Data points into.
func (r *Response) Done() {
	if r.ref != nil {
		r.ref.release()
		r.ref = nil
	}
	r.Data = nil
	r.served = nil
}

// Link is a connected queue pair's transport. The core calls Kick when
// NextRequest may have work and Close to drop the connection; both must not
// block for long and are never called with core locks held.
//
// The transport guarantees: one goroutine at a time calls NextRequest (or
// NextRequestMax, NextRequests) on a QP, one at a time calls
// HandleRequest, one at a time calls HandleResponse; requests reach the
// peer in the order NextRequest produced them, and responses come back in
// the order the peer's HandleRequest produced them.
type Link interface {
	Kick()
	Close()
}

// Transport is what a provider plugs into a Device.
type Transport interface {
	// AddressPayload is the provider payload of a QP address (see verbs.QPAddress).
	AddressPayload(qpn uint32) []byte
	// CheckRemote validates a peer address's payload; an error fails Modify
	// to RTR without changing anything.
	CheckRemote(remote []byte) error
	// Connect starts connecting q (just moved to RTR) to its remote. It must
	// not block: the transport later calls q.Attach with a Link, or nothing
	// (the core then fails posted work with RETRY_EXC_ERR after the
	// device's ConnectTimeout).
	Connect(q *QP)
	// Close releases the transport (listeners, connections).
	Close() error
}

// QPForgetter is implemented by transports that keep per-QP state while a
// QP waits for its connection; the core calls Forget when the QP is closed
// or reset.
type QPForgetter interface {
	Forget(q *QP)
}
