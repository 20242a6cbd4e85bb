package collectives_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/collectives"
	"github.com/rdmago/rdmago/collectives/coltest"
	"github.com/rdmago/rdmago/collectives/reduce"
)

// roundingInput is rank r's vector of n floats whose sums round, so that
// the order of a fold shows in its bits.
func roundingInput(r, n int) []float64 {
	rng := rand.New(rand.NewPCG(uint64(r), uint64(n)))
	v := make([]float64, n)
	for i := range v {
		v[i] = rng.NormFloat64() * math.Pow(10, float64(rng.IntN(12)-6))
	}
	return v
}

func sameBits(what string, got, want []float64) error {
	if len(got) != len(want) {
		return fmt.Errorf("%s: %d elements, want %d", what, len(got), len(want))
	}
	for i := range got {
		if math.Float64bits(got[i]) != math.Float64bits(want[i]) {
			return fmt.Errorf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
	return nil
}

// TestSharedMemoryReduceBits: the shared-memory reduce, in both its forms
// (the root folds every chunk, in pieces above shm_pipe_bytes, here 64K
// unless fold is set; above
// shm_reduce_fold_bytes, here 64K when fold is set, every rank folds a
// block and the root gathers them), over several rounds of the test
// region's 8 KiB slots and with the root anywhere, leaves the Ordered
// algorithm's bits in the root's buffer and every other rank's buffer as
// it was; with Deterministic too (the root then never folds in place).
func TestSharedMemoryReduceBits(t *testing.T) {
	t.Parallel()
	type tc struct {
		p, n      int
		det, fold bool
	}
	ps, ns := []int{2, 3, 5}, []int{0, 1, 2049, 9000, 17409, 70001}
	big := 70001
	if raceEnabled && !long { // ten times slower: fewer and smaller, still past 64K
		ps, ns, big = []int{2, 3}, []int{1, 9000, 20001}, 20001
	}
	var cases []tc
	for _, p := range ps {
		for _, n := range ns {
			cases = append(cases, tc{p, n, false, false}, tc{p, n, false, true})
		}
	}
	cases = append(cases, tc{2, 20001, true, true}, tc{3, 17409, true, true}, tc{2, 2049, true, false}, tc{3, big, true, false})
	for _, c := range cases {
		t.Run(name("p", c.p, "n", c.n, "det", c.det, "fold", c.fold), func(t *testing.T) {
			p, n := c.p, c.n
			roots := []int{0, p - 1, p / 2}
			run := func(alg collectives.Algorithm, shared bool) [][]float64 {
				out := make([][]float64, len(roots)) // the root's result per call
				opts := force(collectives.CollReduce, alg)
				opts.Deterministic = c.det
				if c.fold {
					require.NoError(t, collectives.ParseTuning("shm_reduce_fold_bytes=64K", &opts))
				} else {
					require.NoError(t, collectives.ParseTuning("shm_pipe_bytes=64K", &opts))
				}
				errs := world(t, p, coltest.Options{Shared: shared}, opts, func(ctx context.Context, e *collectives.Engine, r int) error {
					for k, root := range roots {
						buf := roundingInput(r, n)
						if err := collectives.Reduce(ctx, e, buf, reduce.Sum, root); err != nil {
							return err
						}
						if r == root {
							out[k] = buf
						} else if err := sameBits(fmt.Sprintf("non-root %d's buffer (root %d)", r, root), buf, roundingInput(r, n)); err != nil {
							return err
						}
					}
					return checkAlg(e, alg)
				})
				requireAllOK(t, errs)
				return out
			}
			want := run(collectives.Ordered, false)
			got := run(collectives.SharedMemory, true)
			for k, root := range roots {
				require.NoError(t, sameBits(fmt.Sprintf("root %d", root), got[k], want[k]))
			}
		})
	}
}

// TestSharedMemoryPeerLostData: a rank killed in the middle of a stream
// of shared-memory reduces (both forms: the small one, a large one that
// folds blocks), allgathers, alltoalls and reduce-scatters makes
// every survivor fail with an error naming it; nobody hangs.
func TestSharedMemoryPeerLostData(t *testing.T) {
	t.Parallel()
	type op struct {
		coll collectives.Collective
		f    func(ctx context.Context, e *collectives.Engine) error
	}
	ops := map[string]op{
		"reduce-small": {collectives.CollReduce, func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Reduce(ctx, e, make([]float64, 1000), reduce.Sum, 0)
		}},
		"reduce-large": {collectives.CollReduce, func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Reduce(ctx, e, make([]float64, 70000), reduce.Sum, e.Size()-1)
		}},
		"allgather": {collectives.CollAllgather, func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Allgather(ctx, e, make([]float64, 3000), make([]float64, 3000*e.Size()))
		}},
		"alltoall": {collectives.CollAlltoall, func(ctx context.Context, e *collectives.Engine) error {
			return collectives.Alltoall(ctx, e, make([]float64, 3000*e.Size()), make([]float64, 3000*e.Size()))
		}},
		"reduce_scatter": {collectives.CollReduceScatter, func(ctx context.Context, e *collectives.Engine) error {
			return collectives.ReduceScatter(ctx, e, make([]float64, 3000*e.Size()), make([]float64, 3000), reduce.Sum)
		}},
	}
	for opName, o := range ops {
		for _, p := range []int{2, 3, 5} {
			for _, after := range []int{1, 4} {
				t.Run(name("op", opName, "p", p, "after", after), func(t *testing.T) {
					dead := p / 2
					wo := coltest.Options{Shared: true, FailRank: dead, FailAfter: after}
					eo := force(o.coll, collectives.SharedMemory)
					require.NoError(t, collectives.ParseTuning("shm_reduce_fold_bytes=256K", &eo)) // 70000 floats fold blocks
					errs := shmWorld(t, p, wo, eo, dead, after, o.f)
					for r, err := range errs {
						require.Error(t, err, "rank %d", r)
						require.NotErrorIs(t, err, context.DeadlineExceeded, "rank %d hung", r)
						var pl *coltest.PeerLostError
						require.ErrorAs(t, err, &pl, "rank %d: %v", r, err)
						require.Equal(t, dead, pl.Rank)
					}
				})
			}
		}
	}
}

// TestSharedMemoryAllgatherAlltoall: the shared-memory allgather and
// alltoall give the serial references' results for blocks around the
// test region's 8 KiB slot (one round, a round and a few bytes, several
// rounds; alltoall rounds move a piece of every block), twice in a row on
// the same slots, and with blocks whose sizes are not a multiple of 8;
// and so do their single-copy forms, which read every block straight out
// of its owner's buffer (here above shm_read_block_min=4K, so from 513
// floats a block; the int16 blocks are 3n·2 bytes).
func TestSharedMemoryAllgatherAlltoall(t *testing.T) {
	t.Parallel()
	for _, coll := range []collectives.Collective{collectives.CollAllgather, collectives.CollAlltoall} {
		ps, ns := []int{2, 3, 5, 8}, []int{2, 512, 513, 1023, 1024, 1025, 3001}
		if raceEnabled && !long { // ten times slower
			ps, ns = []int{2, 5}, []int{2, 513, 1025, 3001}
		}
		for _, p := range ps {
			for _, n := range ns {
				for _, tune := range []string{"", "shm_read_block_min=4K"} {
					t.Run(name("coll", coll, "p", p, "n", n, "tune", tune), func(t *testing.T) {
						eo := force(coll, collectives.SharedMemory)
						require.NoError(t, collectives.ParseTuning(tune, &eo))
						errs := world(t, p, coltest.Options{Shared: true}, eo, func(ctx context.Context, e *collectives.Engine, r int) error {
							for range 2 {
								if err := gridCases[coll](ctx, e, r, p, n); err != nil {
									return err
								}
							}
							if err := oddBlocks(ctx, e, coll, r, p, 3*n); err != nil {
								return err
							}
							return checkAlg(e, collectives.SharedMemory)
						})
						requireAllOK(t, errs)
					})
				}
			}
		}
	}
}

// TestSharedMemoryReadBlocksFails: when a rank cannot read a peer's
// buffer (process_vm_readv refused), the single-copy allgather and
// alltoall fail on that rank with the cause, naming the peer, instead of
// returning a block it never got; the same sizes through the slots work.
func TestSharedMemoryReadBlocksFails(t *testing.T) {
	t.Parallel()
	boom := fmt.Errorf("process_vm_readv: EPERM")
	for _, coll := range []collectives.Collective{collectives.CollAllgather, collectives.CollAlltoall} {
		for _, p := range []int{2, 3} {
			for _, tune := range []string{"shm_read_block_min=4K", "shm_read_block_min=max"} {
				t.Run(name("coll", coll, "p", p, "tune", tune), func(t *testing.T) {
					eo := force(coll, collectives.SharedMemory)
					require.NoError(t, collectives.ParseTuning(tune, &eo))
					errs := world(t, p, coltest.Options{Shared: true, PeerReadErr: boom}, eo, func(ctx context.Context, e *collectives.Engine, r int) error {
						return gridCases[coll](ctx, e, r, p, 1000) // 8000-byte blocks
					})
					if tune == "shm_read_block_min=max" {
						requireAllOK(t, errs)
						return
					}
					for r, err := range errs {
						require.ErrorIs(t, err, boom, "rank %d", r)
						var ce *collectives.Error
						require.ErrorAs(t, err, &ce, "rank %d", r)
						require.Equal(t, (r+1)%p, ce.Peer, "rank %d: %v", r, err)
					}
				})
			}
		}
	}
}

// TestSingleCopyLowersReadThresholds: a group that reports a measured
// crossover (collectives.SingleCopy) below the defaults makes the
// shared-memory algorithms that read a peer's buffer do so above it: the
// model's ShmSplitMin, ShmReadMin, ShmReadBlockMin and ShmReduceReadMin
// become the crossover where their defaults are higher, a threshold the Model sets
// stays, and none changes without a crossover. And the allgather and
// alltoall then read 8000-byte blocks (a refused read fails them), which
// they copy through the slots by default.
func TestSingleCopyLowersReadThresholds(t *testing.T) {
	t.Parallel()
	def := collectives.DefaultModel()
	for _, tc := range []struct {
		name                           string
		single                         int
		model                          collectives.Model
		split, read, readBlock, reduce int
	}{
		{name: "none", split: def.ShmSplitMin, read: def.ShmReadMin, readBlock: def.ShmReadBlockMin, reduce: def.ShmReduceReadMin},
		{name: "low", single: 6000, split: 6000, read: 6000, readBlock: 6000, reduce: 6000},
		{name: "between", single: 64 << 10, split: 64 << 10, read: def.ShmReadMin, readBlock: 64 << 10, reduce: 64 << 10},
		{name: "set", single: 6000, model: collectives.Model{ShmSplitMin: 1 << 20, ShmReadBlockMin: 1 << 30},
			split: 1 << 20, read: 6000, readBlock: 1 << 30, reduce: 6000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := engineFor(t, 2, coltest.Options{Shared: true, SingleCopyMin: tc.single}, collectives.Options{Model: &tc.model})
			m := e.Model()
			require.Equal(t, tc.split, m.ShmSplitMin, "ShmSplitMin")
			require.Equal(t, tc.read, m.ShmReadMin, "ShmReadMin")
			require.Equal(t, tc.readBlock, m.ShmReadBlockMin, "ShmReadBlockMin")
			require.Equal(t, tc.reduce, m.ShmReduceReadMin, "ShmReduceReadMin")
		})
	}
	boom := fmt.Errorf("process_vm_readv: EPERM")
	for _, coll := range []collectives.Collective{collectives.CollAllgather, collectives.CollAlltoall} {
		for _, single := range []int{0, 4096} {
			t.Run(name("coll", coll, "single", single), func(t *testing.T) {
				eo := force(coll, collectives.SharedMemory)
				errs := world(t, 2, coltest.Options{Shared: true, PeerReadErr: boom, SingleCopyMin: single}, eo, func(ctx context.Context, e *collectives.Engine, r int) error {
					return gridCases[coll](ctx, e, r, 2, 1000) // 8000-byte blocks
				})
				if single == 0 {
					requireAllOK(t, errs)
					return
				}
				for r, err := range errs {
					require.ErrorIs(t, err, boom, "rank %d", r)
				}
			})
		}
	}
}

// TestSharedMemoryReduceReads: above shm_reduce_read_min (and up to
// shm_reduce_read_max) the shared-memory reduce's root reads the other
// ranks' buffers, where it folds in place: rank 0, or either rank of two
// when the op commutes and Deterministic is off (ReduceInto's root of
// two then reads straight into recv). Reduce and ReduceInto give the
// reference sum at one piece and at several (256 KiB each), leave the
// non-roots' buffers and ReduceInto's send unchanged, and where the root
// reads, a refused read fails it with the cause (so the path was taken);
// where it may not read (rank 2 of 3, rank 1 of 2 with Deterministic) the
// slots serve and the refusal does not matter. Above the maximum the
// slots serve again. From 128 KiB two ranks whose op commutes split the
// work (the other rank folds the second half and writes it into the
// root's buffer): the sums are the same, and a refused write fails the
// root with ErrProtocol naming the other rank, and the other with the
// cause.
func TestSharedMemoryReduceReads(t *testing.T) {
	t.Parallel()
	boom := fmt.Errorf("process_vm_readv: EPERM")
	for _, p := range []int{2, 3} {
		for _, root := range []int{0, p - 1} {
			for _, det := range []bool{false, true} {
				for _, into := range []bool{false, true} {
					for _, n := range []int{1000, 40000, 70000} { // 8000 B; 320000 B, two pieces; 560000 B, past the maximum
						for _, refuse := range []bool{false, true} {
							t.Run(name("p", p, "root", root, "det", det, "into", into, "n", n, "refuse", refuse), func(t *testing.T) {
								eo := force(collectives.CollReduce, collectives.SharedMemory)
								eo.Deterministic = det
								require.NoError(t, collectives.ParseTuning("shm_reduce_read_min=1K", &eo))
								wo := coltest.Options{Shared: true}
								if refuse {
									wo.PeerReadErr = boom
								}
								errs := world(t, p, wo, eo, func(ctx context.Context, e *collectives.Engine, r int) error {
									send := input(r, n)
									if !into {
										if err := collectives.Reduce(ctx, e, send, reduce.Sum, root); err != nil {
											return err
										}
										if r == root {
											return eq("reduce", send, refSum(p, n))
										}
										return eq("reduce leaves a non-root's buffer", send, input(r, n))
									}
									var recv []float64
									if r == root {
										recv = make([]float64, n)
									}
									if err := collectives.ReduceInto(ctx, e, send, recv, reduce.Sum, root); err != nil {
										return err
									}
									if err := eq("ReduceInto leaves send", send, input(r, n)); err != nil {
										return err
									}
									if r == root {
										return eq("ReduceInto", recv, refSum(p, n))
									}
									return nil
								})
								reads := n*8 <= 512<<10 && (root == 0 || p == 2 && !det)
								if !refuse || !reads {
									requireAllOK(t, errs)
									return
								}
								require.ErrorIs(t, errs[root], boom, "the root")
							})
						}
					}
				}
			}
		}
	}
	wboom := fmt.Errorf("process_vm_writev: EPERM")
	for _, into := range []bool{false, true} {
		t.Run(name("split", "refused write", "into", into), func(t *testing.T) {
			eo := force(collectives.CollReduce, collectives.SharedMemory)
			require.NoError(t, collectives.ParseTuning("shm_reduce_read_min=1K", &eo))
			errs := world(t, 2, coltest.Options{Shared: true, PeerWriteErr: wboom}, eo, func(ctx context.Context, e *collectives.Engine, r int) error {
				send := input(r, 40000)
				if into {
					return collectives.ReduceInto(ctx, e, send, make([]float64, 40000), reduce.Sum, 0)
				}
				return collectives.Reduce(ctx, e, send, reduce.Sum, 0)
			})
			require.ErrorIs(t, errs[0], collectives.ErrProtocol, "the root")
			var ce *collectives.Error
			require.ErrorAs(t, errs[0], &ce)
			require.Equal(t, 1, ce.Peer, "the root's error names the other rank: %v", errs[0])
			require.ErrorIs(t, errs[1], wboom, "the other rank")
		})
	}
}

// oddBlocks runs coll over blocks of n int16 (2 bytes each) on rank r
// and checks the result.
func oddBlocks(ctx context.Context, e *collectives.Engine, coll collectives.Collective, r, p, n int) error {
	val := func(src, dst, i int) int16 { return int16(src*1000 + dst*100 + i%97) }
	recv := make([]int16, p*n)
	switch coll {
	case collectives.CollAllgather:
		send := make([]int16, n)
		for i := range send {
			send[i] = val(r, 0, i)
		}
		if err := collectives.Allgather(ctx, e, send, recv); err != nil {
			return err
		}
	default:
		send := make([]int16, p*n)
		for j := range p {
			for i := range n {
				send[j*n+i] = val(r, j, i)
			}
		}
		if err := collectives.Alltoall(ctx, e, send, recv); err != nil {
			return err
		}
	}
	for q := range p {
		for i := range n {
			want := val(q, 0, i)
			if coll == collectives.CollAlltoall {
				want = val(q, r, i)
			}
			if got := recv[q*n+i]; got != want {
				return fmt.Errorf("%v int16: rank %d's block from rank %d, element %d: %d, want %d", coll, r, q, i, got, want)
			}
		}
	}
	return nil
}

// TestSharedMemoryPiecesPacked: the shared-memory alltoall and
// reduce-scatter publish, per round, only the pieces the other ranks read,
// in rank order without the publisher's own ((p−1)·n bytes, not p·n with
// a hole), and still deliver every block where it belongs.
func TestSharedMemoryPiecesPacked(t *testing.T) {
	t.Parallel()
	for _, p := range []int{2, 3, 4} {
		for _, n := range []int{1, 4, 7, 64} { // float32s per block: 4, 16, 28, 256 bytes
			t.Run(name("p", p, "n", n), func(t *testing.T) {
				errs := world(t, p, coltest.Options{Shared: true}, force(collectives.CollAlltoall, collectives.SharedMemory),
					func(ctx context.Context, e *collectives.Engine, r int) error {
						send, recv := make([]float32, p*n), make([]float32, p*n)
						for i := range send {
							send[i] = float32(r*1000 + i)
						}
						if err := collectives.Alltoall(ctx, e, send, recv); err != nil {
							return err
						}
						for q := range p {
							for k := range n {
								if want := float32(q*1000 + r*n + k); recv[q*n+k] != want {
									return fmt.Errorf("rank %d: element %d of block %d is %v, want %v", r, k, q, recv[q*n+k], want)
								}
							}
						}
						var want []float32
						for j := range p {
							if j != r {
								want = append(want, send[j*n:(j+1)*n]...)
							}
						}
						if got := collectives.ShmPublished(e); string(got) != string(reduce.Bytes(want)) {
							return fmt.Errorf("rank %d published %d bytes %v, want the other ranks' blocks packed, %d bytes", r, len(got), got, 4*len(want))
						}
						return nil
					})
				requireAllOK(t, errs)
			})
		}
	}
	for _, p := range []int{2, 3} {
		t.Run(name("coll", "reduce_scatter", "p", p), func(t *testing.T) {
			const n = 4
			errs := world(t, p, coltest.Options{Shared: true}, force(collectives.CollReduceScatter, collectives.SharedMemory),
				func(ctx context.Context, e *collectives.Engine, r int) error {
					send, recv := make([]float32, p*n), make([]float32, n)
					for i := range send {
						send[i] = float32(r + i)
					}
					if err := collectives.ReduceScatter(ctx, e, send, recv, reduce.Sum); err != nil {
						return err
					}
					for k := range n {
						var want float32
						for q := range p {
							want += float32(q + r*n + k)
						}
						if recv[k] != want {
							return fmt.Errorf("rank %d: element %d is %v, want %v", r, k, recv[k], want)
						}
					}
					if got := collectives.ShmPublished(e); len(got) != 4*(p-1)*n {
						return fmt.Errorf("rank %d published %d bytes, want %d", r, len(got), 4*(p-1)*n)
					}
					return nil
				})
			requireAllOK(t, errs)
		})
	}
}

// TestSharedMemoryDoneOncePerRound: a shared-memory call stores its done
// word once per round it reads, its last round's store marking the whole
// call read: end adds no second store (and bell look) of its own.
func TestSharedMemoryDoneOncePerRound(t *testing.T) {
	t.Parallel()
	const calls = 5
	colls := []struct {
		c   collectives.Collective
		run func(ctx context.Context, e *collectives.Engine, r, p, n int) error
	}{
		{collectives.CollBarrier, func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
			return collectives.Barrier(ctx, e)
		}},
		{collectives.CollAllreduce, func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
			return collectives.Allreduce(ctx, e, make([]float32, n), reduce.Sum)
		}},
		{collectives.CollBcast, func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
			return collectives.Bcast(ctx, e, make([]float32, n), p-1)
		}},
		{collectives.CollReduce, func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
			return collectives.Reduce(ctx, e, make([]float32, n), reduce.Sum, 0)
		}},
		{collectives.CollAllgather, func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
			return collectives.Allgather(ctx, e, make([]float32, n), make([]float32, p*n))
		}},
		{collectives.CollAlltoall, func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
			return collectives.Alltoall(ctx, e, make([]float32, p*n), make([]float32, p*n))
		}},
		{collectives.CollReduceScatter, func(ctx context.Context, e *collectives.Engine, r, p, n int) error {
			return collectives.ReduceScatter(ctx, e, make([]float32, p*n), make([]float32, n), reduce.Sum)
		}},
	}
	for _, p := range []int{2, 3} {
		for _, cl := range colls {
			// 4 floats: one round; 5000 floats (20 KB): several rounds of
			// the test region's slots for the allreduce.
			for _, n := range []int{4, 5000} {
				if n > 4 && cl.c != collectives.CollAllreduce {
					continue
				}
				t.Run(name("coll", cl.c, "p", p, "n", n), func(t *testing.T) {
					errs := world(t, p, coltest.Options{Shared: true}, force(cl.c, collectives.SharedMemory),
						func(ctx context.Context, e *collectives.Engine, r int) error {
							stores0, rounds0 := collectives.ShmDoneStores(e), collectives.ShmRounds(e)
							for range calls {
								if err := cl.run(ctx, e, r, p, n); err != nil {
									return err
								}
							}
							if a := e.LastAlgorithm(); a != collectives.SharedMemory {
								return fmt.Errorf("ran %v, want shared_memory", a)
							}
							stores, rounds := collectives.ShmDoneStores(e)-stores0, collectives.ShmRounds(e)-rounds0
							want := calls
							if n > 4 {
								want = rounds // allreduce: every rank publishes and reads each round
							}
							if stores != want || want < calls || n > 4 && rounds <= calls {
								return fmt.Errorf("rank %d: %d stores of the done word in %d calls (%d rounds published), want %d", r, stores, calls, rounds, want)
							}
							return nil
						})
					requireAllOK(t, errs)
				})
			}
		}
	}
}
