package comm_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/comm"
	"github.com/rdmago/rdmago/p2p"
	"github.com/rdmago/rdmago/verbs"
	"github.com/rdmago/rdmago/verbs/faulty"
)

// TestErrorStory provokes the failures users meet (a count mismatch, a bad
// root, a peer closed or lost, a ctx that ends, a closed communicator) and
// checks the one error story on every rank that fails: errors.Is matches
// each layer's name for the cause, the message is one line that names
// this rank and the peer once each (the cause's own data, such as a
// mismatch's two values, aside), and it reads exactly as documented:
//
//	comm: allreduce #1 (ring) on rank 2 of 3: peer 1: count mismatch: rank 2 has 4 elements, rank 1 has 5 elements
type storyCase struct {
	name string
	p    int
	o    comm.Options
	per  func(r int, o *comm.Options)
	// fail runs the failing call on rank c.Rank(); judge is false on
	// ranks whose outcome is not the case's (the rank that left).
	fail func(ctx context.Context, c *comm.Comm) (err error, judge bool)
	// is lists each layer's sentinel for the cause.
	is []error
	// line is the message err must print on rank me of p, given err.
	line func(t *testing.T, err error, me, p int) string
	// detail is the cause's own data in the message, which may name ranks.
	detail func(err error) string
}

func TestErrorStory(t *testing.T) {
	mismatch := func(transport string) storyCase {
		return storyCase{
			name: "count mismatch over " + transport, p: 3, o: comm.Options{Transport: transport},
			fail: func(ctx context.Context, c *comm.Comm) (error, bool) {
				n := 4
				if c.Rank() == 1 {
					n = 5
				}
				return comm.Allreduce(ctx, c, make([]float32, n), comm.Sum), true
			},
			is: []error{verbs.ErrMismatch, collectives.ErrMismatch, bootstrap.ErrMismatch, comm.ErrMismatch},
			line: func(t *testing.T, err error, me, p int) string {
				var m *collectives.MismatchError
				if !assert.ErrorAs(t, err, &m) {
					return ""
				}
				return head(t, err, "allreduce", me, p) + peerPart(err) + m.Error()
			},
			detail: func(err error) string {
				var m *collectives.MismatchError
				errors.As(err, &m)
				return m.Error()
			},
		}
	}
	lostRank := 1
	inj := make([]*faulty.Injector, 3)
	for i := range inj {
		inj[i] = faulty.NewInjector()
	}
	cases := []storyCase{
		mismatch("loop"),
		mismatch("shm"),
		{
			name: "bad root", p: 3,
			fail: func(ctx context.Context, c *comm.Comm) (error, bool) {
				return comm.Bcast(ctx, c, make([]int32, 2), 3), true
			},
			is: []error{verbs.ErrInvalidArgument, p2p.ErrInvalidArgument, collectives.ErrInvalidArgument, bootstrap.ErrInvalid, comm.ErrInvalidArgument},
			line: func(t *testing.T, err error, me, p int) string {
				// A rank checks the root itself, or hears first that
				// another rank found it bad: then that rank is the peer.
				var pe *collectives.PeerError
				if errors.As(err, &pe) {
					assert.NotEqual(t, me, pe.Rank)
					return head(t, err, "bcast", me, p) + fmt.Sprintf("peer %d: failed the call: ", pe.Rank) + pe.Err.Error()
				}
				return head(t, err, "bcast", me, p) + "invalid argument: root 3 out of range [0, 3)"
			},
			detail: func(error) string { return "root 3 out of range [0, 3)" },
		},
		{
			name: "deadline in a collective", p: 2,
			fail: func(ctx context.Context, c *comm.Comm) (error, bool) {
				if c.Rank() == 1 {
					return nil, false // never joins
				}
				dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				return comm.Allreduce(dctx, c, make([]float32, 4), comm.Sum), true
			},
			is: []error{context.DeadlineExceeded},
			line: func(t *testing.T, err error, me, p int) string {
				return head(t, err, "allreduce", me, p) + "peer 1: context deadline exceeded: had not arrived"
			},
		},
		{
			name: "deadline in a receive", p: 2,
			fail: func(ctx context.Context, c *comm.Comm) (error, bool) {
				if c.Rank() == 1 {
					return nil, false
				}
				dctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
				_, err := comm.Recv(dctx, c, make([]float32, 4), 1, 3)
				return err, true
			},
			is: []error{context.DeadlineExceeded},
			line: func(t *testing.T, err error, me, p int) string {
				return "comm: Recv on rank 0 of 2: peer 1, tag 3: context deadline exceeded: had not arrived (no matching message)"
			},
		},
		{
			name: "closed communicator", p: 2,
			fail: func(ctx context.Context, c *comm.Comm) (error, bool) {
				d, err := c.Dup(ctx)
				if err != nil {
					return err, true
				}
				d.Close()
				return comm.Allreduce(ctx, d, make([]float32, 4), comm.Sum), true
			},
			is: []error{verbs.ErrClosed, p2p.ErrClosed, collectives.ErrClosed, bootstrap.ErrClosed, comm.ErrClosed},
			line: func(t *testing.T, err error, me, p int) string {
				return fmt.Sprintf("comm: Allreduce on rank %d of 2: communicator closed", me)
			},
		},
		{
			name: "peer closed", p: 2,
			fail: func(ctx context.Context, c *comm.Comm) (error, bool) {
				if c.Rank() == 1 {
					return c.Close(), false
				}
				_, err := comm.Recv(ctx, c, make([]float32, 4), 1, 3)
				return err, true
			},
			is: []error{verbs.ErrClosed, p2p.ErrClosed, collectives.ErrClosed, bootstrap.ErrClosed, comm.ErrClosed},
			line: func(t *testing.T, err error, me, p int) string {
				var pc *p2p.PeerClosedError
				assert.ErrorAs(t, err, &pc)
				return "comm: Recv on rank 0 of 2: peer 1, tag 3: closed its endpoint"
			},
		},
		{
			name: "peer lost", p: 3, o: comm.Options{NoEnv: true},
			per: injectFaults(inj),
			fail: func(ctx context.Context, c *comm.Comm) (error, bool) {
				if err := comm.Barrier(ctx, c); err != nil {
					return err, true
				}
				if c.Rank() == lostRank {
					// A dead process sends nothing, not even a revoke.
					inj[lostRank].FailPosts(-1, verbs.ErrQueueFull, func(_ uint32, recv bool) bool { return !recv })
					for j, ps := range c.Stats().Peers {
						if j != lostRank {
							inj[lostRank].Disconnect(ps.QPNum)
						}
					}
					return nil, false
				}
				buf := make([]float64, 1024)
				for {
					if err := comm.Allreduce(ctx, c, buf, comm.Sum); err != nil {
						return err, true
					}
				}
			},
			is: []error{p2p.ErrPeerLost, comm.ErrPeerLost},
			line: func(t *testing.T, err error, me, p int) string {
				var pl *p2p.PeerLostError
				if !assert.ErrorAs(t, err, &pl) {
					return ""
				}
				assert.Equal(t, lostRank, pl.Rank)
				// The lost rank may go before the others left the barrier.
				coll := "allreduce"
				if ce := (*collectives.Error)(nil); errors.As(err, &ce) && ce.Op == "barrier" {
					coll = "barrier"
				}
				return head(t, err, coll, me, p) + fmt.Sprintf("peer %d: ", lostRank) + lostText(pl)
			},
			detail: func(err error) string {
				var pl *p2p.PeerLostError
				errors.As(err, &pl)
				return lostText(pl)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			judged := make([]bool, tc.p)
			errs := runWith(t, tc.p, tc.o, tc.per, func(ctx context.Context, c *comm.Comm) error {
				err, judge := tc.fail(ctx, c)
				if !judge {
					return nil
				}
				judged[c.Rank()] = true
				return checkStory(t, tc, err, c.Rank())
			})
			requireOK(t, errs)
			assert.Contains(t, judged, true, "no rank failed")
		})
	}
}

// checkStory judges one rank's error against its case.
func checkStory(t *testing.T, tc storyCase, err error, me int) error {
	if err == nil {
		return errors.New("the call succeeded")
	}
	for _, s := range tc.is {
		if !errors.Is(err, s) {
			return fmt.Errorf("does not match %q: %v", s, err)
		}
	}
	var oe *comm.OpError
	if !errors.As(err, &oe) || oe.Rank != me || oe.Size != tc.p {
		return fmt.Errorf("OpError %+v on rank %d of %d", oe, me, tc.p)
	}
	msg := err.Error()
	if want := tc.line(t, err, me, tc.p); msg != want {
		return fmt.Errorf("message\n%s\nwant\n%s", msg, want)
	}
	// Beyond the exact line: the properties it is there for, in case a
	// want above is ever written to match a repetition.
	if strings.Contains(msg, "\n") || strings.Count(msg, "comm: ") != 1 ||
		strings.Contains(msg, "collectives: ") || strings.Contains(msg, "p2p: ") {
		return fmt.Errorf("not one line of one layer's prefix: %q", msg)
	}
	frame := msg
	if tc.detail != nil {
		frame = strings.Replace(frame, tc.detail(err), "", 1)
	}
	if n := mentions(frame, me); n != 1 {
		return fmt.Errorf("names this rank %d %d times (want once): %q", me, n, msg)
	}
	if oe.Peer >= 0 {
		if n := mentions(frame, oe.Peer); n != 1 {
			return fmt.Errorf("names peer %d %d times (want once): %q", oe.Peer, n, msg)
		}
	}
	return nil
}

// mentions counts "rank r" and "peer r" in msg.
func mentions(msg string, r int) int {
	return len(regexp.MustCompile(fmt.Sprintf(`\b(rank|peer) %d\b`, r)).FindAllStringIndex(msg, -1))
}

// head is the start of a collective's message on rank me of p: the
// collective as its own error names it, then the rank.
func head(t *testing.T, err error, coll string, me, p int) string {
	var ce *collectives.Error
	if !assert.ErrorAs(t, err, &ce) {
		return ""
	}
	assert.Equal(t, coll, ce.Op)
	return fmt.Sprintf("comm: %s #%d (%s) on rank %d of %d: ", coll, ce.Seq, ce.Algorithm, me, p)
}

// peerPart is "peer P: " when the error names a peer.
func peerPart(err error) string {
	var oe *comm.OpError
	if errors.As(err, &oe) && oe.Peer >= 0 {
		return fmt.Sprintf("peer %d: ", oe.Peer)
	}
	return ""
}

// lostText is a peer loss as the message tells it after naming the peer.
func lostText(pl *p2p.PeerLostError) string {
	s := "lost"
	if pl.Revoked {
		s += fmt.Sprintf(" (revoked by rank %d)", pl.Reporter)
	}
	return s + ": " + pl.Cause.Error()
}

// TestOpErrorLine: the line of a failure an abort caused (the abort, then
// the cause as the line tells it), and a lost peer's chain through every
// layer, built by hand; and p2p's error alone names all it knows once.
func TestOpErrorLine(t *testing.T) {
	lost := &p2p.PeerLostError{Rank: 2, Reporter: 0, Cause: errors.New("link failed: x")}
	chain := &collectives.Error{Op: "allreduce", Algorithm: "ring", Seq: 4, Rank: 0, Peer: 2,
		Err: &p2p.Error{Op: "Irecv", Rank: 0, Peer: 2, Tag: 9, Err: lost}}
	abort := &bootstrap.AbortError{Info: bootstrap.AbortInfo{Rank: 2, Code: 3, Reason: "r"}}

	err := comm.NewOpError("Allreduce", 0, 3, 2, nil, chain)
	assert.Equal(t, "comm: allreduce #4 (ring) on rank 0 of 3: peer 2: lost: link failed: x", err.Error())

	err = comm.NewOpError("Allreduce", 0, 3, 2, abort, chain)
	assert.Equal(t, "comm: Allreduce on rank 0 of 3: peer 2: job aborted by rank 2 with code 3: r; lost: link failed: x", err.Error())
	assert.ErrorIs(t, err, comm.ErrAborted)
	assert.ErrorIs(t, err, comm.ErrPeerLost)
	var pl *p2p.PeerLostError
	assert.ErrorAs(t, err, &pl)
	var ae *bootstrap.AbortError
	assert.ErrorAs(t, err, &ae)

	assert.Equal(t, "p2p: rank 0: Irecv peer 2 tag 9: lost: link failed: x", chain.Err.Error())
	assert.Equal(t, "p2p: rank 0: Recv peer 1 tag 3: rank 2 lost: link failed: x",
		(&p2p.Error{Op: "Recv", Rank: 0, Peer: 1, Tag: 3, Err: lost}).Error(), "another rank's loss names it")
}
