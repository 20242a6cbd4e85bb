package p2p

import (
	"encoding/binary"
	"fmt"
)

// Frames between two endpoints travel as SEND payloads on the pair's queue
// pair. Every frame starts with the same 24-byte header (little-endian; the
// layout is in docs/wire-p2p.md), except EAGER, which carries only its first
// 12 bytes (kind to tag) and the payload after them, its size being the
// frame's length less 12: over shm a SEND of up to 48 bytes travels inside
// its completion's cache line, and the short header lets 36-byte payloads
// do so instead of 24-byte ones.
//
//	off size
//	0   1   kind
//	1   1   flags (flagAckCtrl: your explicit credit frame was consumed;
//	        flagStarved: I waited for credits; flagCanWrite: see RTS;
//	        flagMarked: aux is the ring mark, see ring.go)
//	2   2   credits returned to the receiver of this frame
//	4   4   context id
//	8   4   tag (int32)
//	12  4   aux (kind-specific: FIN status, REVOKE reporter; with
//	        flagMarked, on EAGER, RTS, PIPE and BYE: the ring mark)
//	16  8   size (RTS, PIPE: message size; REVOKE: the lost rank)
//
// EAGER: payload at 12, or at 16 with flagMarked (the mark at 12). RTS: 24 addr u64, 32 rkey u32, 36 zero u32,
// 40 request id u64 (48 bytes). CTS: the same layout (addr: where in the
// receiver's memory the sender writes size bytes, rkey zero). FIN, CANCEL
// and WDONE: 24 request id u64 (32 bytes). PIPE (one fragment of a
// pipelined message; size is the whole message's): 24 message id u64,
// 32 offset of this fragment u64, payload at 40.
const (
	hdrLen      = 24
	eagerHdrLen = 12
	markedLen   = 16 // a marked EAGER's header
	rtsLen      = 48
	finLen      = 32
	pipeLen     = 40
	maxCtlLen   = 48
)

type frameKind uint8

const (
	kEager  frameKind = 1 // small message, payload inline
	kRTS    frameKind = 2 // rendezvous: "read size bytes at addr/rkey, then FIN me"
	kFIN    frameKind = 3 // rendezvous done (aux: 0 ok, 1 truncated, 2 canceled)
	kCredit frameKind = 4 // explicit credit return (uses the reserved slot)
	kPing   frameKind = 5 // liveness
	kRevoke frameKind = 6 // size: the lost rank; aux: who noticed
	kBye    frameKind = 7 // the sender closed its endpoint on purpose
	kCancel frameKind = 8 // the sender canceled the RTS with this id
	// A split rendezvous (an RTS with flagCanWrite): the receiver reads the
	// first part and asks the sender to write the rest (CTS: size bytes at
	// addr of the receiver's process), and the sender says when it has
	// (WDONE, aux: finOK or finFailed).
	kCTS   frameKind = 9
	kWDone frameKind = 10
	// A message above the eager limit sent as consecutive eager-sized
	// fragments, without a handshake (Options.PipelineLimit).
	kPipe frameKind = 11
	kMax  frameKind = 12
)

var kindNames = [...]string{"?", "EAGER", "RTS", "FIN", "CREDIT", "PING", "REVOKE", "BYE", "CANCEL", "CTS", "WDONE", "PIPE"}

func (k frameKind) String() string {
	if k < kMax {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

const (
	flagAckCtrl  = 1 << 0
	flagCanWrite = 1 << 1 // RTS: the sender can write into the receiver's memory (split rendezvous)
	flagStarved  = 1 << 2 // the sender waited for credits: post more buffers if you may
	flagMarked   = 1 << 3 // aux is the ring mark: handle the sender's ring up to it first
)

// FIN status values (header aux).
const (
	finOK        = 0
	finTruncated = 1
	finCanceled  = 2
	finFailed    = 3 // WDONE: the sender could not write its part
)

type header struct {
	kind    frameKind
	flags   uint8
	credits uint16
	ctx     uint32
	tag     int32
	aux     uint32
	size    uint64
	// RTS / FIN / CANCEL
	addr uint64
	rkey uint32
	id   uint64
}

// frameLen is the length of the frame h describes (without an EAGER or
// PIPE frame's payload).
func (h *header) frameLen() int {
	switch h.kind {
	case kEager:
		if h.flags&flagMarked != 0 {
			return markedLen
		}
		return eagerHdrLen
	case kRTS, kCTS:
		return rtsLen
	case kFIN, kCancel, kWDone:
		return finLen
	case kPipe:
		return pipeLen
	}
	return hdrLen
}

// put writes h at the start of b, which must hold h.frameLen() bytes.
func (h *header) put(b []byte) {
	_ = b[eagerHdrLen-1]
	b[0] = byte(h.kind)
	b[1] = h.flags
	binary.LittleEndian.PutUint16(b[2:], h.credits)
	binary.LittleEndian.PutUint32(b[4:], h.ctx)
	binary.LittleEndian.PutUint32(b[8:], uint32(h.tag))
	if h.kind == kEager {
		if h.flags&flagMarked != 0 {
			binary.LittleEndian.PutUint32(b[12:markedLen], h.aux)
		}
		return
	}
	_ = b[hdrLen-1]
	binary.LittleEndian.PutUint32(b[12:], h.aux)
	binary.LittleEndian.PutUint64(b[16:], h.size)
	switch h.kind {
	case kRTS, kCTS:
		binary.LittleEndian.PutUint64(b[24:], h.addr)
		binary.LittleEndian.PutUint32(b[32:], h.rkey)
		binary.LittleEndian.PutUint32(b[36:], 0)
		binary.LittleEndian.PutUint64(b[40:], h.id)
	case kFIN, kCancel, kWDone:
		binary.LittleEndian.PutUint64(b[24:], h.id)
	case kPipe:
		binary.LittleEndian.PutUint64(b[24:], h.id)
		binary.LittleEndian.PutUint64(b[32:], h.addr)
	}
}

// peekEnv and peekPipe read a received frame's fields where put wrote
// them, for a look at a frame whose length is not known (the steer's at
// frames still in their receive slots, see pipe.go): peekEnv any frame's
// ctx and tag (b holds at least eagerHdrLen bytes), peekPipe a PIPE
// frame's message id and offset (at least pipeLen bytes).
func peekEnv(b []byte) (ctx uint32, tag int32) {
	return binary.LittleEndian.Uint32(b[4:]), int32(binary.LittleEndian.Uint32(b[8:]))
}

func peekPipe(b []byte) (id, addr uint64) {
	return binary.LittleEndian.Uint64(b[24:]), binary.LittleEndian.Uint64(b[32:])
}

// parseFrame decodes a received frame of n bytes. It never panics: a frame
// that is short, of unknown kind, or whose sizes disagree is an error, and
// the caller treats the peer as broken.
func parseFrame(b []byte, h *header) error {
	if len(b) < eagerHdrLen {
		return fmt.Errorf("frame of %d bytes is shorter than the shortest header (%d bytes)", len(b), eagerHdrLen)
	}
	h.kind = frameKind(b[0])
	if h.kind == 0 || h.kind >= kMax {
		return fmt.Errorf("unknown frame kind %d", b[0])
	}
	h.flags = b[1]
	h.credits = binary.LittleEndian.Uint16(b[2:])
	h.ctx, h.tag = peekEnv(b)
	if h.kind == kEager {
		if h.flags&flagMarked == 0 {
			h.size = uint64(len(b) - eagerHdrLen)
			return nil
		}
		if len(b) < markedLen {
			return fmt.Errorf("marked EAGER frame of %d bytes is shorter than its %d-byte header", len(b), markedLen)
		}
		h.aux = binary.LittleEndian.Uint32(b[12:])
		h.size = uint64(len(b) - markedLen)
		return nil
	}
	if len(b) < hdrLen {
		return fmt.Errorf("%v frame of %d bytes is shorter than the %d-byte header", h.kind, len(b), hdrLen)
	}
	h.aux = binary.LittleEndian.Uint32(b[12:])
	h.size = binary.LittleEndian.Uint64(b[16:])
	switch h.kind {
	case kRTS, kCTS:
		if len(b) != rtsLen {
			return fmt.Errorf("%v frame of %d bytes, want %d", h.kind, len(b), rtsLen)
		}
		h.addr = binary.LittleEndian.Uint64(b[24:])
		h.rkey = binary.LittleEndian.Uint32(b[32:])
		h.id = binary.LittleEndian.Uint64(b[40:])
		if h.size == 0 || h.size > 1<<48 {
			return fmt.Errorf("%v frame with size %d", h.kind, h.size)
		}
	case kFIN, kCancel, kWDone:
		if len(b) != finLen {
			return fmt.Errorf("%v frame of %d bytes, want %d", h.kind, len(b), finLen)
		}
		h.id = binary.LittleEndian.Uint64(b[24:])
	case kPipe:
		if len(b) <= pipeLen {
			return fmt.Errorf("PIPE frame of %d bytes carries no payload", len(b))
		}
		h.id, h.addr = peekPipe(b)
		if h.size > 1<<48 || h.addr > h.size || uint64(len(b)-pipeLen) > h.size-h.addr {
			return fmt.Errorf("PIPE frame with %d bytes at offset %d of a %d-byte message", len(b)-pipeLen, h.addr, h.size)
		}
	default:
		if len(b) != hdrLen {
			return fmt.Errorf("%v frame of %d bytes, want %d", h.kind, len(b), hdrLen)
		}
	}
	return nil
}
