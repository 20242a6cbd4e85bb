package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
	"github.com/rdmago/rdmago/internal/shmsync"
)

// TestSharedMemoryBits: the shared-memory allreduce, in both its forms
// (every rank folds every chunk; ranks fold blocks and gather them, above
// 16 KiB with more than two ranks and above 128 KiB with two) and over
// several rounds of slots, gives every rank the bits of the Ordered
// algorithm, on floats whose sums round; with Deterministic too (two
// ranks then fold in rank order instead of in place). Sizes 17392 and
// 17409 leave a last round of 8 bytes for 3 and 2 ranks (a chunk small
// enough to sit inline in a slot's first line).
func TestSharedMemoryBits(t *testing.T) {
	t.Parallel()
	ns := []int{0, 1, 2049, 13657, 17392, 17409, 20000}
	type tc struct {
		p, n int
		det  bool
	}
	var cases []tc
	for _, p := range []int{2, 3, 5, 8} {
		for _, n := range ns {
			cases = append(cases, tc{p, n, false})
		}
	}
	cases = append(cases, tc{2, 20000, true}, tc{2, 17409, true}, tc{3, 17392, true})
	for _, c := range cases {
		p, n := c.p, c.n
		{
			t.Run(name("p", p, "n", n, "det", c.det), func(t *testing.T) {
				in := func(r int) []float64 {
					rng := rand.New(rand.NewPCG(uint64(r), uint64(n)))
					v := make([]float64, n)
					for i := range v {
						v[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6))
					}
					return v
				}
				run := func(alg collectives.Algorithm, shared bool) [][]float64 {
					out := make([][]float64, p)
					opts := force(collectives.CollAllreduce, alg)
					opts.Deterministic = c.det
					errs := world(t, p, coltest.Options{Shared: shared}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
						buf := in(r)
						for range 2 { // a second call reuses the slots
							buf = in(r)
							if err := collectives.Allreduce(ctx, e, buf, reduce.Sum); err != nil {
								return err
							}
						}
						out[r] = buf
						return checkAlg(e, alg)
					})
					requireAllOK(t, errs)
					return out
				}
				want := run(collectives.Ordered, false)
				got := run(collectives.SharedMemory, true)
				for r := range p {
					require.Equal(t, len(want[0]), len(got[r]), "rank %d", r)
					for i := range got[r] {
						if math.Float64bits(got[r][i]) != math.Float64bits(want[0][i]) {
							t.Fatalf("rank %d element %d: %v, ordered gives %v", r, i, got[r][i], want[0][i])
						}
					}
				}
			})
		}
	}
}

// TestSharedMemoryBcastRead: from 32 to 128 KiB the shared-memory bcast
// has the readers copy the root's own buffer (a PeerReader region), and
// two ranks above 128 KiB split the copy (the root writes the second half
// into the reader's buffer, a PeerWriter region), except from 1 to 4 MiB
// (the slots) and above 8 MiB; every rank gets the root's data, twice in
// a row, whoever the root is.
func TestSharedMemoryBcastRead(t *testing.T) {
	t.Parallel()
	for _, p := range []int{2, 3, 5} {
		// 32 KiB + 8 B, 125 KiB, 547 KiB, 2.3 MiB and 4.6 MiB of float64
		for _, n := range []int{4097, 16000, 70001, 300001, 600001} {
			t.Run(name("p", p, "n", n), func(t *testing.T) {
				errs := world(t, p, coltest.Options{Shared: true}, force(collectives.CollBcast, collectives.SharedMemory), func(ctx context.Context, e *collectives.Engine, r int) error {
					for round := range 2 {
						root := (round + p - 1) % p
						buf := make([]float64, n)
						if r == root {
							buf = input(100+round, n)
						}
						if err := collectives.Bcast(ctx, e, buf, root); err != nil {
							return err
						}
						if err := eq("bcast", buf, input(100+round, n)); err != nil {
							return err
						}
					}
					return checkAlg(e, collectives.SharedMemory)
				})
				requireAllOK(t, errs)
			})
		}
	}
}

// TestShmSmallChunkInLineZero: a chunk of up to 32 bytes is published in
// its slot's first cache line, with the round word and the header, so a
// reader moves one line; a larger one goes after the slot's two header
// lines. The allreduce's result is checked too.
func TestShmSmallChunkInLineZero(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ n, off int }{{1, 32}, {8, 32}, {9, 128}, {64, 128}} {
		t.Run(name("float32s", c.n), func(t *testing.T) {
			errs := world(t, 2, coltest.Options{Shared: true}, force(collectives.CollAllreduce, collectives.SharedMemory),
				func(ctx context.Context, e *collectives.Engine, r int) error {
					send, recv := make([]float32, c.n), make([]float32, c.n)
					for i := range send {
						send[i] = float32(r*100 + i)
					}
					if err := collectives.AllreduceInto(ctx, e, send, recv, reduce.Sum); err != nil {
						return err
					}
					for i, v := range recv {
						if want := float32(100 + 2*i); v != want {
							return fmt.Errorf("rank %d: element %d is %v, want %v", r, i, v, want)
						}
					}
					if off, n := collectives.ShmPublishedAt(e); off != c.off || n != 4*c.n {
						return fmt.Errorf("rank %d published %d bytes at offset %d of its slot, want %d at %d", r, n, off, 4*c.n, c.off)
					}
					return checkAlg(e, collectives.SharedMemory)
				})
			requireAllOK(t, errs)
		})
	}
}

// TestSharedMemoryNonCommutative: a non-commutative op keeps rank order in
// every form of the shared-memory allreduce and reduce (40000 int32 is
// past both block-folding thresholds).
func TestSharedMemoryNonCommutative(t *testing.T) {
	t.Parallel()
	for _, p := range []int{2, 3, 5} {
		for _, n := range []int{0, 7, 1000, 40000} {
			t.Run(name("p", p, "n", n), func(t *testing.T) {
				opts := force(collectives.CollAllreduce, collectives.SharedMemory)
				opts.Algorithms[collectives.CollReduce] = collectives.SharedMemory
				errs := world(t, p, coltest.Options{Shared: true}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
					for range 2 {
						if err := ncAllreduceReduce(ctx, e, r, p, n); err != nil {
							return err
						}
					}
					return checkAlg(e, collectives.SharedMemory)
				})
				requireAllOK(t, errs)
			})
		}
	}
}

// TestSharedMemoryBcastSplitWriteFails: when the root of a split bcast
// cannot write its half into the reader's buffer, both ranks get an
// error (the reader's names the root) instead of the reader returning
// half a vector.
func TestSharedMemoryBcastSplitWriteFails(t *testing.T) {
	t.Parallel()
	boom := errors.New("process_vm_writev: EPERM")
	errs := world(t, 2, coltest.Options{Shared: true, PeerWriteErr: boom}, force(collectives.CollBcast, collectives.SharedMemory), func(ctx context.Context, e *collectives.Engine, r int) error {
		buf := make([]float64, 20000) // 156 KiB: split (above Model.ShmSplitMin)
		if r == 0 {
			buf = input(7, len(buf))
		}
		return collectives.Bcast(ctx, e, buf, 0)
	})
	require.ErrorIs(t, errs[0], boom)
	require.ErrorIs(t, errs[1], collectives.ErrProtocol)
	require.ErrorContains(t, errs[1], "rank 0 did not write its half")
}

// TestOneWayCallsSpareDoneLooks: a rank whose shared-memory calls only
// write (a bcast root, a reduce sender) learns from the agreement check
// of its previous call, which reads each peer's announcement of it, that
// the peers have finished the call before, so claiming its slot again
// never looks at their done words: not in a run of such calls (the check
// waits for the announcement), nor in a barrier after one (the check
// looks once without waiting; the test makes sure the reader has
// announced). The results are checked too.
func TestOneWayCallsSpareDoneLooks(t *testing.T) {
	t.Parallel()
	for _, coll := range []collectives.Collective{collectives.CollBcast, collectives.CollReduce} {
		t.Run(coll.String(), func(t *testing.T) {
			opts := force(coll, collectives.SharedMemory)
			opts.Algorithms[collectives.CollBarrier] = collectives.SharedMemory
			const writer, calls = 0, 12
			oneWay := func(ctx context.Context, e *collectives.Engine, r, i int) error {
				buf := []float32{float32(r + i), 1}
				if coll == collectives.CollBcast {
					if err := collectives.Bcast(ctx, e, buf, writer); err != nil {
						return err
					}
					if buf[0] != float32(writer+i) {
						return fmt.Errorf("call %d: bcast gave %v, want %v", i, buf[0], writer+i)
					}
					return nil
				}
				if err := collectives.Reduce(ctx, e, buf, reduce.Sum, 1-writer); err != nil {
					return err
				}
				if r != writer && buf[0] != float32(1+2*i) {
					return fmt.Errorf("call %d: reduce gave %v, want %v", i, buf[0], 1+2*i)
				}
				return nil
			}
			entered := make(chan struct{}, 1)
			waits := 0
			errs := world(t, 2, coltest.Options{Shared: true}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
				if err := collectives.Barrier(ctx, e); err != nil {
					return err
				}
				w0 := collectives.ShmClaimWaits(e)
				for i := range calls {
					if err := oneWay(ctx, e, r, i); err != nil {
						return err
					}
				}
				// One-way calls, each followed by a barrier, once the
				// other rank has entered (announced) the one-way call.
				for i := range calls {
					if err := oneWay(ctx, e, r, i); err != nil {
						return err
					}
					if r != writer {
						entered <- struct{}{}
					} else {
						select {
						case <-entered:
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					if err := collectives.Barrier(ctx, e); err != nil {
						return err
					}
				}
				if r == writer {
					waits = collectives.ShmClaimWaits(e) - w0
				}
				return nil
			})
			requireAllOK(t, errs)
			require.Zero(t, waits, "claims of the writing rank that looked at the other's done word")
		})
	}
}

// TestCrowdedBcastKeepsToSlots: when the shared region says the ranks
// outnumber their CPUs (Crowded), a bcast of more than two ranks never
// reads the root's buffer (a failing ReadPeer goes unnoticed) and moves
// the vector in whole slots, one round per slot; otherwise, by default,
// it reads the root's buffer from 32 to 128 KiB and pipelines larger
// vectors in eighths. Every reader gets the root's data either way.
func TestCrowdedBcastKeepsToSlots(t *testing.T) {
	t.Parallel()
	const slot = 256 << 10
	noRead := errors.New("test: no single-copy reads")
	for _, tc := range []struct {
		crowded bool
		n       int // bytes
		rounds  int // the root's, for the bcast
		fails   bool
	}{
		{crowded: true, n: 96 << 10, rounds: 1},
		{crowded: true, n: 512 << 10, rounds: 2},
		{crowded: true, n: 600004, rounds: 3},
		{crowded: false, n: 96 << 10, fails: true}, // it reads (and the read fails)
		{crowded: false, n: 512 << 10, rounds: 8},  // pieces of 64 KiB
	} {
		t.Run(name("crowded", tc.crowded, "n", tc.n), func(t *testing.T) {
			const p, root = 4, 1
			wo := coltest.Options{Shared: true, SharedSlot: slot, Crowded: tc.crowded, PeerReadErr: noRead}
			rounds := 0
			errs := world(t, p, wo, force(collectives.CollBcast, collectives.SharedMemory), func(ctx context.Context, e *collectives.Engine, r int) error {
				buf := make([]int32, tc.n/4)
				for i := range buf {
					buf[i] = int32(r*1_000_003 + i)
				}
				r0 := collectives.ShmRounds(e)
				if err := collectives.Bcast(ctx, e, buf, root); err != nil {
					return err
				}
				if r == root {
					rounds = collectives.ShmRounds(e) - r0
				}
				for i, v := range buf {
					if want := int32(root*1_000_003 + i); v != want {
						return fmt.Errorf("element %d: %d, want %d", i, v, want)
					}
				}
				return nil
			})
			if tc.fails {
				// Some reader tried the read; the others may fail first for
				// other reasons (an abort, the root gone once all are done).
				read := false
				for _, err := range errs {
					read = read || errors.Is(err, noRead)
				}
				require.True(t, read, "no rank read the root's buffer: %v", errs)
				return
			}
			requireAllOK(t, errs)
			require.Equal(t, tc.rounds, rounds, "rounds the root published")
		})
	}
}

// TestCrowdedReducePipelineIsWholeSlots: when the ranks outnumber their
// CPUs (Crowded) the shared-memory reduce of a large vector moves it in
// whole slots, one round per slot, even where shm_pipe_bytes asks for
// pieces of an eighth, which it then gets without the crowding; by
// default it moves whole slots either way. The sums are right each time.
func TestCrowdedReducePipelineIsWholeSlots(t *testing.T) {
	t.Parallel()
	const slot, n = 256 << 10, 600004 // bytes; above the 512 KiB where the pieces begin
	for _, tc := range []struct {
		crowded bool
		tune    string
		rounds  int // a sender's
	}{
		{true, "shm_pipe_bytes=512K", 3},
		{false, "shm_pipe_bytes=512K", 9}, // pieces of 75000 bytes
		{false, "", 3},
		{true, "", 3},
	} {
		t.Run(name("crowded", tc.crowded, "tune", tc.tune), func(t *testing.T) {
			const p, root, sender = 4, 1, 2
			wo := coltest.Options{Shared: true, SharedSlot: slot, Crowded: tc.crowded}
			rounds := 0
			opts := force(collectives.CollReduce, collectives.SharedMemory)
			require.NoError(t, collectives.ParseTuning(tc.tune, &opts))
			errs := world(t, p, wo, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
				buf := make([]int32, n/4)
				for i := range buf {
					buf[i] = int32(r + i)
				}
				r0 := collectives.ShmRounds(e)
				if err := collectives.Reduce(ctx, e, buf, reduce.Sum, root); err != nil {
					return err
				}
				if r == sender {
					rounds = collectives.ShmRounds(e) - r0
				}
				if r == root {
					for i, v := range buf {
						if want := int32(p*i + p*(p-1)/2); v != want {
							return fmt.Errorf("element %d: %d, want %d", i, v, want)
						}
					}
				}
				return nil
			})
			requireAllOK(t, errs)
			require.Equal(t, tc.rounds, rounds, "rounds a sender published")
		})
	}
}

// TestCrowdedWaitYieldsAtOnce: when the ranks outnumber their CPUs
// (Crowded) a shared-memory wait does not spin: it yields from its first
// look, after a few polls, and keeps the region's yield phase and nap, so
// a short wait never sleeps on a futex, and it never keeps a CPU that
// others want (Contended: the rank it waits for may need it). Otherwise
// the region's spin and Contended stand and stop is looked at every 256
// polls.
func TestCrowdedWaitYieldsAtOnce(t *testing.T) {
	t.Parallel()
	region := shmsync.Policy{Spin: 2 * time.Microsecond, Yield: 2 * time.Millisecond, Nap: time.Millisecond, YieldInSpin: 16,
		Contended: 3 * time.Millisecond}
	got := collectives.ShmWaitPolicyFor(region, true)
	require.Equal(t, time.Duration(0), got.Spin, "crowded: no spin")
	require.Equal(t, 0, got.YieldInSpin)
	require.Equal(t, 4, got.CheckEvery, "crowded: the first yield comes after a few polls")
	require.Equal(t, region.SleepsAfter(), got.SleepsAfter(), "crowded: sleeps no sooner than the region says")
	require.Equal(t, region.Nap, got.Nap)
	require.Zero(t, got.Contended, "crowded: keeps a contended CPU")
	got = collectives.ShmWaitPolicyFor(region, false)
	require.Equal(t, region.Spin, got.Spin, "not crowded: the region's spin")
	require.Equal(t, region.Contended, got.Contended, "not crowded: the region's Contended")
	require.Equal(t, 256, got.CheckEvery)

	// An Engine over a region takes the adapted policy.
	for _, crowded := range []bool{false, true} {
		wo := coltest.Options{Shared: true, Crowded: crowded}
		errs := world(t, 2, wo, force(collectives.CollBarrier, collectives.SharedMemory), func(ctx context.Context, e *collectives.Engine, r int) error {
			want := 256
			if crowded {
				want = 4
			}
			if got := collectives.ShmWaitPolicy(e).CheckEvery; got != want {
				return fmt.Errorf("crowded %v: the Engine's waits look every %d polls, want %d", crowded, got, want)
			}
			return collectives.Barrier(ctx, e)
		})
		requireAllOK(t, errs)
	}
}

// TestCrowdedWaitKeepsCPUForAPeerElsewhere: a crowded bcast reader whose
// root noted itself on another CPU moments ago polls for the data without
// yielding, and its wait ends there (see Keeping the CPU); with the
// ranks on one CPU, or crowded_keep_cpu off, no wait does. The windows
// are long so that a slow run (the race detector) still sees the root
// live.
func TestCrowdedWaitKeepsCPUForAPeerElsewhere(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		apart    bool // the ranks report different CPUs
		tune     string
		keepsCPU bool
	}{
		{"apart", true, "", true},
		{"one CPU", false, "", false},
		{"apart, off", true, "crowded_keep_cpu=off", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := force(collectives.CollBcast, collectives.SharedMemory)
			opts.Algorithms[collectives.CollBarrier] = collectives.SharedMemory
			require.NoError(t, collectives.ParseTuning("crowded_keep_cpu=50ms,crowded_live_window=10s", &opts))
			require.NoError(t, collectives.ParseTuning(tc.tune, &opts))
			const calls = 50
			kept := make([]int, 2)
			errs := world(t, 2, coltest.Options{Shared: true, Crowded: true}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
				cpu := 0
				if tc.apart {
					cpu = r
				}
				collectives.SetShmCPU(e, func() int { return cpu })
				buf := make([]int64, 4)
				for i := range calls {
					if err := collectives.Barrier(ctx, e); err != nil {
						return err
					}
					if r == 0 {
						buf[0] = int64(i)
					}
					if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
						return err
					}
					if buf[0] != int64(i) {
						return fmt.Errorf("rank %d, call %d: got %d", r, i, buf[0])
					}
				}
				kept[r] = collectives.ShmKept(e)
				return nil
			})
			requireAllOK(t, errs)
			if tc.keepsCPU {
				// The reader cannot wait for the root's bcast every time
				// (the root may publish before it looks), but some of
				// the barriers' and bcasts' waits do.
				require.Positive(t, kept[0]+kept[1], "no wait kept the CPU")
			} else {
				require.Zero(t, kept[0]+kept[1], "waits kept the CPU")
			}
		})
	}
}

// TestShmQuickEnd: a shared-memory call that succeeds ends without taking
// the Engine's lock (endQuick: a locked instruction there would wait for
// the peers to give up the lines the call just published), and whoever
// takes the lock next finds the call over, as a locked end leaves it. A
// call that fails takes the lock, and the rank whose call failed is named.
func TestShmQuickEnd(t *testing.T) {
	t.Parallel()
	opts := force(collectives.CollBcast, collectives.SharedMemory)
	opts.Algorithms[collectives.CollReduce] = collectives.SharedMemory
	errs := world(t, 2, coltest.Options{Shared: true}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
		buf := []float32{float32(r), 1}
		for i := range 3 {
			if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
				return err
			}
			if err := collectives.Reduce(ctx, e, buf, reduce.Sum, 1); err != nil {
				return err
			}
			if got, want := collectives.ShmQuickEnds(e), 2*(i+1); got != want {
				return fmt.Errorf("rank %d: %d calls ended quickly, want %d", r, got, want)
			}
		}
		if a := e.Activity(); a.Running {
			return fmt.Errorf("rank %d: Activity says call #%d still runs", r, a.Seq)
		}
		if running, ok, shm := collectives.Settled(e); running || ok != 6 || shm {
			return fmt.Errorf("rank %d: after 6 calls, settled as running %v, last good call %d, shared-memory call %v", r, running, ok, shm)
		}
		// Rank 1 names a root out of range: its call fails, through end's
		// locked path. Rank 0's is a root's one-way bcast, which succeeds;
		// its next call reports rank 1's refusal (see Agreement).
		if r == 1 {
			err := collectives.Bcast(ctx, e, buf, 5)
			if !errors.Is(err, collectives.ErrInvalidArgument) {
				return fmt.Errorf("rank 1: a bcast with root 5 returned %v", err)
			}
			if collectives.ShmQuickEnds(e) != 6 {
				return fmt.Errorf("rank 1: a failed call ended quickly")
			}
			if running, ok, _ := collectives.Settled(e); running || ok != 6 {
				return fmt.Errorf("rank 1: after a failed call, settled as running %v, last good call %d", running, ok)
			}
			return collectives.Barrier(ctx, e)
		}
		if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
			return err
		}
		if err := collectives.Barrier(ctx, e); !errors.Is(err, collectives.ErrInvalidArgument) {
			return fmt.Errorf("rank 0: the barrier after a bcast rank 1 refused returned %v", err)
		}
		return nil
	})
	requireAllOK(t, errs)
}

// TestShmCallOwnsNextEntry: every shared-memory call ends by taking the
// line of the entry the next call announces in (see Agreement), on the
// rank that only writes and on the one that reads alike.
func TestShmCallOwnsNextEntry(t *testing.T) {
	t.Parallel()
	errs := world(t, 2, coltest.Options{Shared: true}, force(collectives.CollBcast, collectives.SharedMemory),
		func(ctx context.Context, e *collectives.Engine, r int) error {
			if got := collectives.ShmOwnedEntry(e); got != -1 {
				return fmt.Errorf("before any call the owned entry is %d, want -1", got)
			}
			buf := make([]float32, 4)
			for i := range 2 * collectives.ShmEntries {
				if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
					return err
				}
				_, ok, _ := collectives.Settled(e)
				if got, want := collectives.ShmOwnedEntry(e), int((ok+1)%collectives.ShmEntries); got != want {
					return fmt.Errorf("after call %d (counter %d) the owned entry is %d, want %d", i, ok, got, want)
				}
			}
			return nil
		})
	requireAllOK(t, errs)
}

// TestShmWriterOwnsInlineSlot: a rank that publishes a chunk inside its
// slot's first line takes that line for writing first; one whose chunk
// lies past it does not.
func TestShmWriterOwnsInlineSlot(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n    int // float32s
		owns bool
	}{{1, true}, {8, true}, {9, false}, {256, false}} {
		t.Run(name("bytes", 4*c.n), func(t *testing.T) {
			errs := world(t, 2, coltest.Options{Shared: true}, force(collectives.CollBcast, collectives.SharedMemory),
				func(ctx context.Context, e *collectives.Engine, r int) error {
					buf := make([]float32, c.n)
					before := collectives.ShmSlotOwns(e)
					if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
						return err
					}
					got := collectives.ShmSlotOwns(e) > before
					if want := c.owns && r == 0; got != want {
						return fmt.Errorf("rank %d took its slot's first line for %d bytes: %v, want %v", r, 4*c.n, got, want)
					}
					return nil
				})
			requireAllOK(t, errs)
		})
	}
}

// TestShmReaderPrefetches: a reader that waits for a chunk whose data lies
// past the slot's first line prefetches its lines while it polls (up to
// Model.ShmPrefetchMax bytes); one whose data sits in line 0 with the
// round id, or that is larger, does not. The reader is made to wait: the
// root publishes only once the reader's Activity says it waits for it.
func TestShmReaderPrefetches(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		n        int // float32s
		prefetch bool
	}{{4, false}, {32, true}, {128, true}, {256, false}} {
		t.Run(name("bytes", 4*c.n), func(t *testing.T) {
			var engines [2]atomic.Pointer[collectives.Engine]
			errs := world(t, 2, coltest.Options{Shared: true}, force(collectives.CollBcast, collectives.SharedMemory),
				func(ctx context.Context, e *collectives.Engine, r int) error {
					engines[r].Store(e)
					buf := make([]float32, c.n)
					if r == 1 {
						before := collectives.ShmPrefetches(e)
						if err := collectives.Bcast(ctx, e, buf, 0); err != nil {
							return err
						}
						if got := collectives.ShmPrefetches(e) > before; got != c.prefetch {
							return fmt.Errorf("a reader of %d bytes prefetched: %v, want %v", 4*c.n, got, c.prefetch)
						}
						for i, v := range buf {
							if v != float32(i) {
								return fmt.Errorf("element %d is %v, want %d", i, v, i)
							}
						}
						return nil
					}
					for i := range buf {
						buf[i] = float32(i)
					}
					for {
						if e1 := engines[1].Load(); e1 != nil {
							if a := e1.Activity(); a.Running && a.Op == "bcast" && a.Peer == 0 {
								break
							}
						}
						if err := ctx.Err(); err != nil {
							return fmt.Errorf("rank 1 never waited for rank 0: %w", err)
						}
						runtime.Gosched()
					}
					return collectives.Bcast(ctx, e, buf, 0)
				})
			requireAllOK(t, errs)
		})
	}
}
