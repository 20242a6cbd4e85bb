package softrc

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/stretchr/testify/require"
)

// stopPayload is a Payload over data that stops part way (a
// *SuspendError) the first time a read crosses each offset in stops, as a
// streaming reader whose waiter must return does, and fails with
// io.ErrUnexpectedEOF at the end of data, as a lost connection does.
type stopPayload struct {
	data  []byte
	off   int
	stops []int
}

func (p *stopPayload) ReadFull(dst []byte) error {
	end := p.off + len(dst)
	if len(p.stops) > 0 && p.stops[0] > p.off && p.stops[0] < end {
		n := copy(dst, p.data[p.off:p.stops[0]])
		p.off, p.stops = p.stops[0], p.stops[1:]
		return &SuspendError{Filled: n}
	}
	if end > len(p.data) {
		p.off += copy(dst, p.data[p.off:])
		return io.ErrUnexpectedEOF
	}
	p.off += copy(dst, p.data[p.off:end])
	return nil
}

func (p *stopPayload) Skip(n int) error { p.off += n; return nil }

// fakeSteer takes every body into buf (or leaves it, with buf nil) and
// records what it was asked and told.
type fakeSteer struct {
	buf     []byte
	split   int // > 0: the body in two buffers, the first of split bytes
	heads   [][]byte
	steered []bool
}

func (s *fakeSteer) Steer(_ uint64, head []byte, rest int) [][]byte {
	s.heads = append(s.heads, bytes.Clone(head))
	if s.buf == nil {
		return nil
	}
	if s.split > 0 {
		return [][]byte{s.buf[:s.split:s.split], s.buf[s.split:rest]}
	}
	return [][]byte{s.buf[:rest]}
}

func (s *fakeSteer) Steered(ok bool) { s.steered = append(s.steered, ok) }

// TestSendFillResumes: a SEND's payload read that stops part way, in the
// steer's prefix or in the body, in the receive's first buffer or its
// second, goes on where it stopped when run again: every byte lands once,
// in place; the steer is asked once, with the whole prefix, and told once
// its buffer is whole. A read that fails tells the steer its buffer is not.
func TestSendFillResumes(t *testing.T) {
	const n, pre = 1000, 64
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i*7 + 3)
	}
	for _, c := range []struct {
		name   string
		steer  bool // the steer takes the body (else no steer)
		leave  bool // a steer that leaves the body in the receive's buffers
		split  int  // the steer's buffers: two, the first of split bytes
		stops  []int
		cut    int // data ends here (a lost connection), 0: whole
		wantOK []bool
	}{
		{name: "no steer, whole"},
		{name: "no steer, stops in both buffers", stops: []int{100, 700, 701}},
		{name: "steered, whole", steer: true, wantOK: []bool{true}},
		{name: "steered, stops in the prefix and the body", steer: true, stops: []int{10, 63, 64 + 1, 900}, wantOK: []bool{true}},
		{name: "steered in two buffers, stops in both", steer: true, split: 40, stops: []int{64 + 20, 64 + 41, 800}, wantOK: []bool{true}},
		{name: "steer leaves the body, stops", leave: true, stops: []int{30, 600}},
		{name: "steered, lost mid-body", steer: true, stops: []int{300}, cut: 500, wantOK: []bool{false}},
		{name: "no steer, lost", stops: []int{300}, cut: 500},
	} {
		t.Run(c.name, func(t *testing.T) {
			b1, b2 := make([]byte, 512), make([]byte, 600)
			w := &rwqe{id: 7, segs: [][]byte{b1, b2}}
			var st *fakeSteer
			var f sendFill
			switch {
			case c.steer:
				st = &fakeSteer{buf: make([]byte, n), split: c.split}
				f.start(w, n, st, pre)
			case c.leave:
				st = &fakeSteer{}
				f.start(w, n, st, pre)
			default:
				f.start(w, n, nil, pre)
			}
			src := data
			if c.cut > 0 {
				src = data[:c.cut]
			}
			p := &stopPayload{data: src, stops: c.stops}
			var err error
			suspends := 0
			for err = f.run(p); err == ErrSuspended; err = f.run(p) {
				suspends++
				require.LessOrEqual(t, suspends, len(c.stops), "suspended more often than the payload stopped")
			}
			if c.cut > 0 {
				require.True(t, errors.Is(err, io.ErrUnexpectedEOF), "the lost connection's error, got %v", err)
				if st != nil {
					require.Equal(t, c.wantOK, st.steered)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, len(c.stops), suspends)
			got := append(append([]byte(nil), b1...), b2...)[:n]
			if st != nil {
				require.Len(t, st.heads, 1, "the steer was asked more than once")
				require.Equal(t, data[:pre], st.heads[0], "the steer saw a partial prefix")
				require.Equal(t, c.wantOK, st.steered)
			}
			if c.steer {
				require.Equal(t, data[:pre], got[:pre], "the prefix is not in the receive's buffer")
				require.Equal(t, data[pre:], st.buf[:n-pre], "the body is not in the steer's buffer")
				return
			}
			require.Equal(t, data, got, "the payload is not in the receive's buffers")
		})
	}
}
