// Package comm is rdmago's communicator API: a group of ranks that exchange
// typed messages and run MPI-style collectives over RDMA-model transports.
//
//	func main() {
//		ctx := context.Background()
//		c, err := comm.FromEnv(ctx) // rank, size and rendezvous come from the launcher
//		if err != nil {
//			log.Fatal(err) // "... RDMARUN_RANK=\"x\": not a decimal integer"
//		}
//		defer c.Close()
//		grads := []float32{float32(c.Rank()), 1, 2}
//		if err := comm.Allreduce(ctx, c, grads, comm.Sum); err != nil {
//			log.Fatal(err) // a *comm.OpError: op, rank, peer and cause
//		}
//		fmt.Println(c.Rank(), grads)
//	}
//
// Run it with rdmarun -np 4 ./prog, or mpiexec -n 4 ./prog, srun
// --mpi=pmi2 -n 4 ./prog, mpirun -x RDMARUN_ADDR -x RDMARUN_TOKEN, or
// torchrun-style variables (docs/launchers). A program that arranges its own
// rendezvous uses Init with explicit Options (a bootstrap.Store, or the
// address, token, rank and size); example_test.go runs four ranks in one
// process that way.
//
// # Communicators
//
// The world communicator has every rank of the job. Split makes
// sub-communicators (MPI semantics: ranks with the same color, ordered by
// key then old rank; Undefined gives nil), Dup a copy with its own
// matching contexts. All of them share one p2p endpoint (one queue pair
// per peer); each has two private matching contexts, one for user messages
// and one for its collectives, so traffic of different communicators, and
// user messages and collectives, never match each other.
//
// # Point-to-point
//
// Send, Recv, Isend, Irecv, Probe and Sendrecv are generic over the element
// type: any Go integer or float type, named types over them, BFloat16 and
// Float16, and so []byte. Status reports the source, tag and element count.
// Messages between two ranks with the same tag never overtake each other;
// AnySource and AnyTag are the wildcards; a message larger than the receive
// buffer fails with ErrTruncated.
//
// # Collectives
//
// Barrier, Bcast, Reduce, Allreduce, Allgather(v), ReduceScatter,
// Gather(v), Scatter(v), Alltoall(v), Scan and Exscan, with in-place and
// out-of-place forms (see coll.go for the naming rule), and a
// non-blocking form of each (the name with an I in front: Iallreduce,
// Igatherv, IscanInto, ...) that returns a *Request; WaitAll, WaitAny and
// TestAny take requests of any kind. AllreduceInit makes a persistent
// allreduce (set up once, started many times); NewBatch groups
// point-to-point operations that complete as one. Ops are plain values
// that work for every type they make sense for (Sum, Prod, Min, Max, Avg,
// BAnd, BOr, BXor, LAnd, LOr); NewOp makes a user-defined one.
//
// Every rank calls a communicator's collectives in the same order. Calls
// from several goroutines on one communicator run one at a time in call
// order; to run collectives concurrently, give each goroutine a Dup'ed
// communicator. A rank whose arguments differ from the others' (counts,
// root, op, type) gets ErrMismatch naming both ranks and both values, and
// so do the others: never a hang or silent garbage. (Over the network, the
// root of a one-way collective such as Bcast may return success before
// the others find the difference, unless Options.Collectives.Debug; see
// the Collectives note in coll.go.)
//
// Algorithms are chosen by the collectives package's cost model; they can
// be forced with Options.Collectives.Algorithms or the environment
// (RDMAGO_ALLREDUCE_ALGO=ring, RDMAGO_ALGORITHMS=allreduce=ring,bcast=chain;
// docs/comm.md lists the variables). The one-sided algorithms run on the
// world communicator only.
//
// # Failures
//
// Every error is a *OpError{Op, Rank, Size, Peer, Tag, Err}; causes match
// the sentinels (ErrPeerLost, ErrTruncated, ErrMismatch, ErrClosed,
// ErrInvalidRank, ErrInvalidTag, ErrInvalidArgument, ErrAborted, ...) with
// errors.Is under any layer's name (each cause is one value), and its
// message is one line that names the call, this rank, the peer and the
// cause once each (docs/errors.md). A rank that dies or loses its
// link fails every pending and later operation on every communicator of
// every other rank with ErrPeerLost naming it. Abort ends the whole job
// with an exit code. Every blocking call takes a context, which is its only
// deadline; Options.ConnectTimeout (RDMARUN_TIMEOUT) bounds only joining.
//
// Logging goes to Options.Logger and is silent by default.
package comm
