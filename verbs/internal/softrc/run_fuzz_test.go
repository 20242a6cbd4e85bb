package softrc_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/internal/softrc"
)

// bodyPayload is a frame body read from memory, never past its end.
type bodyPayload struct{ r *bytes.Reader }

func (p bodyPayload) ReadFull(dst []byte) error {
	_, err := io.ReadFull(p.r, dst)
	return err
}

func (p bodyPayload) Skip(n int) error {
	if n > p.r.Len() {
		return io.ErrUnexpectedEOF
	}
	_, err := p.r.Seek(int64(n), io.SeekCurrent)
	return err
}

// FuzzWriteRun hands the responder WRITE_RUN bodies: it must never panic,
// must refuse a body whose writes do not add up to it with a protocol
// error, must consume exactly the body otherwise, and may write only
// inside the target region, whatever the descriptors say. A descriptor's
// address is taken as an offset into the region and an rkey of 0 as the
// region's, so that valid writes are within the fuzzer's reach.
func FuzzWriteRun(f *testing.F) {
	desc := func(off uint64, rkey, n uint32) []byte {
		d := make([]byte, softrc.RunDescLen)
		binary.BigEndian.PutUint64(d, off)
		binary.BigEndian.PutUint32(d[8:], rkey)
		binary.BigEndian.PutUint32(d[12:], n)
		return d
	}
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	f.Add(uint8(2), cat(desc(0, 0, 3), desc(8, 0, 2), []byte("abcde")))
	f.Add(uint8(2), cat(desc(0, 0, 3), desc(8, 77, 2), []byte("abcde")))   // bad rkey second
	f.Add(uint8(1), cat(desc(60, 0, 8), []byte("12345678")))               // past the region's end
	f.Add(uint8(2), cat(desc(0, 0, 0), desc(4, 0, 1), []byte("z")))        // zero-length first
	f.Add(uint8(1), cat(desc(0, 0, 100), []byte("short")))                 // overruns the body
	f.Add(uint8(3), cat(desc(0, 0, 1), desc(1, 0, 1), desc(2, 0, 1), nil)) // falls short
	const regionLen = 64
	f.Fuzz(func(t *testing.T, k uint8, body []byte) {
		qp, mem, rkey, base := fuzzTarget(t, regionLen)
		canary := make([]byte, 32)
		for i := range canary {
			canary[i] = 0xc5
		}
		// Region addresses: mem[16:16+regionLen] is registered, the rest a canary.
		copy(mem[:16], canary)
		copy(mem[16+regionLen:], canary[:16])
		b := bytes.Clone(body)
		for i := 0; i < int(k) && (i+1)*softrc.RunDescLen <= len(b); i++ {
			d := b[i*softrc.RunDescLen:]
			binary.BigEndian.PutUint64(d, base+binary.BigEndian.Uint64(d)%(2*regionLen))
			if binary.BigEndian.Uint32(d[8:]) == 0 {
				binary.BigEndian.PutUint32(d[8:], rkey)
			}
		}
		h := softrc.Header{Op: softrc.FrameWriteRun, QPN: qp.Num(), Seq: seqOf(t, qp), Len: uint32(len(b)), Imm: uint32(k)}
		if h.Check(1<<31) != nil {
			return // the transport's decoder refuses it before the responder
		}
		r := bytes.NewReader(b)
		var resp softrc.Response
		err := qp.HandleRequest(&h, bodyPayload{r}, &resp)
		resp.Done()
		if err != nil {
			if !errors.Is(err, softrc.ErrProtocol) {
				t.Fatalf("responder error %v is not a protocol error", err)
			}
		} else if r.Len() != 0 {
			t.Fatalf("the responder left %d bytes of the body unread", r.Len())
		}
		if !bytes.Equal(mem[:16], canary[:16]) || !bytes.Equal(mem[16+regionLen:], canary[:16]) {
			t.Fatalf("a write landed outside its region: % x", mem)
		}
	})
}

// fuzzTarget is a QP in RTS connected to itself on a device with no link
// (nothing runs but the caller's HandleRequest) with a regionLen-byte
// region registered at mem[16:], its rkey and its address.
func fuzzTarget(t *testing.T, regionLen int) (*softrc.QP, []byte, uint32, uint64) {
	t.Helper()
	pd, qp, _ := selfConnected(t, &fakeDriver{intr: make(chan struct{}, 1)}, fakeConfig, verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1})
	mem := make([]byte, 16+regionLen+16)
	mr, err := pd.RegMR(mem[16:16+regionLen], verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	require.NoError(t, err)
	return qp.(*softrc.QP), mem, mr.RKey(), mr.Addr()
}

// seqOf is the sequence number qp's responder expects first: its peer's
// (here its own) PSN.
func seqOf(t *testing.T, qp *softrc.QP) uint32 {
	a, err := verbs.DecodeAddress(qp.Address())
	require.NoError(t, err, fmt.Sprint(qp.Num()))
	return a.PSN
}
