package comm_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/comm/internal/launchers"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
	"github.com/rdmago/rdmago/verbs/loop"
	"github.com/rdmago/rdmago/verbs/tcp"
)

// A rank whose count differs gets ErrMismatch naming both ranks and both
// counts, and so does every other rank: nobody hangs.
func TestMismatchedCounts(t *testing.T) {
	for _, p := range []int{2, 3, 4, 5} {
		t.Run(fmt.Sprintf("ranks=%d", p), func(t *testing.T) {
			errs := run(t, p, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
				n := 4
				if c.Rank() == 1 {
					n = 5
				}
				buf := make([]float32, n)
				err := comm.Allreduce(ctx, c, buf, comm.Sum)
				if !errors.Is(err, comm.ErrMismatch) {
					return fmt.Errorf("want ErrMismatch, got %v", err)
				}
				var me *collectives.MismatchError
				if !errors.As(err, &me) || me.What != "count" {
					return fmt.Errorf("no count MismatchError in %v", err)
				}
				pair := map[int]int64{me.Rank: me.Value, me.Peer: me.PeerValue}
				if pair[1] != 5 || len(pair) != 2 {
					return fmt.Errorf("mismatch does not name rank 1 with 5 elements: %v", err)
				}
				for r, v := range pair {
					if r != 1 && v != 4 {
						return fmt.Errorf("mismatch names rank %d with %d elements: %v", r, v, err)
					}
				}
				var oe *comm.OpError
				if !errors.As(err, &oe) || oe.Op != "Allreduce" || oe.Rank != c.Rank() {
					return fmt.Errorf("OpError %+v", oe)
				}
				if !strings.Contains(err.Error(), "rank 1 has 5 elements") {
					return fmt.Errorf("message does not say who: %v", err)
				}
				return nil
			})
			requireOK(t, errs)
		})
	}
}

// Bad arguments on one rank fail that rank with a clear error and the
// others too, instead of leaving them waiting.
func TestBadArguments(t *testing.T) {
	errs := run(t, 3, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		me := c.Rank()
		// A root out of range everywhere. Every rank finds it bad, but a
		// rank may hear of another's failure first and report that.
		var pe *collectives.PeerError
		err := comm.Bcast(ctx, c, make([]int32, 3), 3)
		if !errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "root 3") && !errors.As(err, &pe) {
			return fmt.Errorf("root 3: %v", err)
		}
		// A bitwise op on floats.
		err = comm.Allreduce(ctx, c, make([]float64, 3), comm.BXor)
		if !errors.Is(err, comm.ErrUnsupported) && !errors.As(err, &pe) {
			return fmt.Errorf("bxor on float64: %v", err)
		}
		// A user op used with another element type.
		op := comm.NewOp("f32", true, func(a, b []float32) {})
		err = comm.Allreduce(ctx, c, make([]int32, 3), op)
		if !errors.Is(err, comm.ErrUnsupported) && !errors.As(err, &pe) {
			return fmt.Errorf("float32 op on int32: %v", err)
		}
		// Out-of-place lengths that differ on one rank.
		recv := make([]int64, 4)
		if me == 2 {
			recv = make([]int64, 3)
		}
		err = comm.AllreduceInto(ctx, c, make([]int64, 4), recv, comm.Sum)
		if me == 2 && (!errors.Is(err, comm.ErrInvalidArgument) || !strings.Contains(err.Error(), "send has 4 elements, recv 3")) {
			return fmt.Errorf("rank 2: %v", err)
		}
		if me != 2 && err == nil {
			return errors.New("the others must fail too")
		}
		// Allgather with a recv of the wrong size on rank 0.
		recv = make([]int64, 6)
		if me == 0 {
			recv = make([]int64, 5)
		}
		err = comm.Allgather(ctx, c, make([]int64, 2), recv)
		if err == nil || (me == 0 && !errors.Is(err, comm.ErrInvalidArgument)) {
			return fmt.Errorf("allgather: %v", err)
		}
		// The communicator still works afterwards.
		buf := []int64{int64(me)}
		if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
			return err
		}
		if buf[0] != 3 {
			return fmt.Errorf("after the errors: %v", buf)
		}
		// Nil communicator (what Split returns for Undefined), nil context.
		var nilc *comm.Comm
		if err := comm.Barrier(ctx, nilc); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("nil comm: %v", err)
		}
		if _, err := comm.Recv(ctx, nilc, buf, 0, 0); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("nil comm recv: %v", err)
		}
		if _, err := nilc.Peer(0); !errors.Is(err, comm.ErrInvalidArgument) {
			return fmt.Errorf("nil comm Peer: %v", err)
		}
		if nilc.Rank() != -1 || nilc.Size() != 0 || nilc.Close() != nil || nilc.Transport(0) != "" {
			return errors.New("nil comm accessors")
		}
		//lint:ignore SA1012 testing the nil check
		if err := comm.Send(nil, c, buf, 0, 0); !errors.Is(err, comm.ErrInvalidArgument) { //nolint:staticcheck
			return fmt.Errorf("nil ctx: %v", err)
		}
		return nil
	})
	requireOK(t, errs)
}

func TestClosed(t *testing.T) {
	runOK(t, 2, comm.Options{}, func(ctx context.Context, c *comm.Comm) error {
		d, err := c.Dup(ctx)
		if err != nil {
			return err
		}
		require.NoError(t, d.Close())
		require.NoError(t, d.Close())
		err = comm.Allreduce(ctx, d, []int32{1}, comm.Sum)
		if !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("after Close: %v", err)
		}
		err = comm.Send(ctx, d, []int32{1}, 0, 0)
		if !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("send after Close: %v", err)
		}
		_, err = d.Split(ctx, 0, 0)
		if !errors.Is(err, comm.ErrClosed) {
			return fmt.Errorf("split after Close: %v", err)
		}
		return comm.Barrier(ctx, c)
	})
}

// Each cause is one value, defined at the lowest layer that has it and
// aliased above: every layer's name for it is that value, so errors.Is
// matches any of them through any wrapping (not only through an OpError).
func TestSentinelsOneValue(t *testing.T) {
	for _, names := range [][]error{
		{verbs.ErrClosed, p2p.ErrClosed, collectives.ErrClosed, bootstrap.ErrClosed, comm.ErrClosed},
		{verbs.ErrInvalidArgument, p2p.ErrInvalidArgument, collectives.ErrInvalidArgument, bootstrap.ErrInvalid, comm.ErrInvalidArgument},
		{verbs.ErrUnsupported, reduce.ErrUnsupported, collectives.ErrUnsupported, comm.ErrUnsupported},
		{verbs.ErrMismatch, collectives.ErrMismatch, bootstrap.ErrMismatch, comm.ErrMismatch},
		{verbs.ErrProtocol, p2p.ErrProtocol, collectives.ErrProtocol, bootstrap.ErrProtocol},
		{verbs.ErrAuth, bootstrap.ErrAuth},
		{verbs.ErrDisconnected, tcp.ErrDisconnected, loop.ErrDisconnected},
		{p2p.ErrPeerLost, comm.ErrPeerLost, coltest.ErrPeerLost},
		{p2p.ErrTruncated, comm.ErrTruncated, coltest.ErrTruncated},
		{p2p.ErrCanceled, comm.ErrCanceled, coltest.ErrCanceled},
		{bootstrap.ErrAborted, comm.ErrAborted},
	} {
		for _, n := range names[1:] {
			assert.Same(t, names[0], n, "%v", names[0])
			assert.ErrorIs(t, fmt.Errorf("a plain wrapper: %w", n), names[0])
		}
	}
	// The launcher's causes are cases of ErrLauncher.
	for _, cause := range []error{jobenv.ErrNoLauncher, jobenv.ErrInvalid, launchers.ErrNoLauncher, launchers.ErrInvalid} {
		assert.ErrorIs(t, fmt.Errorf("x: %w", cause), comm.ErrLauncher, "%v", cause)
	}
	assert.NotErrorIs(t, jobenv.ErrNoLauncher, jobenv.ErrInvalid)
	// The detail types match their sentinel under every name.
	for _, tc := range []struct {
		cause  error
		target error
	}{
		{&collectives.MismatchError{What: "count"}, comm.ErrMismatch},
		{&collectives.PeerClosedError{Rank: 1}, p2p.ErrClosed},
		{&p2p.PeerClosedError{Rank: 1}, collectives.ErrClosed},
		{&p2p.PeerLostError{Rank: 3}, comm.ErrPeerLost},
		{&p2p.PeerLostError{Rank: 3, Revoked: true}, comm.ErrRevoked},
		{&p2p.TruncatedError{Size: 8, Cap: 4}, comm.ErrTruncated},
		{&bootstrap.AbortError{}, comm.ErrAborted},
	} {
		err := error(&comm.OpError{Op: "x", Rank: 0, Peer: comm.NoPeer, Tag: comm.NoTag, Err: fmt.Errorf("wrapped: %w", tc.cause)})
		assert.ErrorIs(t, err, tc.target, "%v", tc.cause)
		assert.ErrorIs(t, err, tc.cause)
	}
	err := error(&comm.OpError{Op: "Send", Rank: 1, Size: 4, Peer: 2, Tag: 7, Err: p2p.ErrClosed})
	assert.Equal(t, "comm: Send on rank 1 of 4: peer 2, tag 7: closed", err.Error())
	assert.NotErrorIs(t, err, comm.ErrPeerLost)
	r, ok := comm.PeerLost(fmt.Errorf("x: %w", &p2p.PeerLostError{Rank: 5}))
	assert.True(t, ok)
	assert.Equal(t, 5, r)
}

// A rank whose links all break in the middle of a stream of collectives:
// every survivor's collective fails with ErrPeerLost naming that rank, and
// so does every later operation.
func TestPeerLostDuringCollective(t *testing.T) {
	for _, p := range []int{3, 5} {
		t.Run(fmt.Sprintf("ranks=%d", p), func(t *testing.T) {
			const lost = 1
			inj := make([]*faulty.Injector, p)
			for i := range inj {
				inj[i] = faulty.NewInjector()
			}
			var started sync.WaitGroup
			started.Add(p)
			per := injectFaults(inj)
			errs := runWith(t, p, comm.Options{NoEnv: true}, per, func(ctx context.Context, c *comm.Comm) error {
				// A reversed copy: the lost rank has another number there.
				sub, err := c.Split(ctx, 0, -c.Rank())
				if err != nil {
					return err
				}
				defer sub.Close()
				started.Done()
				if c.Rank() == lost {
					started.Wait()
					// The others wait in their first Allreduce.
					if err := awaitBlocked("TestPeerLostDuringCollective", "comm.Allreduce[", p-1); err != nil {
						return err
					}
					// A dead process sends nothing: not even the revoke a
					// live rank would send on seeing its links break (which
					// would name a survivor as lost).
					inj[lost].FailPosts(-1, verbs.ErrQueueFull, func(_ uint32, recv bool) bool { return !recv })
					for j, ps := range c.Stats().Peers {
						if j != lost {
							inj[lost].Disconnect(ps.QPNum)
						}
					}
					return nil
				}
				buf := make([]float64, 4096)
				for i := 0; ; i++ {
					err = comm.Allreduce(ctx, c, buf, comm.Sum)
					if err != nil {
						break
					}
				}
				if err := checkLost(err, lost, "Allreduce"); err != nil {
					return err
				}
				// Every later operation, on every communicator, fails the same way.
				err = comm.Barrier(ctx, sub)
				var oe *comm.OpError
				if r, ok := comm.PeerLost(err); !ok || r != lost || !errors.As(err, &oe) || oe.Peer != p-1-lost ||
					!strings.Contains(err.Error(), fmt.Sprintf("peer %d (world rank %d): lost", p-1-lost, lost)) {
					return fmt.Errorf("split: want peer %d (world rank %d) lost, got %v", p-1-lost, lost, err)
				}
				if err := checkLost(comm.Send(ctx, c, buf, (c.Rank()+1)%p, 0), lost, "Send"); err != nil {
					return fmt.Errorf("send: %w", err)
				}
				if err := checkLost(c.Err(), lost, "Err"); err != nil {
					return err
				}
				return nil
			})
			for r, err := range errs {
				if r != lost {
					assert.NoError(t, err, "rank %d", r)
				}
			}
		})
	}
}

func checkLost(err error, lost int, op string) error {
	if !errors.Is(err, comm.ErrPeerLost) {
		return fmt.Errorf("%s: want ErrPeerLost, got %v", op, err)
	}
	if r, ok := comm.PeerLost(err); !ok || r != lost {
		return fmt.Errorf("%s: lost rank %d, want %d: %v", op, r, lost, err)
	}
	var oe *comm.OpError
	if !errors.As(err, &oe) || oe.Op != op || oe.Peer != lost {
		return fmt.Errorf("%s: OpError %+v does not name peer %d", op, oe, lost)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("peer %d", lost)) {
		return fmt.Errorf("%s: message does not name rank %d: %v", op, lost, err)
	}
	return nil
}

// Abort in a job without a launcher: the aborting rank exits with the
// code (comm.WithExit's hook here), the others' operations fail naming it.
func TestAbortInProcess(t *testing.T) {
	const p, aborter = 3, 2
	exited := make(chan int, 1)
	per := func(r int, o *comm.Options) {
		*o = comm.WithExit(*o, func(code int) { exited <- code })
	}
	errs := runWith(t, p, comm.Options{NoEnv: true}, per, func(ctx context.Context, c *comm.Comm) error {
		// The aborter may leave the barrier (and abort) before the others
		// have: then their barrier fails with the abort.
		err := comm.Barrier(ctx, c)
		if c.Rank() == aborter {
			if err != nil {
				return err
			}
			c.Abort(3)
			return nil
		}
		if err == nil {
			_, err = comm.Recv(ctx, c, make([]byte, 1), aborter, 0)
		}
		if !errors.Is(err, comm.ErrAborted) && !errors.Is(err, comm.ErrPeerLost) {
			return fmt.Errorf("want ErrAborted or ErrPeerLost, got %v", err)
		}
		if r, ok := comm.PeerLost(err); ok && r != aborter {
			return fmt.Errorf("names rank %d: %v", r, err)
		}
		return nil
	})
	requireOK(t, errs)
	select {
	case code := <-exited:
		assert.Equal(t, 3, code)
	default:
		t.Fatal("Abort did not call Exit")
	}
}

// injectFaults is the per-rank option that opens rank r's device through
// inj[r], with liveness off so that only the injected fault fails things.
func injectFaults(inj []*faulty.Injector) func(r int, o *comm.Options) {
	return func(r int, o *comm.Options) {
		o.P2P.LivenessTimeout = -1
		o.P2P.OpenDevice = func(ctx context.Context, prov string, do verbs.DeviceOptions) (verbs.Device, error) {
			d, err := verbs.Open(ctx, prov, do)
			if err != nil {
				return nil, err
			}
			return faulty.Wrap(d, inj[r]), nil
		}
	}
}
