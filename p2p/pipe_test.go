package p2p_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/p2p/p2ptest"
)

// Pipelined messages (above EagerLimit, up to PipelineLimit) on every
// provider: sizes around the fragment size (EagerLimit 256 leaves 240
// payload bytes per fragment) and up to 18 fragments, more than the 3
// credits, so fragments queue behind credits; received into a receive
// posted first, as unexpected messages (gathered, then copied), through a
// matched probe that may catch a message half arrived, and truncated, after
// which the connection carries on. The counters say which protocol ran.
func TestPipelined(t *testing.T) {
	sizes := []int{257, 480, 481, 1000, 4096}
	const rndv = 4097
	for _, prov := range []string{"loop", "tcp", "shm"} {
		for _, mode := range []string{"posted", "unexpected", "mprobe"} {
			t.Run(prov+"/"+mode, func(t *testing.T) {
				o := p2ptest.Options{Provider: prov, Timeout: 30 * time.Second,
					P2P: p2p.Options{EagerLimit: 256, EagerSlots: 4, PipelineLimit: 4096}}
				p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
					all := append(append([]int(nil), sizes...), rndv)
					if ep.Rank() == 0 {
						for i, n := range all {
							if err := ep.Send(ctx, 1, i, pattern(n, byte(i))); err != nil {
								return err
							}
						}
						// A truncated one, then one more that must arrive intact.
						if err := ep.Send(ctx, 1, 100, pattern(3000, 9)); err != nil {
							return err
						}
						if err := ep.Send(ctx, 1, 101, pattern(700, 10)); err != nil {
							return err
						}
						if _, err := ep.Recv(ctx, 1, 0, nil); err != nil { // the receiver has checked everything
							return err
						}
						ps := ep.Stats().Peers[1]
						assert.Equal(t, uint64(len(sizes)+2), ps.PipeSent.Msgs)
						assert.Equal(t, uint64(1), ps.RndvSent.Msgs)
						assert.Zero(t, ps.EagerSent.Msgs)
						return nil
					}
					if mode == "unexpected" {
						// Everything before the rendezvous arrives first: its
						// RTS, sent after them, is here.
						var perr error
						if err := waitUntil(ctx, "the rendezvous's RTS", func() bool {
							_, ok, err := ep.Iprobe(0, len(sizes))
							perr = err
							return ok || err != nil
						}); err != nil {
							return err
						}
						if perr != nil {
							return perr
						}
					}
					for i, n := range all {
						buf := make([]byte, n+5)
						var st p2p.Status
						var err error
						if mode == "mprobe" {
							var m *p2p.Message
							if m, err = ep.Mprobe(ctx, 0, i); err != nil {
								return err
							}
							if m.Status().Count != n {
								return fmt.Errorf("probe of message %d says %d bytes, want %d", i, m.Status().Count, n)
							}
							st, err = m.Recv(ctx, buf)
						} else {
							st, err = ep.Recv(ctx, 0, i, buf)
						}
						if err != nil {
							return err
						}
						if st.Count != n || st.Source != 0 || st.Tag != i {
							return fmt.Errorf("message %d: status %+v, want %d bytes", i, st, n)
						}
						if !bytes.Equal(buf[:n], pattern(n, byte(i))) {
							return fmt.Errorf("message %d (%d bytes): payload differs", i, n)
						}
					}
					_, err := ep.Recv(ctx, 0, 100, make([]byte, 1000))
					require.ErrorIs(t, err, p2p.ErrTruncated)
					assert.ErrorContains(t, err, "message of 3000 bytes does not fit the 1000-byte receive buffer")
					buf := make([]byte, 700)
					if _, err := ep.Recv(ctx, 0, 101, buf); err != nil {
						return err
					}
					if !bytes.Equal(buf, pattern(700, 10)) {
						return fmt.Errorf("message after the truncated one: payload differs")
					}
					ps := ep.Stats().Peers[0]
					assert.Equal(t, uint64(len(sizes)+2), ps.PipeRecv.Msgs)
					return ep.Send(ctx, 0, 0, nil)
				})
			})
		}
	}
}

// The default: pipelined over tcp up to 256 KiB, where the eager limit is
// lower (by default it is 256 KiB there too, up to 33 ranks: a message of
// more than 32 KiB goes as PIPE fragments all the same, steered into its
// receive's buffer, and one of 32 KiB eagerly), over shm
// up to 64 KiB (with a CPU per rank); a negative limit turns it off.
func TestPipelineDefaults(t *testing.T) {
	for _, c := range []struct {
		prov         string
		eager, limit int
		size         int
		pipe         bool
	}{
		{"tcp", 64 << 10, 0, 256 << 10, true},
		{"tcp", 64 << 10, 0, 256<<10 + 1, false},
		{"tcp", 64 << 10, -1, 128 << 10, false},
		{"tcp", 0, 0, 256 << 10, true},  // steered whole
		{"tcp", 0, 0, 32 << 10, false},  // eager
		{"tcp", 0, 0, 32<<10 + 1, true}, // steered whole
		{"tcp", 0, -1, 256 << 10, true}, // steered whole: not the pipeline's limit
		{"shm", 0, 0, 64 << 10, true},
		{"shm", 0, 0, 64<<10 + 1, false},
		{"shm", 0, 0, 128 << 10, false},
		{"shm", 0, 256 << 10, 128 << 10, true},
	} {
		t.Run(fmt.Sprintf("%s/eager=%d/limit=%d/size=%d", c.prov, c.eager, c.limit, c.size), func(t *testing.T) {
			o := p2ptest.Options{Provider: c.prov, P2P: p2p.Options{EagerLimit: c.eager, PipelineLimit: c.limit}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 0 {
					if err := ep.Send(ctx, 1, 1, pattern(c.size, 3)); err != nil {
						return err
					}
					_, err := ep.Recv(ctx, 1, 2, nil)
					assert.Equal(t, c.pipe, ep.Stats().Peers[1].PipeSent.Msgs == 1, "pipelined")
					return err
				}
				buf := make([]byte, c.size)
				if _, err := ep.Recv(ctx, 0, 1, buf); err != nil {
					return err
				}
				if !bytes.Equal(buf, pattern(c.size, 3)) {
					return fmt.Errorf("payload differs")
				}
				return ep.Send(ctx, 0, 2, nil)
			})
		})
	}
}

// heldWindow has rank 0 post a window of sends while rank 1 makes no
// progress (returns no credits), so that their frames queue behind the
// credits: rank 0 calls send, rank 1 hold.
type heldWindow struct{ held, posted chan struct{} }

func newHeldWindow() *heldWindow {
	return &heldWindow{held: make(chan struct{}), posted: make(chan struct{})}
}

// send posts the window (post) once rank 1 holds, then waits for it all.
func (w *heldWindow) send(ctx context.Context, post func() ([]*p2p.Request, error)) error {
	select {
	case <-w.held:
	case <-ctx.Done():
		return ctx.Err()
	}
	reqs, err := post()
	close(w.posted)
	if err != nil {
		return err
	}
	return p2p.WaitAll(ctx, reqs...)
}

// isendAll starts a send to rank 1 of a message of each size, tag its
// index, payload pattern(n, index).
func isendAll(ep *p2p.Endpoint, sizes []int) ([]*p2p.Request, error) {
	var reqs []*p2p.Request
	for i, n := range sizes {
		r, err := ep.Isend(1, i, pattern(n, byte(i)))
		if err != nil {
			return reqs, err
		}
		reqs = append(reqs, r)
	}
	return reqs, nil
}

// hold keeps ep from progress until rank 0 has posted its window.
func (w *heldWindow) hold(ctx context.Context, ep *p2p.Endpoint) error {
	release := ep.HoldProgress()
	defer release()
	close(w.held)
	select {
	case <-w.posted:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Over tcp, a message of more than twice EagerLimit in the pipelined range
// goes by rendezvous while earlier messages' frames wait for credits (a
// window of Isends, where the rendezvous's READ streams better than the
// pipeline's copies), and pipelined when sent alone. With 4 credits and
// 6-fragment messages, the first Isend posts what the credits allow and
// queues the rest; the next ones find that queue and take the rendezvous;
// a message of two fragments stays pipelined however full the queue; the
// last, sent once everything has gone, is pipelined. Every message arrives
// intact, in order.
func TestPipelineWindowTakesRendezvous(t *testing.T) {
	const window, size, small = 6, 1400, 480 // EagerLimit 256: 240 bytes a fragment
	o := p2ptest.Options{Provider: "tcp", Timeout: 30 * time.Second,
		P2P: p2p.Options{EagerLimit: 256, EagerSlots: 4, EagerSlotsMax: 4, PipelineLimit: 4096}}
	w := newHeldWindow()
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		sizes := make([]int, window)
		for i := range sizes {
			sizes[i] = size
		}
		sizes = append(sizes, small)
		if ep.Rank() == 0 {
			if err := w.send(ctx, func() ([]*p2p.Request, error) { return isendAll(ep, sizes) }); err != nil {
				return err
			}
			ps := ep.Stats().Peers[1]
			assert.Equal(t, uint64(2), ps.PipeSent.Msgs, "pipelined: the first of the window and the small one")
			if _, err := ep.Recv(ctx, 1, 0, nil); err != nil { // the window has arrived
				return err
			}
			if err := ep.Send(ctx, 1, window+1, pattern(size, 7)); err != nil {
				return err
			}
			ps = ep.Stats().Peers[1]
			assert.Equal(t, uint64(3), ps.PipeSent.Msgs, "the message sent alone is pipelined")
			assert.Equal(t, uint64(window-1), ps.RndvSent.Msgs, "rendezvous: the rest of the window")
			return nil
		}
		// Nothing is received until the window has been sent: its frames
		// queue behind the 4 credits.
		if err := w.hold(ctx, ep); err != nil {
			return err
		}
		if err := waitUntil(ctx, "the window's last RTS", func() bool {
			_, ok, _ := ep.Iprobe(0, window-1)
			return ok
		}); err != nil {
			return err
		}
		sizes = append(sizes, size)
		for i, n := range sizes {
			buf := make([]byte, n)
			st, err := ep.Recv(ctx, 0, i, buf)
			if err != nil {
				return err
			}
			if st.Count != n || !bytes.Equal(buf, pattern(n, byte(min(i, window+1)))) {
				return fmt.Errorf("message %d: %d bytes (or other data), want %d", i, st.Count, n)
			}
			if i == window {
				if err := ep.Send(ctx, 0, 0, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// Over tcp, whose default eager limit is 256 KiB, a message in one buffer
// of more than windowRndvMin (128 KiB) goes by rendezvous while earlier
// messages' frames wait for credits, as a pipelined one does: alone it
// goes as one PIPE fragment steered into place, but a backed-up link
// would copy it into a staging slot before the kernel copies it again.
// One of 128 KiB stays pipelined however full the queue, one sent alone
// is pipelined, and a message of a head and a body (as the collectives
// send them) stays pipelined (steered whole) in any window: an RTS carries
// no head. With 4
// credits (one kept for credit returns) the first three go, the fourth
// queues, and the messages after it find that queue.
func TestEagerWindowTakesRendezvous(t *testing.T) {
	const large, small, parts = 192 << 10, 128 << 10, 2
	sizes := []int{large, large, large, large, large, large, small}
	o := p2ptest.Options{Provider: "tcp", Timeout: 30 * time.Second,
		P2P: p2p.Options{EagerSlots: 4, EagerSlotsMax: 4}}
	w := newHeldWindow()
	p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
		if ep.Rank() == 0 {
			if got := ep.EagerLimit(1); got <= large {
				return fmt.Errorf("EagerLimit %d: the test needs %d bytes within it", got, large)
			}
			err := w.send(ctx, func() ([]*p2p.Request, error) {
				reqs, err := isendAll(ep, sizes)
				for i := range parts {
					if err != nil {
						break
					}
					m := pattern(large, byte(len(sizes)+i))
					var r *p2p.Request
					if r, err = ep.IsendParts(1, len(sizes)+i, m[:32], m[32:]); err == nil {
						reqs = append(reqs, r)
					}
				}
				return reqs, err
			})
			if err != nil {
				return err
			}
			ps := ep.Stats().Peers[1]
			assert.Equal(t, uint64(5+parts), ps.PipeSent.Msgs, "pipelined: four large ones before the queue, the small one and the messages of two parts")
			assert.Equal(t, uint64(2), ps.RndvSent.Msgs, "rendezvous: the large ones in one buffer that found the queue")
			assert.Equal(t, uint64(parts), ps.PartsSent.Msgs, "the messages of two parts")
			if _, err := ep.Recv(ctx, 1, 0, nil); err != nil { // the window has arrived
				return err
			}
			if err := ep.Send(ctx, 1, len(sizes)+parts, pattern(large, 99)); err != nil {
				return err
			}
			ps = ep.Stats().Peers[1]
			assert.Equal(t, uint64(6+parts), ps.PipeSent.Msgs, "the message sent alone is pipelined")
			assert.Equal(t, uint64(2), ps.RndvSent.Msgs)
			return nil
		}
		if err := w.hold(ctx, ep); err != nil {
			return err
		}
		all := append(append([]int(nil), sizes...), large, large, large)
		for i, n := range all {
			buf := make([]byte, n)
			st, err := ep.Recv(ctx, 0, i, buf)
			if err != nil {
				return err
			}
			want := pattern(n, byte(i))
			if i == len(all)-1 {
				want = pattern(n, 99)
			}
			if st.Count != n || !bytes.Equal(buf, want) {
				return fmt.Errorf("message %d: %d bytes (or other data), want %d", i, st.Count, n)
			}
			if i == len(all)-2 {
				if err := ep.Send(ctx, 0, 0, nil); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// A message in the pipelined range goes by rendezvous over shared memory
// when its sender has a receive posted for a message of its receiver's
// (traffic both ways, where the pipeline's second copy costs a busy core),
// and pipelined otherwise: with no posted receive, with one on another
// channel only, and over tcp, whose READ is no single copy. (Two ranks: a
// CPU each on a machine of two; where ranks outnumber CPUs it stays
// pipelined, TestCrowdedBothWaysPipelined.)
func TestPipelinedRangeBothWays(t *testing.T) {
	for _, c := range []struct {
		prov  string
		eager int // Options.EagerLimit: tcp's default sends 128 KiB eagerly
		size  int
		rndv  bool // the send made with a receive from its peer posted
	}{
		{"shm", 0, 48 << 10, true},
		{"tcp", 64 << 10, 128 << 10, false},
	} {
		t.Run(c.prov, func(t *testing.T) {
			o := p2ptest.Options{Provider: c.prov, Timeout: 30 * time.Second, P2P: p2p.Options{EagerLimit: c.eager}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				side, err := ep.Channel(5)
				if err != nil {
					return err
				}
				if ep.Rank() == 0 {
					for tag := 1; tag <= 2; tag++ {
						buf := make([]byte, c.size)
						if _, err := ep.Recv(ctx, 1, tag, buf); err != nil {
							return err
						}
						if !bytes.Equal(buf, pattern(c.size, byte(tag))) {
							return fmt.Errorf("message %d: payload differs", tag)
						}
					}
					if err := ep.Send(ctx, 1, 3, pattern(c.size, 3)); err != nil {
						return err
					}
					ps := ep.Stats().Peers[1]
					assert.Equal(t, uint64(1), ps.PipeSent.Msgs, "rank 0 expects nothing from rank 1: pipelined")
					assert.Zero(t, ps.RndvSent.Msgs)
					return side.Send(ctx, 1, 5, nil)
				}
				other, err := side.Irecv(0, 5, nil)
				if err != nil {
					return err
				}
				if err := ep.Send(ctx, 0, 1, pattern(c.size, 1)); err != nil {
					return err
				}
				ps := ep.Stats().Peers[0]
				assert.Equal(t, uint64(1), ps.PipeSent.Msgs, "a receive posted on another channel only: pipelined")
				back := make([]byte, c.size)
				r, err := ep.Irecv(0, 3, back)
				if err != nil {
					return err
				}
				if err := ep.Send(ctx, 0, 2, pattern(c.size, 2)); err != nil {
					return err
				}
				ps = ep.Stats().Peers[0]
				if c.rndv && !ep.Crowded() { // (a machine of one CPU)
					assert.Equal(t, uint64(1), ps.PipeSent.Msgs, "a receive posted for rank 0: not pipelined")
					assert.Equal(t, uint64(1), ps.RndvSent.Msgs, "a receive posted for rank 0: rendezvous")
				} else {
					assert.Equal(t, uint64(2), ps.PipeSent.Msgs, "%s: pipelined both times", c.prov)
				}
				if _, err := r.Wait(ctx); err != nil {
					return err
				}
				if !bytes.Equal(back, pattern(c.size, 3)) {
					return fmt.Errorf("rank 0's answer: payload differs")
				}
				_, err = other.Wait(ctx)
				return err
			})
		})
	}
}

// The link breaks while pipelined messages stream (fault injection): both
// ranks fail with a peer loss instead of waiting for the fragments that
// will never come.
func TestPipelinedPeerLoss(t *testing.T) {
	inj, open := faultyOpener(2)
	ctx := context.Background()
	eps, err := p2ptest.Start(ctx, 2, p2ptest.Options{Provider: "loop", P2P: p2p.Options{
		EagerLimit: 4096, EagerSlots: 4, PipelineLimit: 8 << 20, LivenessTimeout: -1,
		OpenDevice: open,
	}})
	require.NoError(t, err)
	defer p2ptest.Close(eps)
	qp := eps[0].Stats().Peers[1].QPNum
	tctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	started := make(chan struct{})
	go func() {
		buf := make([]byte, 8<<20)
		var err error
		for i := 0; err == nil; i++ {
			err = eps[0].Send(tctx, 1, 1, buf)
		}
		errs <- err
	}()
	go func() {
		buf := make([]byte, 8<<20)
		var err error
		for i := 0; err == nil; i++ {
			if i == 1 {
				close(started)
			}
			_, err = eps[1].Recv(tctx, 0, 1, buf)
		}
		errs <- err
	}()
	<-started
	// Into the second message: its first fragments have arrived.
	require.Eventually(t, func() bool { return eps[1].Stats().Peers[0].PipeRecv.Msgs >= 2 }, 10*time.Second, time.Millisecond,
		"the second pipelined message never started")
	disconnect(t, inj, qp)
	for range 2 {
		err := <-errs
		require.NoError(t, checkLost(err, 0, 1), "%v", err)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
	}
	assert.NotZero(t, eps[1].Stats().Peers[0].PipeRecv.Msgs)
}

// Pipelined messages whose receives are posted before they come: over the
// providers that read SEND payloads themselves (verbs.SendSteerer: loop,
// tcp) fragments are read straight into the receive's buffer
// (SteeredRecv), over shm none are. Eager and pipelined messages of one
// tag alternate, every receive takes any tag, and each must get the
// message sent in its turn: a fragment read before the eager message ahead
// of it is handled must not start its message first.
func TestPipelinedSteered(t *testing.T) {
	sizes := []int{3000, 40, 1000, 4096, 8, 2500, 257, 100, 4000}
	for _, c := range []struct {
		prov   string
		steers bool // the provider is a verbs.SendSteerer
	}{{"loop", true}, {"tcp", true}, {"shm", false}} {
		t.Run(c.prov, func(t *testing.T) {
			o := p2ptest.Options{Provider: c.prov, Timeout: 30 * time.Second,
				P2P: p2p.Options{EagerLimit: 256, EagerSlots: 16, PipelineLimit: 4096}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				if ep.Rank() == 0 {
					if _, err := ep.Recv(ctx, 1, 99, nil); err != nil { // the receives are posted
						return err
					}
					for round := range 3 {
						for i, n := range sizes {
							if err := ep.Send(ctx, 1, 7, pattern(n, byte(round*len(sizes)+i))); err != nil {
								return err
							}
						}
					}
					_, err := ep.Recv(ctx, 1, 98, nil)
					return err
				}
				var reqs []*p2p.Request
				var bufs [][]byte
				for range 3 {
					for range sizes {
						b := make([]byte, 4096)
						r, err := ep.Irecv(0, p2p.AnyTag, b)
						if err != nil {
							return err
						}
						reqs, bufs = append(reqs, r), append(bufs, b)
					}
				}
				if err := ep.Send(ctx, 0, 99, nil); err != nil {
					return err
				}
				if err := p2p.WaitAll(ctx, reqs...); err != nil {
					return err
				}
				for k, r := range reqs {
					n := sizes[k%len(sizes)]
					st, _, err := r.Test()
					if err != nil {
						return err
					}
					if st.Count != n || st.Tag != 7 {
						return fmt.Errorf("receive %d: status %+v, want the %d-byte message sent as number %d", k, st, n, k)
					}
					if !bytes.Equal(bufs[k][:n], pattern(n, byte(k))) {
						return fmt.Errorf("receive %d (%d bytes): payload differs", k, n)
					}
				}
				ps := ep.Stats().Peers[0]
				if c.steers {
					assert.NotZero(t, ps.SteeredRecv.Msgs, "no fragment was steered")
				} else {
					assert.Zero(t, ps.SteeredRecv.Msgs)
				}
				assert.Equal(t, uint64(3*6), ps.PipeRecv.Msgs)
				return ep.Send(ctx, 0, 98, nil)
			})
		})
	}
}

// TestSteeredWhole: over tcp a message of more than 32 KiB, though within
// the eager limit, goes as a PIPE fragment whose body the provider reads
// straight into the posted receive's buffers (SteeredRecv), not into a
// receive slot and then out of it; it arrives intact. So does a message of
// two parts (IsendParts into IrecvParts, as the collectives send theirs):
// its head and body land in the receive's head and body. One of 32 KiB
// goes eager.
func TestSteeredWhole(t *testing.T) {
	const rounds, headLen = 20, 40
	for _, c := range []struct {
		name  string
		n     int // bytes in all
		parts bool
		piped bool
	}{
		{"one buffer", 200 << 10, false, true},
		{"one buffer of 33 KiB", 33 << 10, false, true},
		{"two parts", 48 << 10, true, true},
		{"two parts of 32 KiB", 32 << 10, true, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := p2ptest.Options{Provider: "tcp", Timeout: 30 * time.Second}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				peer := 1 - ep.Rank()
				head, body := make([]byte, headLen), make([]byte, c.n-headLen)
				for i := range rounds {
					want := pattern(c.n, byte(i))
					if ep.Rank() == 0 {
						// Each message goes once its receive is posted.
						if _, err := ep.Recv(ctx, peer, i, nil); err != nil {
							return err
						}
						var err error
						if c.parts {
							var r *p2p.Request
							if r, err = ep.IsendParts(peer, i, want[:headLen], want[headLen:]); err == nil {
								_, err = r.Wait(ctx)
							}
						} else {
							err = ep.Send(ctx, peer, i, want)
						}
						if err != nil {
							return err
						}
						continue
					}
					got := make([]byte, c.n)
					var r *p2p.Request
					var err error
					if c.parts {
						r, err = ep.IrecvParts(peer, i, head, body)
					} else {
						r, err = ep.Irecv(peer, i, got)
					}
					if err != nil {
						return err
					}
					if err := ep.Send(ctx, peer, i, nil); err != nil { // posted: send it
						return err
					}
					if _, err := r.Wait(ctx); err != nil {
						return err
					}
					if c.parts {
						copy(got, head)
						copy(got[headLen:], body)
					}
					if !bytes.Equal(got, want) {
						return fmt.Errorf("message %d arrived changed", i)
					}
				}
				st := ep.Stats().Peers[peer]
				if ep.Rank() == 0 {
					if c.piped {
						assert.Equal(t, uint64(rounds), st.PipeSent.Msgs, "sent as PIPE fragments")
					} else {
						assert.Zero(t, st.PipeSent.Msgs, "sent as PIPE fragments")
					}
					return nil
				}
				if !c.piped {
					assert.Zero(t, st.SteeredRecv.Msgs)
					return nil
				}
				// Every receive is posted before its message is sent, and
				// is steered unless the steer cannot take the endpoint's
				// lock at once (then the body is copied).
				assert.Greater(t, st.SteeredRecv.Msgs, uint64(rounds/2), "bodies steered into place")
				return nil
			})
		})
	}
}
