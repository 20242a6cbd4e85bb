package p2p

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A copy given back is reused for the next payload of its size class, and
// holds that payload; sizes outside the pooled classes are plain copies.
func TestSpareBufsReuse(t *testing.T) {
	var s spareBufs
	data := make([]byte, 40<<10)
	for i := range data {
		data[i] = byte(i * 7)
	}
	a := s.get(data)
	require.Equal(t, data, a)
	require.Equal(t, 64<<10, cap(a), "a 40 KiB copy takes the 64 KiB class")
	s.put(a)
	require.Equal(t, 64<<10, s.held)
	b := s.get(data[:33<<10])
	require.Equal(t, data[:33<<10], b)
	require.Same(t, &a[:1][0], &b[:1][0], "the buffer given back is reused")
	require.Zero(t, s.held)

	// Queue-pair sizes over shm (above the 2096-byte ring) are pooled too.
	for _, n := range []int{529, 1024, 2048, 4096} {
		c := s.get(data[:n])
		require.Equal(t, data[:n], c)
		s.put(c)
		require.Equal(t, cap(c), s.held, "a %d-byte copy is kept", n)
		d := s.get(data[n-1 : 2*n-1])
		require.Equal(t, data[n-1:2*n-1], d)
		require.Same(t, &c[:1][0], &d[:1][0], "a %d-byte copy given back is reused", n)
		require.Zero(t, s.held)
	}

	small := s.get(data[:100])
	require.Equal(t, data[:100], small)
	s.put(small)
	require.Zero(t, s.held, "small copies are not kept")
	huge := make([]byte, 2<<20)
	s.put(s.get(huge))
	require.Zero(t, s.held, "copies above the largest class are not kept")
	s.put(make([]byte, 5000)) // not a class size (a pipe's exact buffer, say)
	require.Zero(t, s.held)
}

// What an endpoint keeps is bounded however many copies come back at once.
func TestSpareBufsBounded(t *testing.T) {
	var s spareBufs
	var bufs [][]byte
	for range 3 * spareMaxBytes / (1 << spareMaxShift) {
		bufs = append(bufs, s.get(make([]byte, 1<<spareMaxShift)))
	}
	for _, b := range bufs {
		s.put(b)
		require.LessOrEqual(t, s.held, spareMaxBytes)
	}
	require.Equal(t, spareMaxBytes, s.held)
}
