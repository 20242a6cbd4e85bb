package coltest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
)

func TestMatchingFIFOAndTruncation(t *testing.T) {
	ctx := context.Background()
	w := NewWorld(2, Options{})
	a, b := w.Group(0), w.Group(1)
	// Two messages on one tag, one on another: per-tag FIFO, tags independent.
	for _, m := range []struct {
		tag int
		s   string
	}{{5, "first"}, {6, "other"}, {5, "second"}} {
		_, err := a.Isend(1, m.tag, []byte(m.s))
		require.NoError(t, err)
	}
	recv := func(tag, n int) (string, error) {
		buf := make([]byte, n)
		r, err := b.Irecv(0, tag, buf)
		require.NoError(t, err)
		k, err := r.Wait(ctx)
		return string(buf[:k]), err
	}
	s, err := recv(5, 16)
	require.NoError(t, err)
	require.Equal(t, "first", s)
	s, err = recv(6, 16)
	require.NoError(t, err)
	require.Equal(t, "other", s)
	_, err = recv(5, 3)
	require.ErrorIs(t, err, ErrTruncated)
	_, err = a.Isend(2, 0, nil)
	require.ErrorIs(t, err, ErrInvalid)
	_, err = a.Isend(1, -1, nil)
	require.ErrorIs(t, err, ErrInvalid)
}

func TestCancelAndKill(t *testing.T) {
	w := NewWorld(3, Options{OneSided: true})
	g := w.Group(0)
	r, err := g.Irecv(1, 0, make([]byte, 4))
	require.NoError(t, err)
	r.Cancel()
	_, err = r.Wait(context.Background())
	require.ErrorIs(t, err, ErrCanceled)
	r.Cancel() // after completion: nothing happens
	// A message sent after the cancel is not matched by the dead receive.
	_, err = w.Group(1).Isend(0, 0, []byte("late"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	r, err = g.Irecv(1, 0, buf)
	require.NoError(t, err)
	n, err := r.Wait(context.Background())
	require.NoError(t, err)
	require.Equal(t, "late", string(buf[:n]))

	pending, err := g.Irecv(2, 9, make([]byte, 4))
	require.NoError(t, err)
	w.Kill(2)
	_, err = pending.Wait(context.Background())
	var pl *PeerLostError
	require.ErrorAs(t, err, &pl)
	require.Equal(t, 2, pl.Rank)
	_, err = w.Group(1).Isend(0, 1, nil)
	require.ErrorIs(t, err, ErrPeerLost)
}

func TestWindows(t *testing.T) {
	w := NewWorld(2, Options{OneSided: true, Hosts: []int{0, 1}, Latency: time.Microsecond, Bandwidth: 1e9})
	g0, g1 := w.Group(0), w.Group(1)
	require.Equal(t, 1, g1.(collectives.Topology).HostOf(1))
	lat, bw := g0.(collectives.LinkInfo).Link(1)
	require.Equal(t, time.Microsecond, lat)
	require.Equal(t, 1e9, bw)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	bufs := [][]byte{make([]byte, 8), make([]byte, 8)}
	wins := make([]collectives.Window, 2)
	errs := w.Run(func(rank int, g collectives.Group) error {
		var err error
		wins[rank], err = g.(collectives.OneSided).Expose(ctx, bufs[rank])
		return err
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	_, err := wins[0].Put(1, 4, []byte("abcd"), 42)
	require.NoError(t, err)
	imm, err := wins[1].WaitNotify(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(42), imm)
	require.Equal(t, "abcd", string(bufs[1][4:]))
	_, err = wins[0].Put(1, 6, []byte("abcd"), 1)
	require.ErrorIs(t, err, ErrInvalid)
	short, cancel2 := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel2()
	_, err = wins[1].WaitNotify(short, 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestIrecvAny(t *testing.T) {
	ctx := context.Background()
	w := NewWorld(3, Options{})
	g := w.Group(0).(collectives.AnySourceReceiver)
	buf := make([]byte, 8)
	r, err := g.IrecvAny(4, buf) // posted before the message
	require.NoError(t, err)
	_, err = w.Group(2).Isend(0, 4, []byte("two"))
	require.NoError(t, err)
	n, err := r.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, "two", string(buf[:n]))
	_, err = w.Group(1).Isend(0, 4, []byte("one")) // before the receive
	require.NoError(t, err)
	r, err = g.IrecvAny(4, buf)
	require.NoError(t, err)
	n, err = r.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, "one", string(buf[:n]))
	r, err = g.IrecvAny(4, buf)
	require.NoError(t, err)
	r.Cancel()
	_, err = r.Wait(ctx)
	require.ErrorIs(t, err, ErrCanceled)
	r, err = g.IrecvAny(5, buf)
	require.NoError(t, err)
	w.Kill(1)
	_, err = r.Wait(ctx)
	require.ErrorIs(t, err, ErrPeerLost)
}

// TestSyncSends: with SyncSends a send completes only once a receive has
// taken its message (the one posted after it, and one from any source);
// a canceled one completes with ErrCanceled and its message is gone; a
// kill fails a waiting one; SendNow refuses.
func TestSyncSends(t *testing.T) {
	ctx, cancelAll := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelAll()
	w := NewWorld(3, Options{SyncSends: true})
	a, b := w.Group(0), w.Group(1)
	done := func(r collectives.Request) bool {
		short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
		defer cancel()
		_, err := r.Wait(short)
		return err == nil
	}
	s, err := a.Isend(1, 5, []byte("hello"))
	require.NoError(t, err)
	require.False(t, done(s), "a send completed before any receive")
	buf := make([]byte, 8)
	r, err := b.Irecv(0, 5, buf)
	require.NoError(t, err)
	n, err := r.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf[:n]))
	n, err = s.Wait(ctx)
	require.NoError(t, err)
	require.Equal(t, 5, n)

	s, err = a.Isend(1, 6, []byte("any"))
	require.NoError(t, err)
	r, err = b.(collectives.AnySourceReceiver).IrecvAny(6, buf)
	require.NoError(t, err)
	_, err = r.Wait(ctx)
	require.NoError(t, err)
	_, err = s.Wait(ctx)
	require.NoError(t, err)

	s, err = a.Isend(1, 7, []byte("never"))
	require.NoError(t, err)
	s.Cancel()
	_, err = s.Wait(ctx)
	require.ErrorIs(t, err, ErrCanceled)
	r, err = b.Irecv(0, 7, buf)
	require.NoError(t, err)
	require.False(t, done(r), "a canceled send's message arrived")
	r.Cancel()

	sent, err := a.(collectives.NowSender).SendNow(1, 8, nil, []byte("now"))
	require.NoError(t, err)
	require.False(t, sent, "SendNow sent with SyncSends")

	s, err = a.Isend(2, 9, []byte("lost"))
	require.NoError(t, err)
	w.Kill(2)
	_, err = s.Wait(ctx)
	var lost *PeerLostError
	require.ErrorAs(t, err, &lost)
}
