package launch

import (
	"fmt"
	"path/filepath"
	"strings"
)

// DefaultAgent starts remote ranks over OpenSSH. -T: no terminal (output
// stays two clean streams), -x: no X11, BatchMode: fail instead of asking
// for a password nobody can type.
const DefaultAgent = "ssh -T -x -o BatchMode=yes {host}"

// agent is a parsed --launch-agent template.
type agent struct {
	words []string
	// shellMode: the agent hands its arguments to a remote login shell as
	// one command line (ssh, rsh), so the remote command is passed as a
	// single quoted string. Otherwise the agent execs its arguments (ip
	// netns exec, nsenter, docker exec), and the command is passed as the
	// words "sh" "-c" SCRIPT.
	shellMode bool
	// endsInShell: the template already ends in "sh -c" (or bash -c), so
	// only the script is appended.
	endsInShell bool
}

// parseAgent splits a launch-agent template into words, honouring single
// quotes, double quotes and backslashes as a POSIX shell does (no
// expansions). {host} in any word is replaced by the host name; a
// template without {host} gets the host appended as its own word, as
// with Open MPI's rsh agent ("ssh" means "ssh HOST COMMAND").
func parseAgent(tmpl string) (*agent, error) {
	words, err := splitWords(tmpl)
	if err != nil {
		return nil, err
	}
	if len(words) == 0 {
		return nil, fmt.Errorf("empty launch agent")
	}
	hasHost := false
	for _, w := range words {
		hasHost = hasHost || strings.Contains(w, "{host}")
	}
	if !hasHost {
		words = append(words, "{host}")
	}
	a := &agent{words: words}
	for _, w := range words {
		switch filepath.Base(w) {
		case "ssh", "rsh", "oarsh", "autossh":
			a.shellMode = true
		}
	}
	if n := len(words); !a.shellMode && n >= 2 && words[n-1] == "-c" {
		switch filepath.Base(words[n-2]) {
		case "sh", "bash", "dash", "ash", "ksh", "zsh", "busybox":
			a.endsInShell = true
		}
	}
	return a, nil
}

// command is the argv that runs script (a POSIX sh script on one line) on
// host.
func (a *agent) command(host, script string) []string {
	argv := make([]string, 0, len(a.words)+3)
	for _, w := range a.words {
		argv = append(argv, strings.ReplaceAll(w, "{host}", host))
	}
	switch {
	case a.shellMode:
		argv = append(argv, "sh -c "+shellQuote(script))
	case a.endsInShell:
		argv = append(argv, script)
	default:
		argv = append(argv, "sh", "-c", script)
	}
	return argv
}

// sshConfigQuery is the argv of "ssh ... -G host", which prints the
// configuration ssh would use for host (its real HostName after aliases)
// without connecting; nil if the agent is not plain ssh.
func (a *agent) sshConfigQuery(host string) []string {
	if !a.shellMode || filepath.Base(a.words[0]) != "ssh" {
		return nil
	}
	var argv []string
	for _, w := range a.words {
		if w == "{host}" {
			argv = append(argv, "-G", host)
			continue
		}
		if strings.Contains(w, "{host}") {
			return nil // user@{host} and the like: not worth second-guessing
		}
		argv = append(argv, w)
	}
	return argv
}

func splitWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unclosed ' in %q", s)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\\\"$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unclosed \" in %q", s)
			}
			inWord = true
		case c == '\\':
			if i+1 >= len(s) {
				return nil, fmt.Errorf("trailing \\ in %q", s)
			}
			i++
			cur.WriteByte(s[i])
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

// shellQuote quotes s as one word for a POSIX shell (and for csh, tcsh
// and fish, which read '...' the same way as long as there is no newline
// or '!' history expansion; the scripts rdmarun sends contain neither
// outside of user words).
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// pickCPU defines rdmarun_cpu N: the CPU a remote rank binds to, the
// (local rank mod N)'th of the CPUs it may run on (Cpus_allowed_list), not
// that CPU number itself: under a cpuset (a Slurm cgroup, a container,
// taskset) CPU 0 may not be allowed, and ranks of hosts sharing a machine
// must stay on their own CPUs. Without awk or /proc it falls back to the
// number.
const pickCPU = `rdmarun_cpu() { x=$(awk -v n="$RDMARUN_LOCAL_RANK" '/^Cpus_allowed_list:/ { k = 0; m = split($2, a, ","); for (i = 1; i <= m; i++) { if (split(a[i], r, "-") == 2) { lo = r[1] + 0; hi = r[2] + 0 } else { lo = a[i] + 0; hi = lo }; for (c = lo; c <= hi; c++) l[k++] = c }; if (k > 0) print l[n % k] }' /proc/self/status 2>/dev/null); [ -n "$x" ] && echo "$x" || echo $((RDMARUN_LOCAL_RANK % $1)); }; `

// remoteSpec is what the remote wrapper script needs to start one rank.
type remoteSpec struct {
	Rank       int
	Marker     string      // unique per job: "rdmarun-status-<job>"
	WorkDir    string      // cd here; "" = stay in the login directory
	StrictWdir bool        // a failing cd is an error (--wdir given); else best effort
	Env        [][2]string // exported before the program starts (RDMARUN_* except the token, -x)
	Argv       []string    // program and arguments
	Stdin      bool        // relay "d"/"p"/"e" lines to the program's stdin (rank 0)
	AutoProcs  bool        // set GOMAXPROCS when local ranks outnumber CPUs, unless set
	Bind       BindPolicy  // core: pin to CPU (local rank mod CPUs) with taskset; auto: so when the host has at most 2 ranks and a CPU each
	Grace      int         // seconds between TERM and KILL when rdmarun is gone
}

// remoteScript builds the POSIX sh script that runs one rank on a remote
// host, on one line so that any login shell passes it through intact.
//
// The launcher writes to the script's stdin: first the job token on a line
// of its own (so it never appears in a command line, which other users can
// read in /proc), then control lines:
//
//	d<text>  a line of rank 0's stdin      p<text>  the last, unterminated one
//	e        end of rank 0's stdin         s<SIG>   send signal SIG (INT, TERM, ...)
//
// A background watcher reads the control lines. When they end (the
// launcher closed the stream, died, or its ssh connection broke) the
// watcher sends TERM to the script's process group (with ssh, the
// session: the program and every child it left) and KILL after Grace
// seconds, so no remote process outlives its job even without a terminal
// to hang up.
//
// The program runs in the foreground: a non-interactive shell starts
// background commands with SIGINT ignored, which would make a forwarded
// Ctrl-C ineffective. The script traps INT/TERM/HUP itself (a caught
// signal is reset to the default in children) so that a signal for the
// group does not kill the script before it reports the exit status.
//
// When the program ends, the script writes "<Marker> <status>" to stderr,
// where the launcher picks it out of the stream: that is how it tells the
// program's status (128+N for a signal, as the shell reports it) from a
// failure of ssh or of the agent, which exit without writing it. Setup
// failures write "<Marker> notfound", "<Marker> wdir" or "<Marker> setup".
func remoteScript(s remoteSpec) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("M=%s; ", shellQuote(s.Marker))
	w(`IFS= read -r RDMARUN_TOKEN || { echo "rdmarun: rank %d: no token on stdin" >&2; exit 126; }; export RDMARUN_TOKEN; `, s.Rank)
	if s.WorkDir != "" {
		if s.StrictWdir {
			w(`cd -- %s || { printf '%%s wdir\n' "$M" >&2; exit 126; }; `, shellQuote(s.WorkDir))
		} else {
			w(`cd -- %s 2>/dev/null; `, shellQuote(s.WorkDir))
		}
	}
	for _, kv := range s.Env {
		w("export %s=%s; ", kv[0], shellQuote(kv[1]))
	}
	if s.AutoProcs {
		w(`if [ -z "${GOMAXPROCS+x}" ]; then c=$(nproc 2>/dev/null || echo 0); if [ "$c" -gt 0 ] && [ "$RDMARUN_LOCAL_SIZE" -gt "$c" ]; then g=$((c / RDMARUN_LOCAL_SIZE)); [ "$g" -ge 1 ] || g=1; export GOMAXPROCS=$g; fi; fi; `)
	}
	w("set --")
	for _, a := range s.Argv {
		w(" %s", shellQuote(a))
	}
	w("; ")
	w(`command -v -- "$1" >/dev/null 2>&1 || { printf '%%s notfound\n' "$M" >&2; exit 127; }; `)
	switch s.Bind {
	case BindCore:
		w("%s", pickCPU)
		w(`if command -v taskset >/dev/null 2>&1; then c=$(nproc); set -- taskset -c $(rdmarun_cpu $c) "$@"; else echo "rdmarun: warning: taskset not found on $(hostname), rank %d is not bound" >&2; fi; `, s.Rank)
	case BindAuto:
		// autoBind's core case; a remote host's ranks are not bound to
		// sockets. Without taskset they stay unbound, silently: nobody
		// asked for a binding.
		w("%s", pickCPU)
		w(`c=$(nproc 2>/dev/null || echo 0); if [ "$RDMARUN_LOCAL_SIZE" -le 2 ] && [ "$RDMARUN_LOCAL_SIZE" -le "$c" ] && command -v taskset >/dev/null 2>&1; then set -- taskset -c $(rdmarun_cpu $c) "$@"; fi; `)
	}
	w("exec 3<&0; ")
	if s.Stdin {
		w(`d=$(mktemp -d "${TMPDIR:-/tmp}/rdmarun.XXXXXX") && mkfifo "$d/in" || { printf '%%s setup\n' "$M" >&2; exit 126; }; `)
	}
	// From here the script's own stderr is /dev/null (dash reports a
	// foreground command killed by a signal as "Terminated" on it); the
	// program and the status line use fd 5, the real stderr.
	w("exec 5>&2 2>/dev/null; trap : INT TERM HUP; ")
	// The watcher. Its stdin would be /dev/null (asynchronous list), hence
	// the explicit <&3.
	w("( ")
	if s.Stdin {
		w(`exec 4>"$d/in"; rm -rf "$d"; `)
	}
	w(`while IFS= read -r l; do case $l in `)
	if s.Stdin {
		w(`d*) printf '%%s\n' "${l#?}" >&4;; p*) printf '%%s' "${l#?}" >&4;; e) exec 4>&-;; `)
	}
	w(`s*) trap '' TERM; kill -s "${l#?}" 0; trap - TERM;; esac; done; `)
	w(`trap '' TERM; kill -s TERM 0; sleep %d; kill -s KILL 0 ) <&3 >/dev/null 2>&1 5>&- & `, s.Grace)
	if s.Stdin {
		w(`( exec "$@" <"$d/in" 3<&- 2>&5 5>&- ); st=$?; `)
		// If the program never opened the fifo, the watcher is still
		// blocked opening it for writing: an open for reading and
		// writing (which never blocks) releases it.
		w(`[ -p "$d/in" ] && : <>"$d/in"; rm -rf "$d"; `)
	} else {
		w(`( exec "$@" </dev/null 3<&- 2>&5 5>&- ); st=$?; `)
	}
	w(`printf '%%s %%s\n' "$M" "$st" >&5; trap '' TERM; kill -s TERM 0 2>/dev/null; exit "$st"`)
	return b.String()
}

// copyScript stores its stdin as an executable file named name in a new
// temporary directory on the remote host and prints the file's path.
func copyScript(name string) string {
	return `d=$(mktemp -d "${TMPDIR:-/tmp}/rdmarun.XXXXXX") && cat > "$d/` + name + `" && chmod 700 "$d/` + name + `" && printf '%s\n' "$d/` + name + `"`
}

// removeScript removes what copyScript made.
func removeScript(path string) string {
	return "rm -rf -- " + shellQuote(filepath.Dir(path))
}
