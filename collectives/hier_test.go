package collectives_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// crossCounter is a Group with a topology that counts the messages it
// sends to ranks on other hosts.
type crossCounter struct {
	collectives.Group
	topo  collectives.Topology
	cross *atomic.Int64
}

func (g crossCounter) HostOf(r int) int { return g.topo.HostOf(r) }

func (g crossCounter) Isend(peer, tag int, buf []byte) (collectives.Request, error) {
	if g.topo.HostOf(peer) != g.topo.HostOf(g.Rank()) {
		g.cross.Add(1)
	}
	return g.Group.Isend(peer, tag, buf)
}

// TestHierarchicalCrossesOncePerHostPair: the hierarchical barrier,
// allgather, alltoall and reduce-scatter send one message from each
// host's leader to each other host's, whatever the ranks per host (here
// 2, 3 and 1, interleaved), where the flat forms send one per pair of
// ranks on different hosts or more.
func TestHierarchicalCrossesOncePerHostPair(t *testing.T) {
	t.Parallel()
	hosts := []int{0, 1, 0, 1, 2, 1}
	const nhosts = 3
	p := len(hosts)
	calls := map[collectives.Collective]func(ctx context.Context, e *collectives.Engine) error{
		collectives.CollBarrier: func(ctx context.Context, e *collectives.Engine) error { return collectives.Barrier(ctx, e) },
		collectives.CollAllgather: func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Allgather(ctx, e, make([]float64, 3), make([]float64, 3*p))
		},
		collectives.CollAlltoall: func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Alltoall(ctx, e, make([]float64, 2*p), make([]float64, 2*p))
		},
		collectives.CollReduceScatter: func(ctx context.Context, e *collectives.Engine) error {
			return collectives.ReduceScatter(ctx, e, make([]float64, 2*p), make([]float64, 2), reduce.Sum)
		},
	}
	for coll, call := range calls {
		for _, alg := range []collectives.Algorithm{collectives.Hierarchical, flatOf(coll)} {
			t.Run(name("coll", coll, "alg", alg), func(t *testing.T) {
				var cross atomic.Int64
				w := coltest.NewWorld(p, coltest.Options{Hosts: hosts})
				errs := w.Run(func(rank int, g collectives.Group) error {
					cg := crossCounter{Group: g, topo: g.(collectives.Topology), cross: &cross}
					e, err := collectives.New(cg, noProbe(force(coll, alg)))
					if err != nil {
						return err
					}
					defer e.Close()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					return call(ctx, e)
				})
				requireAllOK(t, errs)
				if alg == collectives.Hierarchical {
					require.EqualValues(t, nhosts*(nhosts-1), cross.Load())
				} else {
					require.Greater(t, cross.Load(), int64(nhosts*(nhosts-1)))
				}
			})
		}
	}
}

// TestHierarchicalBcastServesHostFirst: the root's host-mate gets the
// data of a hierarchical bcast while the root's send to the other host
// still waits for its receiver (sends that complete only once received,
// as a rendezvous send does): rank 2, the other host's representative,
// enters the bcast only after rank 1, the root's host-mate, has left it,
// and every rank gets the root's vector. A root that waited for its send
// to the other host before its own host's stage would leave the three
// waiting for each other.
func TestHierarchicalBcastServesHostFirst(t *testing.T) {
	t.Parallel()
	hosts := []int{0, 0, 1, 1}
	w := coltest.NewWorld(len(hosts), coltest.Options{Hosts: hosts, SyncSends: true})
	mateDone := make(chan struct{})
	want := []float64{1, 2, 3, 4, 5}
	errs := w.Run(func(rank int, g collectives.Group) error {
		e, err := collectives.New(g, noProbe(force(collectives.CollBcast, collectives.Hierarchical)))
		if err != nil {
			return err
		}
		defer e.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		buf := make([]float64, len(want))
		if rank == 0 {
			copy(buf, want)
		}
		if rank == 2 {
			select {
			case <-mateDone:
			case <-time.After(10 * time.Second):
				return fmt.Errorf("rank 1 still had no data when rank 2 gave up waiting to enter the bcast")
			}
		}
		if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
			return err
		}
		if rank == 1 {
			close(mateDone)
		}
		if !slices.Equal(buf, want) {
			return fmt.Errorf("rank %d got %v, want %v", rank, buf, want)
		}
		if a := e.LastAlgorithm(); a != collectives.Hierarchical {
			return fmt.Errorf("rank %d ran %v, want hierarchical", rank, a)
		}
		return nil
	})
	requireAllOK(t, errs)
}

// TestHierarchicalReduce: the hierarchical reduce leaves the sum at every
// root and every other rank's input as it was, over uneven hosts whose
// ranks interleave (2, 3 and 1 ranks), inside hosts by the binomial tree
// and by the bandwidth form, between them by the binomial tree, where a
// host's partial crosses the network once (hosts−1 messages in all, where
// the flat tree sends more), and by Rabenseifner's form where the model
// finds it cheaper (latency all but free).
func TestHierarchicalReduce(t *testing.T) {
	t.Parallel()
	hosts := []int{0, 1, 0, 1, 2, 1}
	const nhosts = 3
	p, n := len(hosts), 7
	cases := []struct {
		name      string
		alg       collectives.Algorithm
		model     *collectives.Model
		wantCross func(int64) bool
	}{
		{"binomial trees", collectives.Hierarchical, nil, func(c int64) bool { return c == nhosts-1 }},
		{"bandwidth form inside hosts", collectives.Hierarchical, &collectives.Model{HierBigBytes: 1}, func(c int64) bool { return c == nhosts-1 }},
		// A ring reduce-scatter among the 3 representatives (2 steps of
		// 3 messages) and the gather of 2 blocks to the root.
		{"rabenseifner between hosts", collectives.Hierarchical, &collectives.Model{Alpha: time.Nanosecond}, func(c int64) bool { return c == 8 }},
		{"flat binomial tree", collectives.Binomial, nil, func(c int64) bool { return c > nhosts-1 }},
	}
	for _, tc := range cases {
		for root := range p {
			t.Run(name("case", tc.name, "root", root), func(t *testing.T) {
				var cross atomic.Int64
				o := noProbe(force(collectives.CollReduce, tc.alg))
				o.Model = tc.model
				w := coltest.NewWorld(p, coltest.Options{Hosts: hosts})
				errs := w.Run(func(rank int, g collectives.Group) error {
					cg := crossCounter{Group: g, topo: g.(collectives.Topology), cross: &cross}
					e, err := collectives.New(cg, o)
					if err != nil {
						return err
					}
					defer e.Close()
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					buf := input(rank, n)
					if err := collectives.Reduce(ctx, e, buf, reduce.Sum, root); err != nil {
						return err
					}
					if err := checkAlg(e, tc.alg); err != nil {
						return err
					}
					if rank == root {
						return eq("reduce", buf, refSum(p, n))
					}
					return eq("reduce leaves non-root input", buf, input(rank, n))
				})
				requireAllOK(t, errs)
				require.True(t, tc.wantCross(cross.Load()), "%d messages between hosts", cross.Load())
			})
		}
	}
}

// noProbe is o without stall probes: a call that a loaded machine keeps
// past StallProbe sends one to every peer, which a count of messages or
// bytes would take for the algorithm's.
func noProbe(o collectives.Options) collectives.Options {
	o.StallProbe = -1
	return o
}

// flatOf is a flat algorithm of c, for comparison.
func flatOf(c collectives.Collective) collectives.Algorithm {
	switch c {
	case collectives.CollBarrier:
		return collectives.Dissemination
	case collectives.CollReduceScatter:
		return collectives.Pairwise
	}
	return collectives.Linear
}

// echoHosts is echoGroup with its two ranks on two hosts, so that the
// hierarchical algorithms run their leaders' exchange over it.
type echoHosts struct{ *echoGroup }

func (echoHosts) HostOf(r int) int { return r }

// TestHierarchicalAllocatesNothing: once an Engine has run a call, a
// hierarchical call allocates nothing of its own: the host layout is
// worked out once, and the phases' views and lists of buffers are
// recycled with the call's records. Every call built them in maps and
// slices before, a dozen allocations per call and rank of a job across
// hosts (and a garbage collection about every 100 ms on each).
func TestHierarchicalAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	ctx := context.Background()
	send, recv := make([]float32, 8), make([]float32, 8)
	calls := map[collectives.Collective]func(e *collectives.Engine) error{
		collectives.CollBarrier: func(e *collectives.Engine) error { return collectives.Barrier(ctx, e) },
		collectives.CollBcast:   func(e *collectives.Engine) error { return collectives.Bcast(ctx, e, send[:4], 0) },
		// Rank 0 sends its partial to the root, which the echo drops.
		collectives.CollReduce:    func(e *collectives.Engine) error { return collectives.Reduce(ctx, e, recv[:4], reduce.Sum, 1) },
		collectives.CollAllreduce: func(e *collectives.Engine) error { return collectives.Allreduce(ctx, e, recv[:4], reduce.Sum) },
		collectives.CollAllgather: func(e *collectives.Engine) error { return collectives.Allgather(ctx, e, send[:4], recv) },
		collectives.CollAlltoall:  func(e *collectives.Engine) error { return collectives.Alltoall(ctx, e, send, recv) },
		collectives.CollReduceScatter: func(e *collectives.Engine) error {
			return collectives.ReduceScatter(ctx, e, send, recv[:4], reduce.Sum)
		},
	}
	for coll, call := range calls {
		t.Run(name("coll", coll), func(t *testing.T) {
			e, err := collectives.New(echoHosts{&echoGroup{}}, noProbe(force(coll, collectives.Hierarchical)))
			require.NoError(t, err)
			defer e.Close()
			var callErr error
			allocs := testing.AllocsPerRun(100, func() {
				if err := call(e); err != nil && callErr == nil {
					callErr = err
				}
			})
			require.NoError(t, callErr)
			require.NoError(t, checkAlg(e, collectives.Hierarchical))
			require.Zero(t, allocs, "allocations per call")
		})
	}
}
