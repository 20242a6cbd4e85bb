// Package pmi is a bootstrap.Store over the Process Management Interface
// that MPI launchers provide: MPICH's Hydra (mpiexec) and Slurm's
// srun --mpi=pmi2. Ranks started by such a launcher exchange their
// queue-pair addresses through the launcher's own key-value service
// instead of an rdmago rendezvous server.
//
//	// comm (comm/internal/launchers) reads PMI_FD, PMI_RANK, PMI_SIZE and
//	// PMI_JOBID; this package reads no environment.
//	c, err := pmi.Open(ctx, pmi.Options{FD: 6, Rank: 2, Size: 4})
//	if err != nil { ... } // "bootstrap: pmi open: PMI_FD=6 is not a socket inherited from the launcher (...)"
//	defer c.Close()
//	addrs, err := bootstrap.Allgather(ctx, c, "qp", myQPAddress) // put, fence, get
//
// # Protocol
//
// PMI-1 ("simple" PMI: one line of space-separated key=value pairs per
// message) is the default: Hydra and Slurm's mpi/pmi2 plugin both speak it
// on PMI_FD. PMI-2 (Options.Version 2: length-prefixed messages of
// "key=value;" pairs) is also implemented; Slurm needs PMI_JOBID in its
// fullinit. Hydra's -pmi-port mode (PMI_PORT and PMI_ID instead of an
// inherited socket) is supported with Options.Port. Replies are parsed as
// maps: servers differ in field order and in whether rc is present.
//
// # Store semantics under PMI
//
// Put is PMI put (PMI-1 has no separate commit; under PMI-2 the next Fence
// publishes it). Fence is the PMI barrier. A value becomes visible to
// other ranks only after a Fence, so Get polls: PMI-1 answers a missing
// key with an error code (Hydra rc=-1, Slurm rc=1) and PMI-2 with
// found=FALSE; Get retries with a doubling wait (1 ms to 100 ms) until the
// key appears or ctx ends, and then says what the server last answered.
// bootstrap.Allgather does Put, Fence, Get and so works unchanged. PMI has
// no counters (bootstrap.Adder) and no server-side allgather.
//
// Keys are namespaced ("rdmago:" + key, or a hash when the key has other
// characters or is too long for the server's limit, 64 bytes under Hydra)
// so they never collide with an MPI library's keys in the same job. Values
// are binary-safe: base64url, split over several PMI keys when longer than
// the server's value limit (a 1024-byte value is 1366 characters).
//
// # Blocking and errors
//
// Every call takes a context; the socket's deadline follows it, so a
// launcher that never answers cannot hang a rank. Errors are
// *bootstrap.Error naming the operation and key; a non-zero rc from the
// server is an *RCError (errors.As) with the server's rc and message; a
// broken connection or a malformed reply matches bootstrap.ErrServerLost
// and ends the Client. Abort sends PMI abort: the launcher kills the job
// and reports the code.
package pmi
