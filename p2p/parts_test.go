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

// A parts receive puts a message's first len(head) bytes into head and the
// rest into body, whatever the path the message took: eager (the shm ring,
// a tcp slot, a self-send), pipelined fragment by fragment, rendezvous
// (staged, then placed), posted before it arrived or matched after; a
// message shorter than head stays in head, and neither buffer is written
// past the message.
func TestIrecvParts(t *testing.T) {
	const headLen = 40
	sizes := []int{0, 30, 40, 41, 200, 1000, 4096, 8192, 300 << 10} // to eager, pipelined, rendezvous (split past 128 KiB over shm)
	for _, prov := range []string{"loop", "tcp", "shm"} {
		for _, mode := range []string{"posted", "unexpected", "self"} {
			t.Run(prov+"/"+mode, func(t *testing.T) {
				o := p2ptest.Options{Provider: prov, Timeout: 30 * time.Second,
					P2P: p2p.Options{EagerLimit: 256, EagerSlots: 4, PipelineLimit: 4096}}
				cts := p2p.CTSSent()
				p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
					from := 0
					if mode == "self" {
						if ep.Rank() == 0 {
							return nil
						}
						from = 1
					}
					if ep.Rank() == 0 {
						if _, err := ep.Recv(ctx, 1, 99, nil); err != nil { // the receiver is ready
							return err
						}
						for i, n := range sizes {
							if err := ep.Send(ctx, 1, i, pattern(n, byte(i+1))); err != nil {
								return err
							}
						}
						if err := ep.Send(ctx, 1, 100, pattern(200, 9)); err != nil { // truncated (eager)
							return err
						}
						return ep.Send(ctx, 1, 101, pattern(200, 10))
					}
					type recv struct {
						r          *p2p.Request
						head, body []byte
					}
					post := func(i, n int) (recv, error) {
						// 16 bytes to spare past the message, filled with 0xEE.
						buf := make([]byte, headLen+max(n-headLen, 0)+16)
						for j := range buf {
							buf[j] = 0xEE
						}
						head, body := buf[:headLen:headLen], buf[headLen:]
						r, err := ep.IrecvParts(from, i, head, body)
						return recv{r, head, body}, err
					}
					var rs []recv
					postAll := func() error {
						for i, n := range sizes {
							rc, err := post(i, n)
							if err != nil {
								return err
							}
							rs = append(rs, rc)
						}
						return nil
					}
					switch mode {
					case "posted":
						if err := postAll(); err != nil {
							return err
						}
						if err := ep.Send(ctx, 0, 99, nil); err != nil {
							return err
						}
					case "unexpected":
						if err := ep.Send(ctx, 0, 99, nil); err != nil {
							return err
						}
						// The first rendezvous (8 KiB): the sender's Send
						// waits for it to be taken before the next.
						if err := waitUntil(ctx, "the rendezvous's RTS", func() bool {
							_, ok, _ := ep.Iprobe(0, 7)
							return ok
						}); err != nil {
							return err
						}
						if err := postAll(); err != nil {
							return err
						}
					case "self":
						if err := postAll(); err != nil {
							return err
						}
						for i, n := range sizes {
							if err := ep.Send(ctx, 1, i, pattern(n, byte(i+1))); err != nil {
								return err
							}
						}
					}
					for i, n := range sizes {
						rc := rs[i]
						st, err := rc.r.Wait(ctx)
						if err != nil {
							return fmt.Errorf("message %d (%d bytes): %w", i, n, err)
						}
						assert.Equal(t, n, st.Count, "message %d", i)
						got := append(append([]byte(nil), rc.head...), rc.body...)
						want := append(pattern(n, byte(i+1)), got[n:]...)
						for j := n; j < len(want); j++ {
							want[j] = 0xEE
						}
						assert.Equal(t, want, got, "message %d (%d bytes): head and body", i, n)
					}
					if mode == "self" {
						return nil
					}
					if prov == "shm" {
						// 300 KiB over shm: a split rendezvous, whose
						// sender writes its half into the staging buffer.
						assert.Positive(t, p2p.CTSSent()-cts, "split rendezvous (CTS sent)")
					}
					// Truncated: an error naming both sizes, the head in
					// place; the next message is intact.
					rc := recv{head: make([]byte, headLen), body: make([]byte, 100)}
					r, err := ep.IrecvParts(0, 100, rc.head, rc.body)
					if err != nil {
						return err
					}
					_, err = r.Wait(ctx)
					require.ErrorIs(t, err, p2p.ErrTruncated)
					assert.ErrorContains(t, err, "message of 200 bytes does not fit the 140-byte receive buffer")
					assert.Equal(t, pattern(200, 9)[:headLen], rc.head, "the truncated message's head")
					rc, err = post(101, 200)
					if err != nil {
						return err
					}
					if _, err := rc.r.Wait(ctx); err != nil {
						return err
					}
					assert.Equal(t, pattern(200, 10), append(append([]byte(nil), rc.head...), rc.body[:160]...), "message after the truncated one")
					return nil
				})
			})
		}
	}
}

// A parts send is one message of head and then body, whatever the path it
// takes: the ring or a frame (inline, a staging slot, a lent pair) when
// eager, joined into one buffer first when pipelined, sent by rendezvous
// or to this rank; the receiver's status counts both. The sizes span the
// ring's first line (body bytes that share it with the head), the tcp
// lent pair's 4 KiB and the eager limit (64 KiB here).
func TestIsendParts(t *testing.T) {
	type msg struct{ head, body int }
	msgs := []msg{{0, 0}, {0, 10}, {16, 0}, {32, 0}, {32, 16}, {32, 17}, {48, 100}, {49, 100}, {32, 2000}, {32, 5000}, {32, 60000}, {8, 65528}, {32, 65528}, {32, 200000}, {32, 2 << 20}}
	for _, prov := range []string{"loop", "tcp", "shm"} {
		for _, self := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/self=%v", prov, self), func(t *testing.T) {
				o := p2ptest.Options{Provider: prov, Timeout: 30 * time.Second,
					P2P: p2p.Options{EagerLimit: 64 << 10, PipelineLimit: 256 << 10}}
				p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
					to := 1
					if self {
						to = ep.Rank()
					} else if ep.Rank() == 1 {
						for i, m := range msgs {
							buf := make([]byte, m.head+m.body+8)
							st, err := ep.Recv(ctx, 0, i, buf)
							if err != nil {
								return fmt.Errorf("message %d (%d+%d bytes): %w", i, m.head, m.body, err)
							}
							assert.Equal(t, m.head+m.body, st.Count, "message %d", i)
							want := append(pattern(m.head, byte(i+1)), pattern(m.body, byte(i+101))...)
							assert.Equal(t, want, buf[:st.Count], "message %d (%d+%d bytes)", i, m.head, m.body)
						}
						return nil
					}
					var rs []*p2p.Request
					for i, m := range msgs {
						r, err := ep.IsendParts(to, i, pattern(m.head, byte(i+1)), pattern(m.body, byte(i+101)))
						if err != nil {
							return err
						}
						rs = append(rs, r)
						if self {
							buf := make([]byte, m.head+m.body)
							st, err := ep.Recv(ctx, to, i, buf)
							if err != nil {
								return err
							}
							assert.Equal(t, m.head+m.body, st.Count, "message %d", i)
							assert.Equal(t, append(pattern(m.head, byte(i+1)), pattern(m.body, byte(i+101))...), buf, "message %d to this rank", i)
						}
					}
					for i, r := range rs {
						st, err := r.Wait(ctx)
						if err != nil {
							return fmt.Errorf("send %d: %w", i, err)
						}
						assert.Equal(t, msgs[i].head+msgs[i].body, st.Count, "send %d's status", i)
					}
					return nil
				})
			})
		}
	}
}

// With the default eager limit a message of a 32-byte header and a body of
// the provider's eager size (IsendParts, as the collectives send one)
// goes as one message, not by rendezvous: the default leaves 64 bytes of
// room beyond the provider's size, and EagerLimit reports it. Over shm it
// goes eager; over tcp as one PIPE fragment steered whole (steersWhole),
// one frame though it is past the pipeline's fragment size. One byte more
// than the limit is pipelined (with a pipeline limit past it), in
// fragments of the provider's size; a limit set in Options is taken as it
// is.
func TestEagerLimitHoldsAHeaderBeyondTheProviderSize(t *testing.T) {
	for _, c := range []struct {
		prov        string
		set         int  // Options.EagerLimit
		eager, frag int  // the limit it gives, and a pipelined fragment's payload
		steered     bool // the parts message goes as one PIPE fragment, steered whole
	}{
		{"tcp", 0, 256<<10 + 64, 256 << 10, true},
		{"shm", 0, 32<<10 + 64, 32 << 10, false},
		{"tcp", 64 << 10, 64 << 10, 64 << 10, true},
	} {
		t.Run(fmt.Sprintf("%s/set=%d", c.prov, c.set), func(t *testing.T) {
			o := p2ptest.Options{Provider: c.prov, Timeout: 30 * time.Second,
				P2P: p2p.Options{EagerLimit: c.set, PipelineLimit: 1 << 20}}
			p2ptest.Run(t, 2, o, func(ctx context.Context, ep *p2p.Endpoint) error {
				peer := 1 - ep.Rank()
				if got := ep.EagerLimit(peer); got != c.eager {
					return fmt.Errorf("EagerLimit %d, want %d", got, c.eager)
				}
				if got := ep.PipeFrag(peer); got != c.frag {
					return fmt.Errorf("pipelined fragments of %d bytes, want %d", got, c.frag)
				}
				head, body := pattern(32, 1), pattern(c.eager-32, 2)
				long := pattern(c.eager+1, 3)
				if ep.Rank() == 0 {
					r, err := ep.IsendParts(peer, 5, head, body)
					if err != nil {
						return err
					}
					if _, err := r.Wait(ctx); err != nil {
						return err
					}
					if _, err := ep.Recv(ctx, peer, 7, nil); err != nil { // the parts message has arrived
						return err
					}
					if err := ep.Send(ctx, peer, 6, long); err != nil {
						return err
					}
					st := ep.Stats().Peers[peer]
					eager, piped := uint64(1), uint64(1)
					if c.steered {
						eager, piped = 0, 2
					}
					if st.EagerSent.Msgs != eager || st.PipeSent.Msgs != piped || st.RndvSent.Msgs != 0 {
						return fmt.Errorf("%d eager, %d pipelined and %d rendezvous messages sent, want %d, %d and 0 (a header and a body of %d bytes, %d bytes pipelined)",
							st.EagerSent.Msgs, st.PipeSent.Msgs, st.RndvSent.Msgs, eager, piped, len(body), len(long))
					}
					return nil
				}
				gh, gb := make([]byte, 32), make([]byte, len(body))
				r, err := ep.IrecvParts(peer, 5, gh, gb)
				if err != nil {
					return err
				}
				if _, err := r.Wait(ctx); err != nil {
					return err
				}
				if !bytes.Equal(gh, head) || !bytes.Equal(gb, body) {
					return fmt.Errorf("the parts message arrived changed")
				}
				// In one frame: at most one fragment steered (none if the
				// steer could not take the endpoint's lock at once).
				if n := ep.Stats().Peers[peer].SteeredRecv.Msgs; n > 1 {
					return fmt.Errorf("the parts message came in %d steered fragments, want one frame", n)
				}
				if err := ep.Send(ctx, peer, 7, nil); err != nil {
					return err
				}
				got := make([]byte, len(long))
				if _, err := ep.Recv(ctx, peer, 6, got); err != nil {
					return err
				}
				if !bytes.Equal(got, long) {
					return fmt.Errorf("the pipelined message arrived changed")
				}
				return nil
			})
		})
	}
}
