package launch

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
)

// UsageError is a mistake on the command line or in a hostfile: rdmarun
// prints it with a hint and exits with status 2 without starting anything.
type UsageError struct {
	Msg string
}

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

// IsUsage reports whether err is (or wraps) a *UsageError.
func IsUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u)
}

// ErrHelp is returned by ParseArgs for -h / --help.
var ErrHelp = errors.New("help requested")

// BindPolicy says how local ranks are pinned to CPUs.
type BindPolicy string

const (
	BindNone BindPolicy = "none"
	BindCore BindPolicy = "core"
	// BindAuto (the default) binds as Open MPI does by default: a core
	// per rank for up to two ranks on a host, a socket per rank above,
	// none when the ranks outnumber the host's CPUs (see autoBind).
	BindAuto BindPolicy = "auto"
)

// parseBind reads --bind-to's value. Open MPI's qualifier
// ":overload-allowed" is taken after core, so that an mpirun command line
// runs as it is: rdmarun's core pins ranks that outnumber the CPUs
// already, which Open MPI does only with the qualifier.
func parseBind(value string) (BindPolicy, error) {
	base, qual, qualified := strings.Cut(value, ":")
	policy := BindPolicy(base)
	switch policy {
	case BindNone, BindCore, BindAuto:
	default:
		return "", errors.New("want auto, core or none")
	}
	if qualified && (policy != BindCore || qual != "overload-allowed") {
		return "", errors.New("the only qualifier taken is core:overload-allowed")
	}
	return policy, nil
}

// Transports accepted by --transport and RDMARUN_TRANSPORT.
var Transports = []string{"auto", "shm", "tcp", "ibv"}

// EnvVar is one -x VAR[=VALUE] setting, resolved: Value is taken from
// rdmarun's own environment when the option gave only a name.
type EnvVar struct {
	Name, Value string
}

// Defaults.
const (
	DefaultGrace          = 3 * time.Second
	DefaultConnectTimeout = 2 * time.Minute
)

// Args is the parsed command line, before hosts are read and mapped.
type Args struct {
	NP             int
	HostLists      []string // each --host value, in order
	Hostfile       string
	Env            []EnvVar
	WorkDir        string
	Oversubscribe  bool
	BindTo         BindPolicy
	TagOutput      bool
	Timeout        time.Duration // whole job; 0 = none
	ConnectTimeout time.Duration // RDMARUN_TIMEOUT
	Grace          time.Duration // between SIGTERM and SIGKILL when stopping ranks
	Transport      string
	LaunchAgent    string
	Iface          string
	Verbose        bool
	NoStdin        bool // --stdin none: rank 0 gets an empty stdin
	NoSrun         bool // --no-srun: local ranks even inside a Slurm allocation
	KeepGoing      bool // --keep-going: a rank's failure does not stop the others
	Program        string
	ProgramArgs    []string
}

// Usage is the help text.
const Usage = `usage: rdmarun -np N [options] PROGRAM [ARGS...]
       rdmarun status [--job ID]    (which operation each rank of a running job is in)

Starts N ranks of PROGRAM and hands each the RDMARUN_* environment
(docs/env.md). PROGRAM is an executable, or a Go package directory
(./examples/hello), which rdmarun builds first. Inside a Slurm allocation
(SLURM_JOB_ID set) without --host or --hostfile, ranks are started with
srun on the allocated nodes.

options:
  -np, -n N               number of ranks (required)
  --host, -H LIST         hosts with slots: a:2,b:2 (a host without :N has 1 slot)
  --hostfile FILE         Open MPI hostfile: "host slots=N [max_slots=M]" per line
  --oversubscribe         allow more ranks than slots on the given hosts
  -x VAR[=VALUE]          set VAR in every rank (VALUE defaults to rdmarun's own)
  --wdir DIR              working directory of every rank
  --bind-to auto|core|none  pin ranks to CPUs: auto (default) pins up to 2 ranks per host to
                          a core each, more to a socket each, and leaves ranks that
                          outnumber the CPUs unbound; core pins each rank to one core
                          (core:overload-allowed, Open MPI's spelling, is core)
  --tag-output            prefix every output line with [rank]
  --timeout DURATION      stop the job after DURATION (e.g. 90s, 10m; a number is seconds)
  --connect-timeout DUR   how long ranks may take to join and connect (RDMARUN_TIMEOUT, default 2m)
  --grace DURATION        wait between SIGTERM and SIGKILL when stopping ranks (default 3s)
  --keep-going            when a rank exits non-zero or dies, let the others run on (for
                          programs that recover with comm's Shrink); rdmarun still exits
                          with the first failed rank's status
  --transport T           auto|shm|tcp|ibv (RDMARUN_TRANSPORT, default auto)
  --launch-agent CMD      how to start ranks on other hosts (default "ssh -T -x -o BatchMode=yes {host}")
  --iface SPEC            interfaces/addresses for the rendezvous when hosts are remote:
                          names (eth0), prefixes (en*), CIDRs (10.0.0.0/8), ^exclusions
  --stdin 0|none          who reads rdmarun's stdin: rank 0 (default) or nobody
  --no-srun               inside a Slurm allocation, start ranks here instead of with srun
  -v, --verbose           say what rdmarun does
  -h, --help              this text
`

// ParseArgs parses rdmarun's command line (without the program name),
// mpirun-style: options take one or two dashes, values follow as the next
// word or after '='; the first word that is not an option is PROGRAM and
// everything after it belongs to PROGRAM. "--" ends the options.
// getenv resolves -x VAR without a value; nil means os.LookupEnv.
func ParseArgs(argv []string, getenv func(string) (string, bool)) (*Args, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	a := &Args{BindTo: BindAuto, Transport: "auto", Grace: DefaultGrace, ConnectTimeout: DefaultConnectTimeout}
	seen := map[string]bool{}
	i := 0
	for i < len(argv) {
		w := argv[i]
		if w == "--" {
			i++
			break
		}
		if !strings.HasPrefix(w, "-") || w == "-" {
			break
		}
		name := strings.TrimLeft(w, "-")
		value, hasValue := "", false
		if k, v, ok := strings.Cut(name, "="); ok {
			name, value, hasValue = k, v, true
		}
		w, _, _ = strings.Cut(w, "=") // the option as typed, for messages
		spec, ok := optionSpecs[name]
		if !ok {
			return nil, usagef("unknown option %s", w)
		}
		if spec.canon != "x" && spec.canon != "host" && seen[spec.canon] {
			return nil, usagef("option %s given twice", w)
		}
		seen[spec.canon] = true
		i++
		if !spec.takesValue {
			if hasValue {
				return nil, usagef("option %s takes no value", w)
			}
			switch spec.canon {
			case "oversubscribe":
				a.Oversubscribe = true
			case "tag-output":
				a.TagOutput = true
			case "verbose":
				a.Verbose = true
			case "no-srun":
				a.NoSrun = true
			case "keep-going":
				a.KeepGoing = true
			case "help":
				return nil, ErrHelp
			}
			continue
		}
		if !hasValue {
			if i >= len(argv) {
				return nil, usagef("option %s needs a value", w)
			}
			value = argv[i]
			i++
		}
		if err := a.set(spec.canon, w, value, getenv); err != nil {
			return nil, err
		}
	}
	if i >= len(argv) {
		return nil, usagef("missing PROGRAM")
	}
	a.Program = argv[i]
	a.ProgramArgs = append([]string{}, argv[i+1:]...)
	if a.Program == "" {
		return nil, usagef("missing PROGRAM (empty word)")
	}
	if !seen["np"] {
		return nil, usagef("missing -np N (the number of ranks)")
	}
	if len(a.HostLists) > 0 && a.Hostfile != "" {
		return nil, usagef("give either --host or --hostfile, not both")
	}
	return a, nil
}

type optionSpec struct {
	canon      string
	takesValue bool
}

var optionSpecs = map[string]optionSpec{
	"np": {"np", true}, "n": {"np", true},
	"host": {"host", true}, "H": {"host", true}, "hosts": {"host", true},
	"hostfile": {"hostfile", true}, "machinefile": {"hostfile", true},
	"x":    {"x", true},
	"wdir": {"wdir", true}, "cwd": {"wdir", true},
	"oversubscribe":   {"oversubscribe", false},
	"bind-to":         {"bind-to", true},
	"tag-output":      {"tag-output", false},
	"timeout":         {"timeout", true},
	"connect-timeout": {"connect-timeout", true},
	"grace":           {"grace", true},
	"transport":       {"transport", true},
	"launch-agent":    {"launch-agent", true},
	"iface":           {"iface", true}, "if": {"iface", true},
	"stdin":      {"stdin", true},
	"no-srun":    {"no-srun", false},
	"keep-going": {"keep-going", false},
	"v":          {"verbose", false}, "verbose": {"verbose", false},
	"h": {"help", false}, "help": {"help", false},
}

func (a *Args) set(canon, word, value string, getenv func(string) (string, bool)) error {
	switch canon {
	case "np":
		n, err := strconv.Atoi(value)
		if err != nil || n < 1 {
			return usagef("%s %q: want a positive number of ranks", word, value)
		}
		if n > bootstrap.MaxSize {
			return usagef("%s %d: at most %d ranks", word, n, bootstrap.MaxSize)
		}
		a.NP = n
	case "host":
		if strings.TrimSpace(value) == "" {
			return usagef("%s: empty host list", word)
		}
		a.HostLists = append(a.HostLists, value)
	case "hostfile":
		a.Hostfile = value
	case "x":
		name, val, hasVal := strings.Cut(value, "=")
		if !validEnvName(name) {
			return usagef("-x %q: %q is not a valid environment variable name", value, name)
		}
		if strings.HasPrefix(name, "RDMARUN_") {
			return usagef("-x %s: RDMARUN_* variables are set by rdmarun itself (use its options)", name)
		}
		if !hasVal {
			v, ok := getenv(name)
			if !ok {
				return usagef("-x %s: %s is not set in rdmarun's environment (use -x %s=VALUE)", name, name, name)
			}
			val = v
		}
		for i := range a.Env {
			if a.Env[i].Name == name {
				a.Env[i].Value = val
				return nil
			}
		}
		a.Env = append(a.Env, EnvVar{name, val})
	case "wdir":
		if value == "" {
			return usagef("%s: empty directory", word)
		}
		a.WorkDir = value
	case "bind-to":
		policy, err := parseBind(value)
		if err != nil {
			return usagef("%s %q: %v", word, value, err)
		}
		a.BindTo = policy
	case "timeout", "connect-timeout", "grace":
		d, err := ParseDuration(value)
		if err != nil {
			return usagef("%s %q: %v", word, value, err)
		}
		switch canon {
		case "timeout":
			if d <= 0 {
				return usagef("%s %q: want a positive duration", word, value)
			}
			a.Timeout = d
		case "connect-timeout":
			if d <= 0 {
				return usagef("%s %q: want a positive duration", word, value)
			}
			a.ConnectTimeout = d
		case "grace":
			a.Grace = d
		}
	case "transport":
		ok := false
		for _, t := range Transports {
			ok = ok || t == value
		}
		if !ok {
			return usagef("%s %q: want one of %s", word, value, strings.Join(Transports, ", "))
		}
		a.Transport = value
	case "launch-agent":
		if _, err := parseAgent(value); err != nil {
			return usagef("%s %q: %v", word, value, err)
		}
		a.LaunchAgent = value
	case "iface":
		a.Iface = value
	case "stdin":
		switch value {
		case "0", "rank0":
			a.NoStdin = false
		case "none":
			a.NoStdin = true
		default:
			return usagef("%s %q: want 0 (rank 0 reads rdmarun's stdin) or none", word, value)
		}
	}
	return nil
}

// ParseDuration accepts a Go duration ("90s", "1m30s") or a plain number
// of seconds ("90", "0.5"), as timeout(1) and mpirun do.
func ParseDuration(s string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 || f > 1e9 {
			return 0, fmt.Errorf("seconds out of range")
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("not a duration (want e.g. 30s, 5m or a number of seconds)")
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration")
	}
	return d, nil
}

func validEnvName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
