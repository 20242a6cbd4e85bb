package p2p_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// foldRecord is a fold function that adds little-endian uint32s and
// records the pieces it was given (offset into the receive's buffer, and
// length). It runs under the endpoint's lock; the test reads the record
// after the request completed.
type foldRecord struct {
	base   []byte
	pieces [][2]int
}

func (f *foldRecord) fold(dst, src []byte) {
	off := int(uintptrDiff(dst, f.base))
	f.pieces = append(f.pieces, [2]int{off, len(src)})
	for i := 0; i+4 <= len(src); i += 4 {
		binary.LittleEndian.PutUint32(dst[i:], binary.LittleEndian.Uint32(dst[i:])+binary.LittleEndian.Uint32(src[i:]))
	}
}

// uintptrDiff is how far into base dst starts.
func uintptrDiff(dst, base []byte) int {
	return cap(base) - cap(dst)
}

// words is n bytes of little-endian uint32s, word i being i*k+seed.
func words(n int, k, seed uint32) []byte {
	b := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b[i:], uint32(i/4)*k+seed)
	}
	return b
}

// A fold receive adds the message into its buffer, on every provider and
// for every protocol: eager, pipelined (folded fragment by fragment, as
// they arrive, when posted first; what arrived before the receive as one
// piece, then the rest), rendezvous (staged, folded once whole); posted
// before the message or after it arrived; a message shorter than the
// buffer folds into its prefix. The pieces never split an element, and
// the connection carries on after a truncated fold receive.
func TestIrecvFold(t *testing.T) {
	sizes := []int{200, 1000, 4096, 8192} // eager, pipelined (two sizes), rendezvous
	for _, prov := range []string{"loop", "tcp", "shm"} {
		for _, mode := range []string{"posted", "unexpected"} {
			t.Run(prov+"/"+mode, func(t *testing.T) {
				o := p2ptest.Options{Provider: prov, Timeout: 30 * time.Second,
					P2P: p2p.Options{EagerLimit: 256, EagerSlots: 4, PipelineLimit: 4096}}
				p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
					if ep.Rank() == 0 {
						if _, err := ep.Recv(ctx, 1, 99, nil); err != nil { // the receiver is ready
							return err
						}
						for i, n := range sizes {
							if err := ep.Send(ctx, 1, i, words(n, 3, uint32(i))); err != nil {
								return err
							}
						}
						if err := ep.Send(ctx, 1, 100, words(3000, 1, 0)); err != nil { // truncated
							return err
						}
						return ep.Send(ctx, 1, 101, words(700, 5, 1))
					}
					type recv struct {
						r   *p2p.Request
						f   *foldRecord
						buf []byte
					}
					post := func(i, n, cap int) (recv, error) {
						buf := words(cap, 1, 7)
						f := &foldRecord{base: buf}
						r, err := ep.IrecvFold(0, i, buf, 4, f.fold)
						return recv{r, f, buf}, err
					}
					var rs []recv
					if mode == "posted" {
						for i, n := range sizes {
							rc, err := post(i, n, n+16)
							if err != nil {
								return err
							}
							rs = append(rs, rc)
						}
					}
					if err := ep.Send(ctx, 0, 99, nil); err != nil {
						return err
					}
					if mode == "unexpected" {
						if err := waitUntil(ctx, "the rendezvous's RTS", func() bool {
							_, ok, _ := ep.Iprobe(0, len(sizes)-1)
							return ok
						}); err != nil {
							return err
						}
						for i, n := range sizes {
							rc, err := post(i, n, n+16)
							if err != nil {
								return err
							}
							rs = append(rs, rc)
						}
					}
					for i, n := range sizes {
						rc := rs[i]
						st, err := rc.r.Wait(ctx)
						if err != nil {
							return fmt.Errorf("message %d (%d bytes): %w", i, n, err)
						}
						assert.Equal(t, n, st.Count, "message %d", i)
						// Word j: 7+j from the buffer plus 3j+i from the message;
						// the 16 bytes past the message are untouched.
						assert.Equal(t, words(n, 4, uint32(7+i)), rc.buf[:n], "message %d (%d bytes): folded result", i, n)
						assert.Equal(t, words(n+16, 1, 7)[n:], rc.buf[n:], "message %d: bytes past it", i)
						total := 0
						for _, pc := range rc.f.pieces {
							assert.Zero(t, pc[0]%4, "message %d: a piece at offset %d splits a word", i, pc[0])
							assert.Equal(t, total, pc[0], "message %d: pieces out of order", i)
							total += pc[1]
						}
						assert.Equal(t, n, total, "message %d: pieces %v", i, rc.f.pieces)
						switch {
						case n == 8192: // rendezvous: staged, one piece
							assert.Len(t, rc.f.pieces, 1, "message %d (rendezvous)", i)
						case n > 256 && mode == "posted": // pipelined into a posted receive: fragment by fragment
							assert.Greater(t, len(rc.f.pieces), 1, "message %d (pipelined)", i)
						}
					}
					// Truncated: an error naming both sizes; the next message is intact.
					buf := make([]byte, 1000)
					r, err := ep.IrecvFold(0, 100, buf, 4, (&foldRecord{base: buf}).fold)
					if err != nil {
						return err
					}
					_, err = r.Wait(ctx)
					require.ErrorIs(t, err, p2p.ErrTruncated)
					assert.ErrorContains(t, err, "message of 3000 bytes does not fit the 1000-byte receive buffer")
					rc, err := post(101, 700, 700)
					if err != nil {
						return err
					}
					if _, err := rc.r.Wait(ctx); err != nil {
						return err
					}
					assert.Equal(t, words(700, 6, 8), rc.buf, "message after the truncated one")
					return nil
				})
			})
		}
	}
}

// A fold receive whose elements the fragments would split fails with an
// error naming the fragment and the element size, and the connection
// carries on; a fold receive needs a function and a unit.
func TestIrecvFoldSplitElements(t *testing.T) {
	o := p2ptest.Options{Provider: "tcp", Timeout: 30 * time.Second,
		P2P: p2p.Options{EagerLimit: 256, EagerSlots: 4, PipelineLimit: 4096}}
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			if _, err := ep.Recv(ctx, 1, 99, nil); err != nil {
				return err
			}
			if err := ep.Send(ctx, 1, 1, pattern(2100, 1)); err != nil { // pipelined
				return err
			}
			return ep.Send(ctx, 1, 2, pattern(300, 2))
		}
		_, err := ep.IrecvFold(0, 1, make([]byte, 8), 0, func(dst, src []byte) {})
		require.ErrorIs(t, err, p2p.ErrInvalidArgument)
		_, err = ep.IrecvFold(0, 1, make([]byte, 8), 4, nil)
		require.ErrorIs(t, err, p2p.ErrInvalidArgument)

		buf := make([]byte, 2100)
		r, err := ep.IrecvFold(0, 1, buf, 7, func(dst, src []byte) {})
		if err != nil {
			return err
		}
		if err := ep.Send(ctx, 0, 99, nil); err != nil {
			return err
		}
		_, err = r.Wait(ctx)
		require.ErrorIs(t, err, p2p.ErrInvalidArgument)
		assert.ErrorContains(t, err, "splits the fold's 7-byte elements")
		next := make([]byte, 300)
		if _, err := ep.Recv(ctx, 0, 2, next); err != nil {
			return err
		}
		assert.Equal(t, pattern(300, 2), next, "message after the failed fold")
		return nil
	})
}

// FoldLimit is what a peer sends eagerly or pipelined: the pipeline limit,
// or the eager limit where pipelining is off; 0 for this rank and ranks
// out of range.
func TestFoldLimit(t *testing.T) {
	for _, c := range []struct {
		pipe, want int
	}{{4096, 4096}, {-1, 256}} {
		o := p2ptest.Options{Provider: "tcp", P2P: p2p.Options{EagerLimit: 256, PipelineLimit: c.pipe}}
		p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
			assert.Equal(t, c.want, ep.FoldLimit(1-ep.Rank()), "pipeline limit %d", c.pipe)
			assert.Zero(t, ep.FoldLimit(ep.Rank()), "this rank")
			assert.Zero(t, ep.FoldLimit(2), "out of range")
			return nil
		})
	}
}
