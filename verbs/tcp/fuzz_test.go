package tcp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// FuzzDecodeFrame feeds arbitrary bytes to the frame decoder as a stream of
// frames: it must never panic, must refuse anything EncodeHeader would not
// produce from a valid header, and what it accepts must round-trip.
func FuzzDecodeFrame(f *testing.F) {
	seed := func(h softrc.Header, payload []byte) []byte {
		b := make([]byte, HeaderLen)
		EncodeHeader(b, &h)
		return append(b, payload...)
	}
	f.Add(seed(softrc.Header{Op: softrc.FrameWrite, Flags: softrc.FlagAckReq, QPN: 0x123456, Seq: 7, Len: 4, RAddr: 0x7f0000001000, RKey: 0xdeadbeef}, []byte("data")))
	f.Add(seed(softrc.Header{Op: softrc.FrameSendImm, QPN: 1, Len: 0, Imm: 0x01020304}, nil))
	f.Add(seed(softrc.Header{Op: softrc.FrameReadReq, QPN: 1, Len: 1 << 20, RAddr: 8, RKey: 9}, nil))
	f.Add(seed(softrc.Header{Op: softrc.FrameCmpSwap, QPN: 1, RAddr: 16, RKey: 9, CmpAdd: 1, Swap: 2}, nil))
	f.Add(seed(softrc.Header{Op: softrc.FrameNak, Syndrome: softrc.SynRNR, RNRTimer: 12, QPN: 1, Seq: 3}, nil))
	f.Add(seed(softrc.Header{Op: softrc.FrameReadResp, QPN: 1, Len: 3}, []byte{1, 2, 3}))
	f.Add(seed(softrc.Header{Op: softrc.FrameAtomicAck, QPN: 1, CmpAdd: 42}, nil))
	f.Add(seed(softrc.Header{Op: softrc.FrameAck, QPN: 1, Seq: 9}, nil))
	f.Add(seed(softrc.Header{Op: softrc.FrameWriteRun, QPN: 1, Seq: 4, Len: 2*softrc.RunDescLen + 3, Imm: 2}, make([]byte, 2*softrc.RunDescLen+3)))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	f.Add(bytes.Repeat([]byte{0xff}, 2*HeaderLen))
	f.Add([]byte{})
	const maxMsg = 1 << 31
	f.Fuzz(func(t *testing.T, data []byte) {
		br := bufio.NewReader(bytes.NewReader(data))
		var hb [HeaderLen]byte
		for {
			if _, err := io.ReadFull(br, hb[:]); err != nil {
				return
			}
			h, err := DecodeHeader(hb[:], maxMsg)
			if err != nil {
				if !errors.Is(err, softrc.ErrProtocol) {
					t.Fatalf("decoder error %v does not wrap ErrProtocol", err)
				}
				return
			}
			var again [HeaderLen]byte
			EncodeHeader(again[:], &h)
			if again != hb {
				t.Fatalf("accepted header does not round-trip:\n% x\n% x", hb, again)
			}
			if h.Op.IsResponse() == h.Op.IsRequest() {
				t.Fatalf("accepted op %v is neither request nor response", h.Op)
			}
			if n := h.PayloadLen(); n > 0 {
				if _, err := br.Discard(n); err != nil {
					return
				}
			}
		}
	})
}

func TestDecodeHeaderRejects(t *testing.T) {
	good := func() []byte {
		b := make([]byte, HeaderLen)
		EncodeHeader(b, &softrc.Header{Op: softrc.FrameWrite, QPN: 5, Len: 10})
		return b
	}
	for name, mut := range map[string]func(b []byte) []byte{
		"short":       func(b []byte) []byte { return b[:HeaderLen-1] },
		"op 0":        func(b []byte) []byte { b[0] = 0; return b },
		"op 9":        func(b []byte) []byte { b[0] = 9; return b },
		"run of none": func(b []byte) []byte { b[0] = byte(softrc.FrameWriteRun); return b },
		"run of too many": func(b []byte) []byte {
			b[0] = byte(softrc.FrameWriteRun)
			binary.BigEndian.PutUint32(b[12:], 1<<20)
			binary.BigEndian.PutUint32(b[28:], softrc.RunMax+1)
			return b
		},
		"run shorter than its descriptors": func(b []byte) []byte {
			b[0] = byte(softrc.FrameWriteRun)
			binary.BigEndian.PutUint32(b[28:], 1) // 10 bytes, 16 of descriptor
			return b
		},
		"run asking for an ack": func(b []byte) []byte {
			b[0] = byte(softrc.FrameWriteRun)
			b[1] = softrc.FlagAckReq
			binary.BigEndian.PutUint32(b[12:], 16)
			binary.BigEndian.PutUint32(b[28:], 1)
			return b
		},
		"flags":             func(b []byte) []byte { b[1] = 0x10; return b },
		"syndrome on write": func(b []byte) []byte { b[2] = 1; return b },
		"nak bad syndrome": func(b []byte) []byte {
			b[0] = byte(softrc.FrameNak)
			b[2] = 9
			binary.BigEndian.PutUint32(b[12:], 0)
			return b
		},
		"nak bad timer": func(b []byte) []byte {
			b[0] = byte(softrc.FrameNak)
			b[2] = 1
			b[3] = 32
			binary.BigEndian.PutUint32(b[12:], 0)
			return b
		},
		"qpn > 24 bits":   func(b []byte) []byte { binary.BigEndian.PutUint32(b[4:], 1<<24); return b },
		"too long":        func(b []byte) []byte { binary.BigEndian.PutUint32(b[12:], 1<<31+1); return b },
		"ack with length": func(b []byte) []byte { b[0] = byte(softrc.FrameAck); return b },
		"atomic with len": func(b []byte) []byte { b[0] = byte(softrc.FrameFetchAdd); return b },
	} {
		_, err := DecodeHeader(mut(good()), 1<<31)
		if !errors.Is(err, softrc.ErrProtocol) {
			t.Errorf("%s: got %v, want a protocol error", name, err)
		}
	}
	if _, err := DecodeHeader(good(), 1<<31); err != nil {
		t.Fatalf("good header refused: %v", err)
	}
}
