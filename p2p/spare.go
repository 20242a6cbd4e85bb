package p2p

import "math/bits"

// spareBufs recycles the copies of eager payloads (and the buffers of
// pipelined messages) that arrive before their receive is posted. Such a
// copy is common (a peer's next message often overtakes this rank's
// Irecv), and allocating it anew each time costs,
// for messages of tens of KiB, zeroing, a garbage collection every few
// dozen messages and the scavenger returning the pages to the kernel, only
// for them to fault in again: with 64 KiB messages over tcp that was about
// a tenth of a rank's CPU time. The buffers are guarded by Endpoint.mu.
type spareBufs struct {
	free [spareClasses][][]byte
	held int // bytes in free
}

const (
	// Copies of up to 256 bytes are cheap to allocate; from 512 bytes up
	// (the queue-pair messages over shm start at 529) one per unexpected
	// message was a few percent of a 2-process bibw's CPU in growslice
	// and the garbage collector.
	spareMinShift = 9
	spareMaxShift = 20
	spareClasses  = spareMaxShift - spareMinShift + 1
	// spareMaxBytes bounds what an endpoint keeps: a burst of unexpected
	// messages must not pin its memory for good.
	spareMaxBytes = 4 << 20
)

// spareClass is the size class of an n-byte copy, or -1 if n is not pooled.
func spareClass(n int) int {
	if n <= 1<<(spareMinShift-1) || n > 1<<spareMaxShift {
		return -1
	}
	return bits.Len(uint(n-1)) - spareMinShift
}

// get returns a copy of data, in a recycled buffer where one fits.
func (s *spareBufs) get(data []byte) []byte {
	if spareClass(len(data)) < 0 {
		return append([]byte(nil), data...)
	}
	return append(s.take(len(data))[:0], data...)
}

// take returns a buffer of n bytes, recycled where one fits; its contents
// are unspecified (a pipelined message's fragments fill it).
func (s *spareBufs) take(n int) []byte {
	c := spareClass(n)
	if c < 0 {
		return make([]byte, n)
	}
	if k := len(s.free[c]); k > 0 {
		b := s.free[c][k-1]
		s.free[c][k-1] = nil
		s.free[c] = s.free[c][:k-1]
		s.held -= cap(b)
		return b[:n]
	}
	return make([]byte, n, 1<<(c+spareMinShift))
}

// put takes back a copy get made once nothing refers to it any more.
func (s *spareBufs) put(b []byte) {
	c := spareClass(cap(b))
	if c < 0 || cap(b) != 1<<(c+spareMinShift) || s.held+cap(b) > spareMaxBytes {
		return
	}
	s.free[c] = append(s.free[c], b[:0])
	s.held += cap(b)
}
