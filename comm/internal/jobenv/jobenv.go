// Package jobenv finds out which launcher started this process and turns
// its environment into one normalized Job: rank, size, local rank, the
// rendezvous address, the job secret. It is the only reader of launcher
// environment variables in rdmago (comm.FromEnv calls it).
//
//	job, err := jobenv.Detect(os.LookupEnv)
//	if errors.Is(err, jobenv.ErrNoLauncher) { ... } // not started by a launcher
//	if err != nil { ... } // "RDMARUN_RANK=\"x\": not a decimal integer"
//	fmt.Println(job.Launcher, job.Rank, job.Size)
//
// # Detection order
//
// Launchers nest: a rank that mpirun started inside an sbatch job also
// inherits SLURM_* variables, and a program that rdmarun started from a
// shell inside an allocation sees both. Detect therefore asks each known
// launcher in turn, most specific first, whether its variables are present,
// and parses the first one that says yes:
//
//  1. rdmarun: any of RDMARUN_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE, _JOB
//     (docs/env.md). RDMARUN_ADDR, _TOKEN, _TRANSPORT and _TIMEOUT alone do
//     not count: other launchers' ranks get them by hand (mpirun -x).
//
// The other launchers (a PMI service, Open MPI's mpirun, the torchrun
// convention, and the clear errors for plain srun and PMIx) are
// comm/internal/launchers, which comm.FromEnv asks next when Detect finds
// no rdmarun environment (ErrNoLauncher); its package doc has the order.
//
// A launcher whose variables are present but incomplete or malformed is an
// error naming the variable and its value (never the secret's value), not
// a reason to try the next launcher: guessing would join the wrong job.
package jobenv

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Job is a launcher's description of this process's place in the job,
// normalized across launchers.
type Job struct {
	// Launcher names who started the job ("rdmarun"; comm.FromEnv fills a
	// Job for the other launchers too: "pmi", "openmpi", "torchrun").
	Launcher string
	// Rank is this process's rank in [0, Size).
	Rank, Size int
	// LocalRank is this rank's index among the ranks on its host, in
	// [0, LocalSize).
	LocalRank, LocalSize int
	// Addr is the rendezvous server's "host:port".
	Addr string
	// JobID identifies the job; the same on every rank.
	JobID string
	// Token is the job secret (32 bytes under rdmarun).
	Token []byte
	// Transport is the verbs provider choice: "auto", "shm", "tcp" or "ibv".
	Transport string
	// Timeout bounds joining the rendezvous and connecting to peers.
	Timeout time.Duration
	// Secrets are the variables that carried secrets; the caller unsets
	// them so that child processes do not inherit them by accident.
	Secrets []string
}

// LookupEnv reads one variable, as os.LookupEnv does. Tests pass a map.
type LookupEnv func(key string) (string, bool)

// ErrLauncher is the cause of every launcher-environment failure:
// ErrNoLauncher and ErrInvalid match it too (comm.ErrLauncher is it).
var ErrLauncher = errors.New("launcher environment")

// ErrNoLauncher: no launcher's variables are present at all.
var ErrNoLauncher error = &kindError{"not started by a launcher", ErrLauncher}

// ErrInvalid: a launcher's variables are present but missing, malformed
// or contradictory.
var ErrInvalid error = &kindError{"invalid launcher environment", ErrLauncher}

// kindError is a sentinel that is a case of a broader one: it prints its
// own text and matches the broader one with errors.Is.
type kindError struct {
	text string
	kind error
}

func (e *kindError) Error() string { return e.text }
func (e *kindError) Unwrap() error { return e.kind }

// Error names the variable at fault and its value.
type Error struct {
	Launcher string
	Var      string
	Value    string // the value as found ("" when unset); never a secret
	Unset    bool   // the variable is not set at all
	Detail   string
}

func (e *Error) Error() string {
	if e.Unset {
		return fmt.Sprintf("%s: %s is not set (%s)", e.Launcher, e.Var, e.Detail)
	}
	return fmt.Sprintf("%s: %s=%q: %s", e.Launcher, e.Var, e.Value, e.Detail)
}

func (e *Error) Is(target error) bool { return target == ErrInvalid || target == ErrLauncher }

// detector is one launcher: whether its variables are present, and how to
// read them.
type detector struct {
	name    string
	present func(env LookupEnv) bool
	parse   func(env LookupEnv) (Job, error)
}

// detectors in detection order, most specific first (see the package doc).
var detectors = []detector{
	{name: "rdmarun", present: rdmarunPresent, parse: parseRdmarun},
}

// Detect returns the Job of the first launcher (in detection order) whose
// variables are present. With none present, the error matches ErrNoLauncher;
// with bad values it is an *Error matching ErrInvalid.
func Detect(env LookupEnv) (Job, error) {
	for _, d := range detectors {
		if d.present(env) {
			j, err := d.parse(env)
			if err != nil {
				return Job{}, err
			}
			j.Launcher = d.name
			return j, nil
		}
	}
	msg := "no RDMARUN_* variables: start the program with rdmarun (rdmarun -np 4 ./prog), or use comm.Init"
	for _, v := range RdmarunVars {
		if _, ok := env(v); ok {
			msg += fmt.Sprintf(" (%s is set, but it is not enough: rdmarun sets %s)", v, strings.Join(rdmarunOwn, ", "))
			break
		}
	}
	return Job{}, fmt.Errorf("%w: %s", ErrNoLauncher, msg)
}

// The rdmarun contract, docs/env.md.
const (
	EnvRank      = "RDMARUN_RANK"
	EnvSize      = "RDMARUN_SIZE"
	EnvLocalRank = "RDMARUN_LOCAL_RANK"
	EnvLocalSize = "RDMARUN_LOCAL_SIZE"
	EnvAddr      = "RDMARUN_ADDR"
	EnvJob       = "RDMARUN_JOB"
	EnvToken     = "RDMARUN_TOKEN"
	EnvTransport = "RDMARUN_TRANSPORT"
	EnvTimeout   = "RDMARUN_TIMEOUT"
)

// RdmarunVars lists the contract's variables, in the order they are checked.
var RdmarunVars = []string{EnvRank, EnvSize, EnvLocalRank, EnvLocalSize, EnvAddr, EnvJob, EnvToken, EnvTransport, EnvTimeout}

// Transports are the values RDMARUN_TRANSPORT may take.
var Transports = []string{"auto", "shm", "tcp", "ibv"}

// MaxSize is the largest job (docs/env.md).
const MaxSize = 1 << 16

// rdmarunOwn are the variables only rdmarun sets. The others
// (RDMARUN_ADDR, _TOKEN, _TRANSPORT, _TIMEOUT) are also passed by hand to
// ranks of other launchers (mpirun -x), so they alone do not mean rdmarun.
var rdmarunOwn = []string{EnvRank, EnvSize, EnvLocalRank, EnvLocalSize, EnvJob}

func rdmarunPresent(env LookupEnv) bool {
	for _, v := range rdmarunOwn {
		if _, ok := env(v); ok {
			return true
		}
	}
	return false
}

func parseRdmarun(env LookupEnv) (Job, error) {
	const who = "rdmarun"
	var j Job
	// Every variable must be set: report all the missing ones at once, so
	// that a half-set environment is fixed in one go.
	var missing []string
	for _, v := range RdmarunVars {
		if _, ok := env(v); !ok {
			missing = append(missing, v)
		}
	}
	if len(missing) == 1 {
		return j, &Error{Launcher: who, Var: missing[0], Unset: true, Detail: "rdmarun sets every RDMARUN_* variable; see docs/env.md"}
	}
	if len(missing) > 1 {
		return j, &Error{Launcher: who, Var: strings.Join(missing, ", "), Unset: true,
			Detail: fmt.Sprintf("%d of the %d RDMARUN_* variables are missing; see docs/env.md", len(missing), len(RdmarunVars))}
	}
	get := func(k string) string { v, _ := env(k); return v }
	bad := func(k, detail string) error { return &Error{Launcher: who, Var: k, Value: get(k), Detail: detail} }

	var err error
	if j.Size, err = Decimal(get(EnvSize)); err != nil {
		return j, bad(EnvSize, err.Error())
	}
	if j.Size < 1 || j.Size > MaxSize {
		return j, bad(EnvSize, fmt.Sprintf("out of range 1..%d", MaxSize))
	}
	if j.Rank, err = Decimal(get(EnvRank)); err != nil {
		return j, bad(EnvRank, err.Error())
	}
	if j.Rank >= j.Size {
		return j, bad(EnvRank, fmt.Sprintf("out of range [0, %d) (%s=%d)", j.Size, EnvSize, j.Size))
	}
	if j.LocalSize, err = Decimal(get(EnvLocalSize)); err != nil {
		return j, bad(EnvLocalSize, err.Error())
	}
	if j.LocalSize < 1 || j.LocalSize > j.Size {
		return j, bad(EnvLocalSize, fmt.Sprintf("out of range 1..%d (%s=%d)", j.Size, EnvSize, j.Size))
	}
	if j.LocalRank, err = Decimal(get(EnvLocalRank)); err != nil {
		return j, bad(EnvLocalRank, err.Error())
	}
	if j.LocalRank >= j.LocalSize {
		return j, bad(EnvLocalRank, fmt.Sprintf("out of range [0, %d) (%s=%d)", j.LocalSize, EnvLocalSize, j.LocalSize))
	}

	j.Addr = get(EnvAddr)
	host, port, err := net.SplitHostPort(j.Addr)
	if err != nil {
		return j, bad(EnvAddr, "not host:port (IPv6 in brackets: [fd00::1]:41234)")
	}
	if host == "" {
		return j, bad(EnvAddr, "empty host")
	}
	if p, err := Decimal(port); err != nil || p < 1 || p > 65535 {
		return j, bad(EnvAddr, fmt.Sprintf("port %q is not in 1..65535", port))
	}

	j.JobID = get(EnvJob)
	if j.JobID == "" || len(j.JobID) > 64 || strings.IndexFunc(j.JobID, func(r rune) bool {
		return !(r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		return j, bad(EnvJob, "want 1 to 64 characters of [0-9A-Za-z._-]")
	}

	tok := get(EnvToken)
	j.Token, err = hex.DecodeString(tok)
	if err != nil || len(j.Token) != 32 {
		// Never echo the secret, not even a malformed one.
		return j, &Error{Launcher: who, Var: EnvToken, Value: fmt.Sprintf("<%d characters, not shown>", len(tok)),
			Detail: "want 64 hex digits (32 bytes)"}
	}
	j.Secrets = []string{EnvToken}

	j.Transport = get(EnvTransport)
	if !slices.Contains(Transports, j.Transport) {
		return j, bad(EnvTransport, fmt.Sprintf("want one of %s", strings.Join(Transports, ", ")))
	}

	j.Timeout, err = time.ParseDuration(get(EnvTimeout))
	if err != nil {
		return j, bad(EnvTimeout, "not a Go duration (2m0s, 45s)")
	}
	if j.Timeout <= 0 {
		return j, bad(EnvTimeout, "must be positive")
	}
	return j, nil
}

// Decimal parses a non-negative decimal integer: digits only, no sign, no
// spaces, as the contract writes them.
func Decimal(s string) (int, error) {
	if s == "" {
		return 0, errors.New("empty, want a decimal integer")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, errors.New("not a decimal integer")
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New("too large")
	}
	return n, nil
}
