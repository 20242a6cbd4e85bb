package launchers

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/bootstrap/pmi"
	"github.com/rdmago/rdmago/comm/internal/jobenv"
	"github.com/rdmago/rdmago/internal/slurm"
)

// Launchers Detect recognises (Launch.Launcher).
const (
	PMI      = "pmi"      // MPICH Hydra's mpiexec, srun --mpi=pmi2
	OpenMPI  = "openmpi"  // Open MPI's mpirun
	Torchrun = "torchrun" // torchrun and Kubernetes training operators
)

// LookupEnv reads one variable, as os.LookupEnv does (jobenv's type).
type LookupEnv = jobenv.LookupEnv

// Launch is what Detect learned: who started this rank, where it stands in
// the job, and how to rendezvous. Exactly one of PMI and Addr is set.
type Launch struct {
	// Launcher is PMI, OpenMPI or Torchrun; Via says more, for messages
	// ("MPICH Hydra (mpiexec)", "Slurm srun --mpi=pmi2", "Open MPI mpirun").
	Launcher, Via string
	// Rank and Size. Under Hydra's -pmi-port mode they are -1 until
	// Connect has asked the PMI server.
	Rank, Size int
	// LocalRank and LocalSize place the rank among those on its host;
	// -1 and 0 when the launcher does not say.
	LocalRank, LocalSize int
	// JobID identifies the job when the launcher names it ("" if not).
	JobID string

	// PMI is set when the launcher's PMI service is the rendezvous.
	PMI *pmi.Options
	// Addr is set otherwise: rank 0 serves the rendezvous there and every
	// rank joins it (Serve is true on rank 0).
	Addr  string
	Serve bool

	// Token is the job secret, from RDMARUN_TOKEN, or one derived from
	// public values under RDMARUN_INSECURE=1. Nil under PMI: rank 0 makes
	// one and shares it through PMI in Connect.
	Token []byte
	// Insecure is RDMARUN_INSECURE=1; Warnings then says so, and the
	// caller must print every warning on stderr.
	Insecure bool
	Warnings []string

	// Transport is RDMARUN_TRANSPORT when set, else "auto"; Timeout is
	// RDMARUN_TIMEOUT when set, else DefaultTimeout.
	Transport string
	Timeout   time.Duration

	// Secrets are the variables that carried secrets (RDMARUN_TOKEN); the
	// caller unsets them so that child processes do not inherit them.
	Secrets []string
}

// DefaultTimeout bounds joining the job when RDMARUN_TIMEOUT is not set,
// as rdmarun's --connect-timeout default does.
const DefaultTimeout = 2 * time.Minute

// Variables this package reads.
const (
	EnvPMIFD      = "PMI_FD"
	EnvPMIRank    = "PMI_RANK"
	EnvPMISize    = "PMI_SIZE"
	EnvPMIJobID   = "PMI_JOBID"
	EnvPMIPort    = "PMI_PORT"
	EnvPMIID      = "PMI_ID"
	EnvPMIVersion = "RDMAGO_PMI_VERSION" // 1 (default) or 2

	EnvOMPIRank      = "OMPI_COMM_WORLD_RANK"
	EnvOMPISize      = "OMPI_COMM_WORLD_SIZE"
	EnvOMPILocalRank = "OMPI_COMM_WORLD_LOCAL_RANK"
	EnvOMPILocalSize = "OMPI_COMM_WORLD_LOCAL_SIZE"

	EnvRank           = "RANK"
	EnvWorldSize      = "WORLD_SIZE"
	EnvLocalRank      = "LOCAL_RANK"
	EnvLocalWorldSize = "LOCAL_WORLD_SIZE"
	EnvMasterAddr     = "MASTER_ADDR"
	EnvMasterPort     = "MASTER_PORT"
	EnvAgentStore     = "TORCHELASTIC_USE_AGENT_STORE"

	// Shared with rdmarun's contract (docs/env.md), but optional here.
	EnvAddr      = "RDMARUN_ADDR"
	EnvToken     = "RDMARUN_TOKEN"
	EnvInsecure  = "RDMARUN_INSECURE"
	EnvTransport = "RDMARUN_TRANSPORT"
	EnvTimeout   = "RDMARUN_TIMEOUT"
)

// SharedVars are the RDMARUN_* variables that other launchers' jobs set
// too (with mpirun -x, or by an operator): their presence alone does not
// mean rdmarun started the rank. rdmarun's own detection must key on
// RDMARUN_RANK / RDMARUN_SIZE instead.
var SharedVars = []string{EnvAddr, EnvToken, EnvInsecure, EnvTransport, EnvTimeout}

// ErrNoLauncher: none of the launchers' variables are present. It is
// jobenv's sentinel: neither rdmarun's nor another launcher's.
var ErrNoLauncher = jobenv.ErrNoLauncher

// ErrInvalid: a launcher's variables are present but missing, malformed or
// contradictory, or the launcher cannot run rdmago as configured (srun
// without --mpi=pmi2). It is jobenv's sentinel: every launcher reports bad
// environment the same way.
var ErrInvalid = jobenv.ErrInvalid

// Error names the launcher and the variable at fault, with its value
// (jobenv's type, shared by every launcher).
type Error = jobenv.Error

// detector is one launcher: whether its variables are present, and how to
// read them.
type detector struct {
	present func(env LookupEnv) bool
	parse   func(env LookupEnv) (*Launch, error)
}

// detectors in detection order: most specific first (package doc).
var detectors = []detector{
	{anySet(EnvPMIFD, EnvPMIRank, EnvPMISize, EnvPMIPort, EnvPMIID), parsePMI},
	{anySet(EnvOMPIRank, EnvOMPISize), parseOpenMPI},
	{anySet("PMIX_RANK", "PMIX_NAMESPACE"), parsePMIx},
	{anySet(EnvRank, EnvWorldSize, EnvMasterAddr, EnvMasterPort, EnvLocalWorldSize), parseTorchrun},
	{anySet("SLURM_STEP_ID", "SLURM_STEPID"), parseSlurmStep},
}

func anySet(vars ...string) func(LookupEnv) bool {
	return func(env LookupEnv) bool {
		for _, v := range vars {
			if _, ok := env(v); ok {
				return true
			}
		}
		return false
	}
}

// Detect finds which launcher started this rank, in the order of the
// package doc, and parses its variables. It does no I/O: Connect does.
// With no launcher's variables present the error matches ErrNoLauncher
// (and says what to do); with bad ones it is an *Error matching
// ErrInvalid. rdmarun's own RDMARUN_RANK/... environment is the caller's
// to check first.
func Detect(env LookupEnv) (*Launch, error) {
	for _, d := range detectors {
		if d.present(env) {
			l, err := d.parse(env)
			if err != nil {
				return nil, err
			}
			if err := common(env, l); err != nil {
				return nil, err
			}
			return l, nil
		}
	}
	if id, ok := env("SLURM_JOB_ID"); ok {
		return nil, fmt.Errorf("%w: inside Slurm allocation %s, but not started as a job step: run srun --mpi=pmi2 -n N PROGRAM, or rdmarun -np N PROGRAM", ErrNoLauncher, id)
	}
	return nil, fmt.Errorf("%w: start the program with rdmarun, mpiexec, srun --mpi=pmi2, mpirun -x RDMARUN_ADDR -x RDMARUN_TOKEN, or torchrun-style RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT", ErrNoLauncher)
}

// common reads the optional RDMARUN_TRANSPORT and RDMARUN_TIMEOUT.
func common(env LookupEnv, l *Launch) error {
	l.Transport = "auto"
	if v, ok := env(EnvTransport); ok {
		if !slices.Contains([]string{"auto", "shm", "tcp", "ibv"}, v) {
			return &Error{Launcher: l.Launcher, Var: EnvTransport, Value: v, Detail: "want one of auto, shm, tcp, ibv"}
		}
		l.Transport = v
	}
	l.Timeout = DefaultTimeout
	if v, ok := env(EnvTimeout); ok {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return &Error{Launcher: l.Launcher, Var: EnvTimeout, Value: v, Detail: "want a positive Go duration (2m0s, 45s)"}
		}
		l.Timeout = d
	}
	return nil
}

// vars is a launcher's view of the environment, for errors that name the
// variable.
type vars struct {
	who string
	env LookupEnv
}

func (v vars) get(k string) (string, bool) { return v.env(k) }

func (v vars) bad(k, detail string) error {
	val, _ := v.env(k)
	return &Error{Launcher: v.who, Var: k, Value: val, Detail: detail}
}

func (v vars) unset(k, detail string) error {
	return &Error{Launcher: v.who, Var: k, Unset: true, Detail: detail}
}

// number reads a required non-negative decimal.
func (v vars) number(k, why string) (int, error) {
	s, ok := v.env(k)
	if !ok {
		return 0, v.unset(k, why)
	}
	n, err := decimal(s)
	if err != nil {
		return 0, v.bad(k, err.Error())
	}
	return n, nil
}

// rankSize reads a rank and size pair, both required.
func (v vars) rankSize(rk, sk string) (rank, size int, err error) {
	_, rok := v.env(rk)
	_, sok := v.env(sk)
	switch {
	case rok && !sok:
		return 0, 0, v.unset(sk, fmt.Sprintf("%s is set, so %s must be too", rk, sk))
	case sok && !rok:
		return 0, 0, v.unset(rk, fmt.Sprintf("%s is set, so %s must be too", sk, rk))
	}
	if size, err = v.number(sk, "the job size"); err != nil {
		return
	}
	if size < 1 || size > bootstrap.MaxSize {
		return 0, 0, v.bad(sk, fmt.Sprintf("out of range 1..%d", bootstrap.MaxSize))
	}
	if rank, err = v.number(rk, "this process's rank"); err != nil {
		return
	}
	if rank >= size {
		return 0, 0, v.bad(rk, fmt.Sprintf("out of range [0, %d) (%s=%d)", size, sk, size))
	}
	return rank, size, nil
}

// localPair reads an optional local rank and size pair: both or neither.
func (v vars) localPair(rk, sk string, size int) (lrank, lsize int, err error) {
	_, rok := v.env(rk)
	_, sok := v.env(sk)
	if !rok && !sok {
		return -1, 0, nil
	}
	if rok != sok {
		set, miss := rk, sk
		if sok {
			set, miss = sk, rk
		}
		return 0, 0, v.unset(miss, fmt.Sprintf("%s is set, so %s must be too", set, miss))
	}
	if lsize, err = v.number(sk, ""); err != nil {
		return
	}
	if lsize < 1 || lsize > size {
		return 0, 0, v.bad(sk, fmt.Sprintf("out of range 1..%d (the job size)", size))
	}
	if lrank, err = v.number(rk, ""); err != nil {
		return
	}
	if lrank >= lsize {
		return 0, 0, v.bad(rk, fmt.Sprintf("out of range [0, %d) (%s=%d)", lsize, sk, lsize))
	}
	return lrank, lsize, nil
}

func parsePMI(env LookupEnv) (*Launch, error) {
	v := vars{who: "PMI launcher", env: env}
	l := &Launch{Launcher: PMI, LocalRank: -1}
	o := &pmi.Options{Version: 1}
	if s, ok := env(EnvPMIVersion); ok {
		switch s {
		case "1":
		case "2":
			o.Version = 2
		default:
			return nil, v.bad(EnvPMIVersion, "want 1 or 2")
		}
	}
	_, hasFD := env(EnvPMIFD)
	_, hasPort := env(EnvPMIPort)
	switch {
	case hasFD && hasPort:
		return nil, v.bad(EnvPMIPort, "set together with PMI_FD: the launcher gives one or the other")
	case hasPort:
		// Hydra's -pmi-port: rank and size come from the server.
		port, _ := env(EnvPMIPort)
		if _, p, err := net.SplitHostPort(port); err != nil || p == "" {
			return nil, v.bad(EnvPMIPort, "not host:port")
		}
		id, err := v.number(EnvPMIID, "PMI_PORT is set, so PMI_ID must be too")
		if err != nil {
			return nil, err
		}
		o.Port, o.ID = port, id
		l.Rank, l.Size = -1, -1
	default:
		if !hasFD {
			return nil, v.unset(EnvPMIFD, "PMI_RANK or PMI_SIZE is set, so the launcher's socket PMI_FD must be too (or PMI_PORT and PMI_ID)")
		}
		fd, err := v.number(EnvPMIFD, "")
		if err != nil {
			return nil, err
		}
		if fd <= 2 {
			return nil, v.bad(EnvPMIFD, "a standard stream, not the launcher's socket")
		}
		o.FD = fd
		if l.Rank, l.Size, err = v.rankSize(EnvPMIRank, EnvPMISize); err != nil {
			return nil, err
		}
		o.Rank, o.Size = l.Rank, l.Size
	}
	o.JobID, _ = env(EnvPMIJobID)
	l.PMI = o
	l.JobID = o.JobID

	// Which PMI server, and the local placement. Slurm's variables count
	// only when they describe this very step (mpiexec inside an sbatch
	// job inherits the batch step's SLURM_*): Slurm sets
	// PMI_JOBID=<job>.<step>, Hydra no PMI_JOBID at all.
	job, _ := env("SLURM_JOB_ID")
	step, ok := env("SLURM_STEP_ID")
	if !ok {
		step, _ = env("SLURM_STEPID")
	}
	slurmStep := o.JobID != "" && job != "" && o.JobID == job+"."+step
	switch {
	case slurmStep:
		l.Via = "Slurm srun --mpi=pmi2"
		lr, lerr := decimal(envOr(env, "SLURM_LOCALID"))
		node, nerr := decimal(envOr(env, "SLURM_NODEID"))
		tpn := envOr(env, "SLURM_STEP_TASKS_PER_NODE")
		if tpn == "" {
			tpn = envOr(env, "SLURM_TASKS_PER_NODE")
		}
		counts, terr := slurm.Counts(tpn, bootstrap.MaxSize)
		if lerr == nil && nerr == nil && terr == nil && node < len(counts) && lr < counts[node] {
			l.LocalRank, l.LocalSize = lr, counts[node]
		}
	default:
		l.Via = "MPICH Hydra (mpiexec)"
		if o.JobID != "" {
			l.Via = "a PMI launcher"
		}
		if _, ok := env("MPI_LOCALRANKID"); ok && l.Size > 0 {
			lr, ls, err := v.localPair("MPI_LOCALRANKID", "MPI_LOCALNRANKS", l.Size)
			if err != nil {
				return nil, err
			}
			l.LocalRank, l.LocalSize = lr, ls
		}
	}
	return l, nil
}

func envOr(env LookupEnv, k string) string {
	v, _ := env(k)
	return v
}

func parseOpenMPI(env LookupEnv) (*Launch, error) {
	v := vars{who: "Open MPI mpirun", env: env}
	l := &Launch{Launcher: OpenMPI, Via: "Open MPI mpirun"}
	var err error
	if l.Rank, l.Size, err = v.rankSize(EnvOMPIRank, EnvOMPISize); err != nil {
		return nil, err
	}
	if l.LocalRank, l.LocalSize, err = v.localPair(EnvOMPILocalRank, EnvOMPILocalSize, l.Size); err != nil {
		return nil, err
	}
	l.JobID = envOr(env, "OMPI_MCA_ess_base_jobid")
	if l.JobID == "" {
		l.JobID = envOr(env, "PMIX_NAMESPACE")
	}
	if _, ok := env(EnvAddr); !ok {
		return nil, v.unset(EnvAddr, "Open MPI has no key-value service rdmago can use: choose a free port on the host of rank 0 and pass it, "+
			"mpirun -x RDMARUN_ADDR=host:port -x RDMARUN_TOKEN ...")
	}
	if err := served(v, env, l, envOr(env, EnvAddr), EnvAddr); err != nil {
		return nil, err
	}
	return l, nil
}

func parsePMIx(env LookupEnv) (*Launch, error) {
	v := vars{who: "PMIx launcher", env: env}
	k := "PMIX_RANK"
	if _, ok := env(k); !ok {
		k = "PMIX_NAMESPACE"
	}
	if _, ok := env("SLURM_STEP_ID"); ok {
		return nil, v.bad(k, "srun --mpi=pmix: rdmago speaks PMI-1 and PMI-2, not PMIx; use srun --mpi=pmi2")
	}
	return nil, v.bad(k, "rdmago speaks PMI-1 and PMI-2, not PMIx; use mpiexec (MPICH), srun --mpi=pmi2, or mpirun -x RDMARUN_ADDR -x RDMARUN_TOKEN")
}

func parseTorchrun(env LookupEnv) (*Launch, error) {
	v := vars{who: "torchrun-style environment", env: env}
	l := &Launch{Launcher: Torchrun, Via: "torchrun-style variables"}
	var err error
	if l.Rank, l.Size, err = v.rankSize(EnvRank, EnvWorldSize); err != nil {
		return nil, err
	}
	if l.LocalRank, l.LocalSize, err = v.localPair(EnvLocalRank, EnvLocalWorldSize, l.Size); err != nil {
		return nil, err
	}
	l.JobID = envOr(env, "TORCHELASTIC_RUN_ID")
	addr, ok := env(EnvAddr)
	from := EnvAddr
	if !ok {
		host, hok := env(EnvMasterAddr)
		port, pok := env(EnvMasterPort)
		switch {
		case !hok:
			return nil, v.unset(EnvMasterAddr, "RANK and WORLD_SIZE are set, so MASTER_ADDR and MASTER_PORT must be too (or RDMARUN_ADDR)")
		case !pok:
			return nil, v.unset(EnvMasterPort, "MASTER_ADDR is set, so MASTER_PORT must be too")
		case host == "":
			return nil, v.bad(EnvMasterAddr, "empty")
		}
		if p, err := decimal(port); err != nil || p < 1 || p > 65535 {
			return nil, v.bad(EnvMasterPort, "want a port number in 1..65535")
		}
		if s, _ := env(EnvAgentStore); strings.EqualFold(s, "true") {
			// torchrun's agent already serves its own store on
			// MASTER_PORT, and under elastic rendezvous MASTER_ADDR need
			// not be rank 0's host.
			return nil, v.bad(EnvAgentStore, "torchrun's agent holds MASTER_ADDR:MASTER_PORT for its own store; "+
				"set RDMARUN_ADDR=host:port to a free port on the host of rank 0 (with torchrun --master-addr A --master-port P, e.g. A:P+1)")
		}
		addr, from = net.JoinHostPort(host, port), EnvMasterAddr+":"+EnvMasterPort
	}
	if err := served(v, env, l, addr, from); err != nil {
		return nil, err
	}
	return l, nil
}

func parseSlurmStep(env LookupEnv) (*Launch, error) {
	v := vars{who: "Slurm srun", env: env}
	k := "SLURM_STEP_ID"
	if _, ok := env(k); !ok {
		k = "SLURM_STEPID"
	}
	return nil, v.bad(k, "srun started this program without a PMI service (MpiDefault=none): add --mpi=pmi2 (srun --mpi=pmi2 -n 4 PROGRAM), or run rdmarun inside the allocation")
}

// served fills in a launch whose rank 0 serves the rendezvous at addr,
// with the token from RDMARUN_TOKEN or RDMARUN_INSECURE=1.
func served(v vars, env LookupEnv, l *Launch, addr, from string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host == "" {
		return &Error{Launcher: v.who, Var: from, Value: addr, Detail: "not host:port (IPv6 in brackets: [fd00::1]:29500)"}
	}
	if p, err := decimal(port); err != nil || p < 1 || p > 65535 {
		return &Error{Launcher: v.who, Var: from, Value: addr, Detail: fmt.Sprintf("port %q is not in 1..65535", port)}
	}
	l.Addr = addr
	l.Serve = l.Rank == 0
	tok, hasTok := env(EnvToken)
	insecure, _ := env(EnvInsecure)
	switch {
	case hasTok:
		b, err := hex.DecodeString(tok)
		if err != nil || len(b) != 32 {
			return &Error{Launcher: v.who, Var: EnvToken, Value: fmt.Sprintf("<%d characters, not shown>", len(tok)),
				Detail: "want 64 hex digits (32 bytes): export RDMARUN_TOKEN=$(openssl rand -hex 32)"}
		}
		l.Token = b
		l.Secrets = []string{EnvToken}
	case insecure == "1":
		// Anyone can compute this token: it only keeps apart jobs that
		// happen to use the same address.
		sum := sha256.Sum256([]byte("rdmago insecure job\x00" + l.Launcher + "\x00" + l.JobID + "\x00" + addr))
		l.Token = sum[:]
		l.Insecure = true
		l.Warnings = append(l.Warnings, fmt.Sprintf(
			"rdmago: WARNING: RDMARUN_INSECURE=1: this job has no secret; anyone who can reach %s can join it, "+
				"read the ranks' addresses and disturb it. Set RDMARUN_TOKEN (export RDMARUN_TOKEN=$(openssl rand -hex 32)) instead.", addr))
	case insecure != "":
		return v.bad(EnvInsecure, "want 1 (or unset RDMARUN_INSECURE and set RDMARUN_TOKEN)")
	default:
		hint := "set it in every rank (export RDMARUN_TOKEN=$(openssl rand -hex 32)"
		if l.Launcher == OpenMPI {
			hint += "; mpirun -x RDMARUN_TOKEN"
		}
		hint += "), or set RDMARUN_INSECURE=1 to run without a secret"
		return v.unset(EnvToken, "the job secret: "+hint)
	}
	return nil
}

// decimal is jobenv.Decimal, bounded to ranks and sizes that make sense.
func decimal(s string) (int, error) {
	n, err := jobenv.Decimal(s)
	if err == nil && n > 1<<30 {
		return 0, errors.New("too large")
	}
	return n, err
}
