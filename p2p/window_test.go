package p2p_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
	"github.com/rdmago/rdmago/verbs"
)

// A ring of one-sided writes with notifications: each rank writes its
// block into its right neighbour's window at its own offset and notifies;
// after n-1 steps (forwarding what it received) every window holds every
// block, as in a one-sided ring allgather.
func TestWindowRing(t *testing.T) {
	for _, prov := range []string{"loop", "tcp", "shm"} {
		t.Run(prov, func(t *testing.T) {
			const n, block = 4, 5000
			p2ptest.Run(t, n, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
				me := ep.Rank()
				right, left := (me+1)%n, (me+n-1)%n
				var w *p2p.Window
				var err error
				if me%2 == 0 {
					w, err = ep.AllocWindow(ctx, n*block+16)
				} else {
					w, err = ep.NewWindow(ctx, make([]byte, n*block+16))
				}
				if err != nil {
					return err
				}
				mine := w.Bytes()[me*block : (me+1)*block]
				copy(mine, pattern(block, byte(me)))
				have := me
				for step := range n - 1 {
					// Write the block we got last into the right neighbour.
					src := w.Bytes()[have*block : (have+1)*block]
					if err := w.WriteNotify(ctx, right, have*block, src, uint32(step<<8|have)); err != nil {
						return err
					}
					note, err := w.WaitNotify(ctx, left)
					if err != nil {
						return err
					}
					if int(note.Value>>8) != step || note.Source != left {
						return fmt.Errorf("step %d: notification %+v", step, note)
					}
					have = int(note.Value & 0xff)
				}
				for r := range n {
					if !bytes.Equal(w.Bytes()[r*block:(r+1)*block], pattern(block, byte(r))) {
						return fmt.Errorf("block %d wrong after the ring", r)
					}
				}
				// Plain writes from an unregistered buffer (into the spare
				// tail), and bounds.
				if err := w.Write(ctx, right, n*block, []byte("plain")); err != nil {
					return err
				}
				err = w.Write(ctx, right, n*block+14, []byte("xyz"))
				require.ErrorIs(t, err, p2p.ErrInvalidArgument)
				require.ErrorContains(t, err, fmt.Sprintf("writing 3 bytes at offset %d overruns rank %d's %d-byte window", n*block+14, right, n*block+16))
				return w.Close(ctx)
			})
		})
	}
}

func TestStatsAndRegCache(t *testing.T) {
	p2ptest.Run(t, 2, p2ptest.Options{P2P: p2p.Options{EagerLimit: 1024}}, func(ctx context.Context, ep *p2p.Endpoint) error {
		peer := 1 - ep.Rank()
		big := make([]byte, 100_000)
		for i := range 3 {
			if ep.Rank() == 0 {
				require.NoError(t, ep.Send(ctx, peer, i, []byte("small")))
				require.NoError(t, ep.Send(ctx, peer, i, big)) // same buffer: one registration
			} else {
				_, err := ep.Recv(ctx, peer, i, make([]byte, 10))
				require.NoError(t, err)
				_, err = ep.Recv(ctx, peer, i, big)
				require.NoError(t, err)
			}
		}
		s := ep.Stats()
		ps := s.Peers[peer]
		if ep.Rank() == 0 {
			require.Equal(t, p2p.Counter{Msgs: 3, Bytes: 15}, ps.EagerSent)
			require.Equal(t, p2p.Counter{Msgs: 3, Bytes: 300_000}, ps.RndvSent)
		} else {
			require.Equal(t, p2p.Counter{Msgs: 3, Bytes: 15}, ps.EagerRecv)
			require.Equal(t, p2p.Counter{Msgs: 3, Bytes: 300_000}, ps.RndvRecv)
		}
		require.Equal(t, uint64(1), s.RegMisses, "the buffer was registered once")
		require.Equal(t, uint64(2), s.RegHits)
		require.Equal(t, "loop", ps.Transport)
		return nil
	})
}

// Direct maps a peer's AllocWindow memory over shm: each rank stores its
// rank into its right neighbour's window and publishes with an atomic
// flag, then waits for its left neighbour's flag in its own window. Over
// loop, and for NewWindow (Go memory), there is no mapping.
func TestWindowDirect(t *testing.T) {
	const n = 3
	p2ptest.Run(t, n, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		me := ep.Rank()
		right, left := (me+1)%n, (me+n-1)%n
		w, err := ep.AllocWindow(ctx, 64)
		if err != nil {
			return err
		}
		defer w.Close(ctx)
		if got := w.Direct(me); len(got) != 64 {
			return fmt.Errorf("Direct(self) has %d bytes, want 64", len(got))
		}
		m := w.Direct(right)
		if len(m) != 64 {
			return fmt.Errorf("Direct(%d) has %d bytes, want 64", right, len(m))
		}
		if w.Direct(-1) != nil || w.Direct(n) != nil {
			return fmt.Errorf("Direct of a rank out of range is not nil")
		}
		m[8] = byte(100 + me)
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&m[0])), 1)
		mine := w.Bytes()
		for atomic.LoadUint64((*uint64)(unsafe.Pointer(&mine[0]))) == 0 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("rank %d never stored its flag: %w", left, err)
			}
			runtime.Gosched()
		}
		if mine[8] != byte(100+left) {
			return fmt.Errorf("rank %d stored %d, want %d", left, mine[8], 100+left)
		}
		g, err := ep.NewWindow(ctx, make([]byte, 64))
		if err != nil {
			return err
		}
		defer g.Close(ctx)
		if g.Direct(right) != nil {
			return fmt.Errorf("Direct of a window of Go memory is not nil")
		}
		return nil
	})
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "loop"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		w, err := ep.AllocWindow(ctx, 64)
		if err != nil {
			return err
		}
		defer w.Close(ctx)
		if w.Direct(1-ep.Rank()) != nil {
			return fmt.Errorf("Direct over loop is not nil")
		}
		return nil
	})
}

// ReadPeer and WritePeer name a bad rank, and over a provider that cannot
// reach a peer's memory (loop; shm between the devices of one process,
// which are linked without CMA) they fail with ErrUnsupported. The copies
// themselves run across processes in comm's shared-memory tests.
func TestPeerIOErrors(t *testing.T) {
	for _, prov := range []string{"loop", "shm"} {
		p2ptest.Run(t, 2, p2ptest.Options{Provider: prov}, func(ctx context.Context, ep *p2p.Endpoint) error {
			b := make([]byte, 8)
			for _, peer := range []int{-1, 2, ep.Rank()} {
				if err := ep.ReadPeer(peer, 0, b); !errors.Is(err, p2p.ErrInvalidRank) {
					return fmt.Errorf("%s: ReadPeer(%d): %v, want ErrInvalidRank", prov, peer, err)
				}
				if err := ep.WritePeer(peer, 0, b); !errors.Is(err, p2p.ErrInvalidRank) {
					return fmt.Errorf("%s: WritePeer(%d): %v, want ErrInvalidRank", prov, peer, err)
				}
			}
			other := 1 - ep.Rank()
			if err := ep.ReadPeer(other, 0, b); !errors.Is(err, verbs.ErrUnsupported) {
				return fmt.Errorf("%s: ReadPeer: %v, want ErrUnsupported", prov, err)
			}
			if err := ep.WritePeer(other, 0, b); !errors.Is(err, verbs.ErrUnsupported) {
				return fmt.Errorf("%s: WritePeer: %v, want ErrUnsupported", prov, err)
			}
			return nil
		})
	}
}

// Over shm a write into a peer's provider-memory window is a copy into
// the mapping of that window: the request is complete when Iwrite
// returns, with no completion to poll for, and the bytes are there for
// the peer after any later message, up to the direct limit (16 MiB; a
// piece at a time, so this one takes several). A write into user memory,
// or one above the direct limit, takes the queue pair and arrives too.
func TestWriteDirect(t *testing.T) {
	const direct = 3*p2p.DirectPiece + 100
	big := max(p2p.DirectWriteMax+1, direct)
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		wa, err := ep.AllocWindow(ctx, big+64)
		if err != nil {
			return err
		}
		wu, err := ep.NewWindow(ctx, make([]byte, 64))
		if err != nil {
			return err
		}
		if ep.Rank() == 0 {
			for i := range 3 {
				r, err := wa.Iwrite(1, 8*i, pattern(8, byte(i)), false, 0)
				if err != nil {
					return err
				}
				if !r.Done() {
					return fmt.Errorf("write %d into the peer's provider memory is not complete on return", i)
				}
				if _, err := r.Wait(ctx); err != nil {
					return err
				}
			}
			// A direct write of several pieces (which the next one overwrites).
			r, err := wa.Iwrite(1, 64, pattern(direct, 5), false, 0)
			if err != nil {
				return err
			}
			if !r.Done() {
				return fmt.Errorf("a write of %d bytes into the peer's provider memory is not complete on return", direct)
			}
			if _, err := r.Wait(ctx); err != nil {
				return err
			}
			// IwriteNow: no request for a direct write; one for a write
			// that takes the queue pair (user memory); Iwrite's errors.
			if r, err := wa.IwriteNow(1, 0, pattern(8, 1)); err != nil || r != nil {
				return fmt.Errorf("IwriteNow into the peer's provider memory: request %v, error %v; want neither", r, err)
			}
			ru, err := wu.IwriteNow(1, 8, pattern(8, 9))
			if err != nil || ru == nil {
				return fmt.Errorf("IwriteNow into the peer's user memory: request %v, error %v; want a request", ru, err)
			}
			if _, err := ru.Wait(ctx); err != nil {
				return err
			}
			if _, err := wa.IwriteNow(1, big+64, pattern(8, 1)); !errors.Is(err, p2p.ErrInvalidArgument) {
				return fmt.Errorf("IwriteNow past the window: %v, want ErrInvalidArgument", err)
			}
			// Its direct path leaves every error to Iwrite's checks: a write
			// that straddles the end, a negative offset, a rank out of
			// range; a write to this rank is Iwrite's copy, with a request.
			if _, err := wa.IwriteNow(1, big+60, pattern(8, 1)); !errors.Is(err, p2p.ErrInvalidArgument) {
				return fmt.Errorf("IwriteNow across the window's end: %v, want ErrInvalidArgument", err)
			}
			if _, err := wa.IwriteNow(1, -8, pattern(8, 1)); !errors.Is(err, p2p.ErrInvalidArgument) {
				return fmt.Errorf("IwriteNow at offset -8: %v, want ErrInvalidArgument", err)
			}
			if _, err := wa.IwriteNow(2, 0, pattern(8, 1)); !errors.Is(err, p2p.ErrInvalidRank) {
				return fmt.Errorf("IwriteNow to rank 2 of 2: %v, want ErrInvalidRank", err)
			}
			rs, err := wa.IwriteNow(0, 0, pattern(8, 3))
			if err != nil || rs == nil {
				return fmt.Errorf("IwriteNow into this rank's window: request %v, error %v; want a request", rs, err)
			}
			if _, err := rs.Wait(ctx); err != nil {
				return err
			}
			if !bytes.Equal(wa.Bytes()[:8], pattern(8, 3)) {
				return fmt.Errorf("IwriteNow into this rank's window left %v", wa.Bytes()[:8])
			}
			if err := wa.Write(ctx, 1, 64, pattern(big, 7)); err != nil {
				return err
			}
			if err := wu.Write(ctx, 1, 0, pattern(64, 9)); err != nil {
				return err
			}
			require.Equal(t, uint64(3*8+direct+8+8+big+64), ep.Stats().Peers[1].WriteSent.Bytes)
			return ep.Send(ctx, 1, 1, nil)
		}
		if _, err := ep.Recv(ctx, 0, 1, nil); err != nil {
			return err
		}
		require.Equal(t, pattern(8, 1), wa.Bytes()[:8], "IwriteNow's write")
		for i := 1; i < 3; i++ {
			require.Equal(t, pattern(8, byte(i)), wa.Bytes()[8*i:8*i+8], "write %d", i)
		}
		require.Equal(t, pattern(big, 7), wa.Bytes()[64:64+big])
		require.Equal(t, pattern(64, 9), wu.Bytes())
		return nil
	})
}

// A direct write whose copy another operation interrupts (a write posted
// to the queue pair between two of its pieces) leaves the rest to the
// queue pair, behind that write, and still places every byte: IwriteNow
// then returns a request for the rest, and Iwrite's request completes
// once the rest is in, with the whole write's count.
func TestWriteDirectInterrupted(t *testing.T) {
	size := 3*p2p.DirectPiece + 100
	p2ptest.Run(t, 2, p2ptest.Options{Provider: "shm"}, func(ctx context.Context, ep *p2p.Endpoint) error {
		wa, err := ep.AllocWindow(ctx, size)
		if err != nil {
			return err
		}
		wu, err := ep.NewWindow(ctx, make([]byte, 64))
		if err != nil {
			return err
		}
		for round, now := range []bool{true, false} {
			fill := byte(5 + round)
			if ep.Rank() != 0 {
				if _, err := ep.Recv(ctx, 0, round, nil); err != nil {
					return err
				}
				if !bytes.Equal(wa.Bytes(), pattern(size, fill)) {
					want := pattern(size, fill)
					i := 0
					for i < size && wa.Bytes()[i] == want[i] {
						i++
					}
					return fmt.Errorf("round %d: the interrupted write left wrong bytes in the window, from byte %d: %v want %v", round, i, wa.Bytes()[i:i+8], want[i:i+8])
				}
				if !bytes.Equal(wu.Bytes(), pattern(64, fill)) {
					return fmt.Errorf("round %d: the write queued between the pieces left wrong bytes", round)
				}
				if err := ep.Send(ctx, 0, round, nil); err != nil { // checked: the next round may write
					return err
				}
				continue
			}
			var queued *p2p.Request
			var qerr error
			release := func() {}
			p2p.SetBetweenPieces(func() {
				if queued == nil && qerr == nil {
					// Into user memory: the queue pair's path. A poll may
					// take its completion at once, so the write is also
					// held in flight until the direct one returns.
					queued, qerr = wu.Iwrite(1, 0, pattern(64, fill), false, 0)
					release = ep.HoldWindowOps()
				}
			})
			var r *p2p.Request
			if now {
				r, err = wa.IwriteNow(1, 0, pattern(size, fill))
			} else {
				r, err = wa.Iwrite(1, 0, pattern(size, fill), false, 0)
			}
			p2p.SetBetweenPieces(nil)
			release()
			if err != nil || qerr != nil {
				return fmt.Errorf("round %d: writes: %v, %v", round, err, qerr)
			}
			if queued == nil {
				return fmt.Errorf("round %d: the write of %d bytes was not copied in pieces", round, size)
			}
			if r == nil {
				return fmt.Errorf("round %d: no request for a write of %d bytes, though a write was queued between its pieces", round, size)
			}
			if _, err := queued.Wait(ctx); err != nil {
				return err
			}
			st, err := r.Wait(ctx)
			if err != nil {
				return err
			}
			if st.Count != size {
				return fmt.Errorf("round %d: the interrupted write's count is %d, want %d", round, st.Count, size)
			}
			if err := ep.Send(ctx, 1, round, nil); err != nil {
				return err
			}
			if _, err := ep.Recv(ctx, 1, round, nil); err != nil {
				return err
			}
		}
		return nil
	})
}
