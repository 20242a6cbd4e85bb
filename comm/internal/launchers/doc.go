// Package launchers recognises the launchers other than rdmarun that can
// start an rdmago job, reads their environment and joins the job through
// them. comm.FromEnv calls it after checking rdmarun's own environment.
//
//	l, err := launchers.Detect(os.LookupEnv)
//	if errors.Is(err, launchers.ErrNoLauncher) { ... } // none of them
//	if err != nil { ... } // "torchrun-style environment: WORLD_SIZE is not set (RANK is set, so WORLD_SIZE must be too)"
//	for _, w := range l.Warnings { fmt.Fprintln(os.Stderr, w) }
//	for _, k := range l.Secrets { os.Unsetenv(k) }
//	rv, err := l.Connect(ctx, launchers.ConnectOptions{Version: v, Config: cfg})
//	if err != nil { ... }
//	defer rv.Close()
//	addrs, err := bootstrap.Allgather(ctx, rv.Store, "qp", myQPAddress) // rv.Token for the transports
//
// # Detection order
//
// Launchers nest: a rank that mpirun or mpiexec started inside an sbatch
// job also inherits the batch step's SLURM_* variables; a program that
// rdmarun started inside an allocation sees RDMARUN_* and SLURM_*. So the
// most specific launcher wins, in this order:
//
//  0. rdmarun (RDMARUN_RANK, RDMARUN_SIZE, ...; docs/env.md), checked by
//     the caller first. RDMARUN_ADDR, RDMARUN_TOKEN, RDMARUN_INSECURE,
//     RDMARUN_TRANSPORT and RDMARUN_TIMEOUT alone (SharedVars) do not
//     mean rdmarun: mpirun passes them with -x.
//  1. A PMI service (PMI_FD, PMI_RANK, PMI_SIZE; or PMI_PORT and PMI_ID):
//     MPICH Hydra's mpiexec, Slurm's srun --mpi=pmi2. The rendezvous is the
//     launcher's key-value space (bootstrap/pmi); rank 0 makes the job
//     secret and shares it there. SLURM_LOCALID and the step's task counts
//     give the local rank only when PMI_JOBID is this step's
//     (<SLURM_JOB_ID>.<SLURM_STEP_ID>); under Hydra MPI_LOCALRANKID and
//     MPI_LOCALNRANKS do. RDMAGO_PMI_VERSION=2 selects the PMI-2 wire
//     protocol (default 1; both servers speak it).
//  2. Open MPI's mpirun (OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK,
//     _LOCAL_SIZE). Open MPI offers only PMIx, which rdmago does not speak,
//     so rank 0 serves the rendezvous at RDMARUN_ADDR, passed with -x.
//  3. PMIx alone (srun --mpi=pmix, prterun): an error that says to use
//     srun --mpi=pmi2 or one of the others.
//  4. The torchrun convention (RANK, WORLD_SIZE, LOCAL_RANK,
//     LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), as set by torchrun and
//     by Kubernetes training operators: rank 0 serves at
//     MASTER_ADDR:MASTER_PORT, or at RDMARUN_ADDR when set. Under torchrun
//     itself (TORCHELASTIC_USE_AGENT_STORE=True) its agent already holds
//     that port, so RDMARUN_ADDR is required.
//  5. A Slurm job step without PMI (SLURM_STEP_ID: plain srun with
//     MpiDefault=none): an error that says to add --mpi=pmi2.
//
// Only SLURM_JOB_ID (a shell inside salloc or an sbatch script) is no
// launcher: ErrNoLauncher, saying to use srun --mpi=pmi2 or rdmarun.
//
// A launcher whose variables are present but incomplete, malformed or
// contradictory (RANK without WORLD_SIZE, rank >= size, a non-numeric
// PMI_FD) is an *Error naming the variable and its value, never a reason
// to try the next launcher: guessing would join the wrong job.
//
// Under PMI, a rank that cannot join (a version or configuration that
// differs from rank 0's, a lost PMI server) writes one line on stderr and
// sends PMI abort before Connect returns: Hydra and srun would otherwise
// wait forever for the ranks stuck in the Fence.
//
// # The job secret
//
// Under PMI, rank 0 makes a fresh 32-byte token and publishes it through
// the launcher's key-value space, which only the job's ranks read. Under
// mpirun and torchrun it comes from RDMARUN_TOKEN (64 hex digits; mpirun
// -x RDMARUN_TOKEN, or set by the operator). Without one, the rank refuses
// to start unless RDMARUN_INSECURE=1, which uses a token anyone can
// compute and puts a warning in Launch.Warnings that the caller must print.
// RDMARUN_TRANSPORT and RDMARUN_TIMEOUT are honoured when set.
package launchers
