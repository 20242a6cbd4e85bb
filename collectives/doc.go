// Package collectives implements rdmago's collective operations over a
// narrow Group interface (rank, size, tagged byte messages, optional
// one-sided windows and topology), never over comm: barrier, bcast,
// reduce, allreduce, allgather(v), reduce-scatter, gather(v), scatter(v),
// alltoall(v), scan and exscan, each with the algorithms MPI libraries and
// NCCL use, for any rank count.
//
//	e, err := collectives.New(group, collectives.Options{}) // group: comm's adapter of a p2p channel
//	if err != nil { ... }
//	defer e.Close()
//	grads := make([]float32, 1<<20)
//	err = collectives.Allreduce(ctx, e, grads, reduce.Sum)     // every rank: the element-wise sum
//	err = collectives.Bcast(ctx, e, params, 0)                 // rank 0's params everywhere
//	a, _ := e.Choose(collectives.CollAllreduce, 4<<20, true)   // what Auto would run
//
// # Algorithms and their choice
//
// Barrier: dissemination; hierarchical. Bcast: binomial tree; scatter +
// ring allgather; pipelined chain; hierarchical (one rank per host, then
// inside each host). Allreduce: recursive doubling; ring (reduce-scatter +
// allgather); Rabenseifner (recursive halving + recursive doubling); the
// ring with one-sided writes into the neighbour's window; ordered
// (deterministic); hierarchical (reduce inside each host, allreduce among
// hosts, bcast inside). Reduce: binomial; reduce-scatter + gather
// ("rabenseifner"); ordered; hierarchical (inside each host, then among
// one rank per host). Allgather: ring, recursive doubling, Bruck, linear,
// hierarchical. Reduce-scatter: recursive halving, ring, pairwise
// (ordered), hierarchical. Gather and scatter: binomial, linear. Alltoall:
// pairwise, Bruck, linear, hierarchical. The hierarchical forms need the
// group's Topology; only their steps between hosts cross the network. The
// v-variants: ring (allgatherv), linear (gatherv, scatterv), pairwise
// (alltoallv).
// Scan and exscan: recursive doubling. Recursive schemes fold the ranks
// beyond the largest power of two into partners first, so every algorithm
// works for every rank count. On a group whose ranks share memory
// (SharedMemoryGroup: one host over shm), barrier, bcast, reduce,
// allreduce, allgather, reduce-scatter and alltoall also have
// shared_memory: flags and slots in mapped memory, no messages (alg_shm.go
// and alg_shmdata.go tell how).
//
// Auto picks the cheapest admissible algorithm under the cost model
// α·messages + β·bytes + γ·reduced bytes (Model), fed by the group's
// LinkInfo when it has one; the shared-memory algorithms cost nothing
// inside the size bands the Model's thresholds set. Engine.Cost says what
// Auto compares. Options.Algorithms forces one per collective
// (ParseAlgorithms reads "allreduce=ring,bcast=chain", the format comm
// takes from its environment; this package reads no environment), and
// Options.Model or ParseTuning ("shm_small_bytes=32K,alpha=2us") sets the
// model's parameters (Tunables lists them).
//
// # Results
//
// Every rank gets the same bits: each element is combined along one path
// and then copied, or (recursive doubling) both partners combine the same
// operands in the same order. Non-commutative ops (reduce.Func with
// commutative=false) get rank order: only order-keeping algorithms are
// admitted. Options.Deterministic makes reductions the strict left fold
// x0 ⊕ x1 ⊕ … ⊕ x(p−1) whatever the size or algorithm.
//
// # Errors
//
// Every message carries a 64-byte header with the call's sequence number,
// collective, algorithm, op, element type, root and count, and the
// receiver checks it before touching its buffer. A rank that finds a
// difference reports a *MismatchError ("count mismatch: rank 2 has 1000
// elements, rank 3 has 7 elements", errors.Is(err, ErrMismatch)) and sends
// an abort to every rank, so none waits. If counts differ so much that the
// ranks chose different algorithms, a call still running after
// Options.StallProbe sends its fingerprint to every peer, which finds the
// difference the same way. Bad arguments on one rank fail there with
// ErrInvalidArgument (or ErrUnsupported) and make the others fail with a
// *PeerError naming it and carrying its reason.
//
// The promise, by default: any disagreement about count, root, op or
// element type, and any refusal, fails every rank, for every collective on
// the shared-memory path (every rank announces its call's header in the
// region) and for the collectives whose result on every rank depends on
// every rank (allreduce, allgather(v), reduce-scatter, alltoall(v),
// barrier). On the shared-memory path a rank whose part did not show the
// difference (the bcast root, a reduce sender, a reader that agrees with
// the root) may return from the call; its next call on the Engine then
// does its part and returns the earlier call's error (Op and Seq name that
// call), or Close does if there is no next call (waiting at most
// Options.StallProbe for ranks that have not entered the call). Each rank
// reports a disagreement once. Over
// the network, a rank of a one-way collective (bcast, reduce, gather(v),
// scatter(v), scan, exscan) whose part was done before the disagreement
// showed (the bcast root, a pure sender) may return success; Options.Debug
// closes that gap with an all-to-all fingerprint check before each call,
// so every rank reports any difference by name before data moves. Errors are
// *Error{Op, Algorithm, Seq, Rank, Peer, Err} wrapping the cause (the
// group's peer-lost error, the caller's context error with Peer the rank
// waited for, ...); its message names each of these once, and inside
// comm's error it leaves out what comm's names (docs/errors.md). After an error no request of the call is still in
// flight: the call cancels them and waits before it returns.
//
// # Concurrency
//
// Every rank calls the collectives of one Engine in the same order, one at
// a time; a second call while one runs fails with ErrInvalidArgument.
// Concurrent collectives need separate Engines over separate groups (comm's
// Dup gives each communicator its own tag space).
//
// The Group contract (tags, ordering, cancellation, failure) is on Group.
// Element types and ops live in package reduce; coltest is an in-memory
// Group for tests.
package collectives
