package launch

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/internal/affinity"
)

// Options configure one job: the parsed command line plus rdmarun's
// standard streams and the signals it forwards.
type Options struct {
	Args
	// Stdin is forwarded to rank 0; nil gives rank 0 an empty stdin.
	Stdin io.Reader
	// Stdout and Stderr receive the ranks' output and rdmarun's messages.
	Stdout, Stderr io.Writer
	// Getenv reads rdmarun's environment (SLURM_JOB_ID and the
	// allocation's variables); nil means os.LookupEnv.
	Getenv func(string) (string, bool)
	// Signals delivers SIGINT, SIGTERM, ... that rdmarun received; each is
	// forwarded to every rank and starts the job's end. A second one kills
	// the ranks at once. Nil: none.
	Signals <-chan os.Signal
}

// Exit statuses of rdmarun besides a failed rank's own.
const (
	ExitLaunch  = 1   // rdmarun could not start or reach a rank
	ExitUsage   = 2   // bad command line, hostfile, or program
	ExitTimeout = 124 // --timeout ended the job, as timeout(1)
)

// rank is one process of the job as rdmarun sees it: a local process, or
// the launch agent (ssh, ...) that runs it on another host.
type rank struct {
	Placement
	local bool
	cmd   *exec.Cmd
	pid   int // pid and process group of the local process or agent
	// ctl is the write end of the rank's stdin: the control stream of a
	// remote wrapper, or local rank 0's input. It is set before any
	// goroutine of the rank starts and never reassigned.
	ctl     *os.File
	ctlMu   sync.Mutex // serialises whole lines on ctl
	ctlOnce sync.Once

	stderrSink *lineSink
	outputs    sync.WaitGroup

	mu       sync.Mutex
	reaped   bool
	status   string // remote: what the wrapper reported after the marker
	state    *os.ProcessState
	startErr error
}

type job struct {
	o       Options
	out     *output
	id      string
	marker  string
	token   []byte
	addr    string
	agent   *agent
	ranks   []*rank
	events  chan *rank
	program string            // local path or name of the program
	remote  map[string]string // host → program path there, when copied
	workDir string
	slurm   string // the Slurm job id when ranks start with srun
}

// Run runs one job to its end and returns rdmarun's exit status: 0 when
// every rank exited 0. The job's messages ("rank 2 on host a exited with
// code 3") go to o.Stderr. A non-nil error means the job did not start:
// IsUsage(err) for bad input (exit status ExitUsage), anything else
// ExitLaunch.
func Run(ctx context.Context, o Options) (int, error) {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	if o.Getenv == nil {
		o.Getenv = os.LookupEnv
	}
	j := &job{o: o, out: &output{tag: o.TagOutput, stdout: o.Stdout, stderr: o.Stderr}, remote: map[string]string{}}
	return j.run(ctx)
}

func (j *job) logf(format string, args ...any) {
	if j.o.Verbose {
		j.out.printf(format, args...)
	}
}

func (j *job) run(ctx context.Context) (int, error) {
	hosts, implicit, err := j.hosts(ctx)
	if err != nil {
		return ExitUsage, err
	}
	placements, err := MapRanks(hosts, j.o.NP, j.o.Oversubscribe || implicit)
	if err != nil {
		if j.slurm != "" {
			err = usagef("%v (inside Slurm allocation %s the slots are its tasks: ask salloc/sbatch for more with -n, or start the ranks here with --no-srun)", err, j.slurm)
		}
		return ExitUsage, err
	}
	// Only hosts that received ranks matter from here on.
	used := map[string]bool{}
	for _, p := range placements {
		used[p.Host] = true
	}
	localHosts := map[string]bool{}
	var remoteHosts []string
	hasLocal := false
	allHere := true // every used host is this machine
	for _, h := range hosts {
		if used[h.Name] && !isLocalHost(h.Name) {
			allHere = false
		}
		switch {
		case !used[h.Name]:
		case isLocalHost(h.Name) && j.slurm == "":
			localHosts[h.Name] = true
			hasLocal = true
		default:
			remoteHosts = append(remoteHosts, h.Name)
		}
	}
	if len(remoteHosts) > 0 {
		tmpl := j.o.LaunchAgent
		if tmpl == "" {
			tmpl = DefaultAgent
		}
		if j.slurm != "" {
			tmpl = slurmAgent
			nodes := map[string]int{}
			var order []string
			for _, p := range placements {
				if nodes[p.Host] == 0 {
					order = append(order, p.Host)
				}
				nodes[p.Host]++
			}
			var desc []string
			for _, h := range order {
				desc = append(desc, fmt.Sprintf("%s:%d", h, nodes[h]))
			}
			// Say so: users expect ssh or local processes otherwise.
			j.out.printf("inside Slurm allocation %s: starting %s with srun on %s (--no-srun to start them here)",
				j.slurm, plural(len(placements), "rank"), strings.Join(desc, ","))
		}
		if j.agent, err = parseAgent(tmpl); err != nil {
			return ExitUsage, usagef("--launch-agent %q: %v", tmpl, err)
		}
		if _, err := exec.LookPath(j.agent.words[0]); err != nil {
			return ExitUsage, usagef("launch agent %q for hosts %s not found: %v", j.agent.words[0], strings.Join(remoteHosts, ","), err)
		}
		if err := j.checkHosts(ctx, remoteHosts, hosts); err != nil {
			return ExitUsage, err
		}
	}

	cwd, err := os.Getwd()
	if err != nil {
		return ExitLaunch, fmt.Errorf("working directory: %v", err)
	}
	j.workDir = cwd
	if j.o.WorkDir != "" {
		j.workDir = j.o.WorkDir
		if !filepath.IsAbs(j.workDir) {
			j.workDir = filepath.Join(cwd, j.workDir)
		}
		if hasLocal {
			if st, err := os.Stat(j.workDir); err != nil || !st.IsDir() {
				return ExitUsage, usagef("--wdir %s: not a directory", j.o.WorkDir)
			}
		}
	}

	built, cleanupBuild, err := j.resolveProgram(hasLocal)
	if err != nil {
		if IsUsage(err) {
			return ExitUsage, err
		}
		return ExitLaunch, err
	}
	defer cleanupBuild()

	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return ExitLaunch, err
	}
	j.token = raw
	idb := make([]byte, 8)
	rand.Read(idb)
	j.id = hex.EncodeToString(idb)
	j.marker = "rdmarun-status-" + j.id

	listen := "127.0.0.1:0"
	if len(remoteHosts) > 0 && !allHere {
		listen, err = selectAddress(j.o.Iface, remoteHosts)
		if err != nil {
			if IsUsage(err) {
				return ExitUsage, err
			}
			return ExitLaunch, fmt.Errorf("choose the rendezvous address (see --iface): %w", err)
		}
	}
	logger := slog.New(slog.DiscardHandler)
	if j.o.Verbose {
		logger = slog.New(slog.NewTextHandler(j.o.Stderr, nil))
	}
	srv, err := bootstrap.NewServer(bootstrap.ServerOptions{Listen: listen, Token: j.token, Size: j.o.NP, Logger: logger})
	if err != nil {
		return ExitLaunch, fmt.Errorf("start the rendezvous server: %w", err)
	}
	defer srv.Close()
	j.addr = srv.Addr()
	j.logf("job %s: rendezvous at %s, %d ranks", j.id, j.addr, j.o.NP)

	if built && len(remoteHosts) > 0 {
		defer j.removeCopies()
		if err := j.copyProgram(ctx, remoteHosts); err != nil {
			return ExitLaunch, err
		}
	}

	j.events = make(chan *rank, len(placements))
	j.ranks = make([]*rank, len(placements))
	cpus, _ := affinity.CPUs() // none known (an error): no binding, see start
	for i, p := range placements {
		j.ranks[i] = &rank{Placement: p, local: localHosts[p.Host]}
	}
	started := 0
	var startFail error
	for _, r := range j.ranks {
		if err := j.start(r, cpus); err != nil {
			startFail = err
			break
		}
		started++
	}
	return j.supervise(ctx, srv, started, startFail), nil
}

// hosts returns the hosts from --host or --hostfile; inside a Slurm
// allocation the allocation's nodes (and j.slurm is set); else just this
// machine with as many slots as ranks (implicit: mpirun-style
// oversubscription of the local machine needs no flag).
func (j *job) hosts(ctx context.Context) ([]Host, bool, error) {
	switch {
	case len(j.o.HostLists) > 0:
		var all []Host
		for _, l := range j.o.HostLists {
			hs, err := ParseHostList(l)
			if err != nil {
				return nil, false, err
			}
			for _, h := range hs {
				all = addHost(all, h)
			}
		}
		return all, false, nil
	case j.o.Hostfile != "":
		hs, err := ReadHostfile(j.o.Hostfile)
		return hs, false, err
	}
	if id, ok := j.o.Getenv("SLURM_JOB_ID"); ok && id != "" && !j.o.NoSrun {
		if _, err := exec.LookPath("srun"); err != nil {
			return nil, false, usagef("inside Slurm allocation %s, but srun is not on PATH (add --no-srun to start the ranks here)", id)
		}
		hs, err := slurmHosts(ctx, j.o.Getenv)
		if err != nil {
			return nil, false, usagef("%v", err)
		}
		j.slurm = id
		return hs, false, nil
	}
	return []Host{{Name: "localhost", Slots: j.o.NP, Origin: "default"}}, true, nil
}

// checkHosts finds unknown host names before anything starts, when the
// agent is ssh: "ssh -G" resolves ssh_config aliases without connecting,
// then the name ssh would connect to is looked up.
func (j *job) checkHosts(ctx context.Context, remote []string, hosts []Host) error {
	origin := map[string]string{}
	for _, h := range hosts {
		origin[h.Name] = h.Origin
	}
	for _, h := range remote {
		q := j.agent.sshConfigQuery(h)
		if q == nil {
			return nil
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		out, err := exec.CommandContext(cctx, q[0], q[1:]...).Output()
		cancel()
		if err != nil {
			continue // an ssh without -G: let the launch say what is wrong
		}
		name := h
		for _, line := range strings.Split(string(out), "\n") {
			if k, v, ok := strings.Cut(line, " "); ok && k == "hostname" {
				name = strings.TrimSpace(v)
			}
		}
		if net.ParseIP(name) != nil {
			continue
		}
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = net.DefaultResolver.LookupHost(lctx, name)
		cancel()
		if err != nil {
			var dnsErr *net.DNSError
			if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
				return usagef("unknown host %q (named in %s): no such host", h, origin[h])
			}
			return usagef("unknown host %q (named in %s): %v", h, origin[h], err)
		}
	}
	return nil
}

// resolveProgram builds a package directory, or checks that the program
// exists where it can be checked. built reports a binary made by rdmarun.
func (j *job) resolveProgram(hasLocal bool) (built bool, cleanup func(), err error) {
	p := j.o.Program
	cleanup = func() {}
	if isPackageDir(p) {
		j.logf("building %s", p)
		bin, tmp, err := buildPackage(p)
		if err != nil {
			return false, cleanup, err
		}
		j.program = bin
		return true, func() { os.RemoveAll(tmp) }, nil
	}
	if strings.Contains(p, "/") {
		abs, err := filepath.Abs(p)
		if err != nil {
			return false, cleanup, err
		}
		j.program = abs
		if hasLocal {
			st, err := os.Stat(abs)
			switch {
			case err != nil:
				return false, cleanup, usagef("program %s not found: %v", p, errors.Unwrap(err))
			case st.IsDir():
				return false, cleanup, usagef("program %s is a directory without Go files", p)
			case st.Mode()&0o111 == 0:
				return false, cleanup, usagef("program %s is not executable", p)
			}
		}
		return false, cleanup, nil
	}
	j.program = p
	if hasLocal {
		path, err := exec.LookPath(p)
		if err != nil {
			return false, cleanup, usagef("program %q not found in PATH", p)
		}
		j.program = path
	}
	return false, cleanup, nil
}

// copyProgram sends the built program to every remote host through the
// launch agent's stdin, into a fresh temporary directory there, to all
// hosts at once.
func (j *job) copyProgram(ctx context.Context, hosts []string) error {
	name := filepath.Base(j.program)
	paths := make([]string, len(hosts))
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paths[i], errs[i] = j.copyTo(ctx, h, name)
		}()
	}
	wg.Wait()
	for i, h := range hosts {
		if paths[i] != "" {
			j.remote[h] = paths[i]
			j.logf("copied %s to %s:%s", name, h, paths[i])
		}
	}
	return errors.Join(errs...)
}

func (j *job) copyTo(ctx context.Context, host, name string) (string, error) {
	f, err := os.Open(j.program)
	if err != nil {
		return "", err
	}
	defer f.Close()
	argv := j.agent.command(host, copyScript(name))
	cctx, cancel := context.WithTimeout(ctx, j.o.ConnectTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	cmd.Stdin = f
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	path := strings.TrimSpace(string(out))
	if err != nil || !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "\n") {
		return "", fmt.Errorf("cannot copy %s to host %s (%s): %v: %s",
			name, host, strings.Join(argv[:len(argv)-1], " "), err, lastLine(stderr.String()))
	}
	return path, nil
}

// removeCopies removes the copies of the program from the remote hosts.
func (j *job) removeCopies() {
	var wg sync.WaitGroup
	for h, path := range j.remote {
		wg.Add(1)
		go func() {
			defer wg.Done()
			argv := j.agent.command(h, removeScript(path))
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := exec.CommandContext(ctx, argv[0], argv[1:]...).Run(); err != nil {
				j.out.printf("could not remove %s on host %s: %v", filepath.Dir(path), h, err)
			}
		}()
	}
	wg.Wait()
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// rankEnv is the RDMARUN_* contract of docs/env.md, without the token.
func (j *job) rankEnv(r *rank) [][2]string {
	return [][2]string{
		{"RDMARUN_RANK", strconv.Itoa(r.Rank)},
		{"RDMARUN_SIZE", strconv.Itoa(j.o.NP)},
		{"RDMARUN_LOCAL_RANK", strconv.Itoa(r.LocalRank)},
		{"RDMARUN_LOCAL_SIZE", strconv.Itoa(r.LocalSize)},
		{"RDMARUN_ADDR", j.addr},
		{"RDMARUN_JOB", j.id},
		{"RDMARUN_TRANSPORT", j.o.Transport},
		{"RDMARUN_TIMEOUT", j.o.ConnectTimeout.String()},
	}
}

func (j *job) userSetsGOMAXPROCS() bool {
	for _, e := range j.o.Env {
		if e.Name == "GOMAXPROCS" {
			return true
		}
	}
	return false
}

func (j *job) start(r *rank, cpus []int) error {
	var opened []*os.File // closed if the start fails
	pipe := func() (r, w *os.File, err error) {
		if r, w, err = os.Pipe(); err == nil {
			opened = append(opened, r, w)
		}
		return r, w, err
	}
	fail := func(err error) error {
		for _, f := range opened {
			f.Close()
		}
		return fmt.Errorf("could not start rank %d on host %s: %v", r.Rank, r.Host, err)
	}
	stdoutR, stdoutW, err := pipe()
	if err != nil {
		return fail(err)
	}
	stderrR, stderrW, err := pipe()
	if err != nil {
		return fail(err)
	}
	var cmd *exec.Cmd
	var ctlR *os.File
	var pin []int
	if r.local {
		cmd = exec.Command(j.program, j.o.ProgramArgs...)
		cmd.Dir = j.workDir
		cmd.Env = j.localEnv(r, len(cpus))
		policy := j.o.BindTo
		if policy == BindAuto {
			policy = autoBind(r.LocalSize, len(cpus))
		}
		if r.LocalRank == 0 {
			j.logf("%s", bindNote(j.o.BindTo, policy, r.Host, r.LocalSize, len(cpus)))
		}
		pin = pinSet(policy, r.LocalRank, cpus, sockets(policy, cpus))
		if r.Rank == 0 && j.o.Stdin != nil {
			if ctlR, r.ctl, err = pipe(); err != nil {
				return fail(err)
			}
		}
	} else {
		prog := j.program
		if p, ok := j.remote[r.Host]; ok {
			prog = p
		}
		env := j.rankEnv(r)
		for _, e := range j.o.Env {
			env = append(env, [2]string{e.Name, e.Value})
		}
		script := remoteScript(remoteSpec{
			Rank: r.Rank, Marker: j.marker,
			WorkDir: j.workDir, StrictWdir: j.o.WorkDir != "",
			Env:       env,
			Argv:      append([]string{prog}, j.o.ProgramArgs...),
			Stdin:     r.Rank == 0 && j.o.Stdin != nil,
			AutoProcs: !j.userSetsGOMAXPROCS(),
			Bind:      j.o.BindTo,
			Grace:     max(1, int((j.o.Grace+time.Second-1)/time.Second)),
		})
		argv := j.agent.command(r.Host, script)
		j.logf("rank %d on %s: %s", r.Rank, r.Host, strings.Join(argv[:len(argv)-1], " "))
		cmd = exec.Command(argv[0], argv[1:]...)
		if ctlR, r.ctl, err = pipe(); err != nil {
			return fail(err)
		}
		r.stderrSink = &lineSink{marker: []byte(j.marker), keep: 4, onMarker: func(s string) {
			r.mu.Lock()
			r.status = s
			r.mu.Unlock()
		}}
	}
	if ctlR != nil {
		cmd.Stdin = ctlR
	}
	cmd.Stdout = stdoutW
	cmd.Stderr = stderrW
	if r.stderrSink == nil {
		r.stderrSink = &lineSink{keep: 4}
	}
	if err := startProcess(cmd, pin); err != nil {
		return fail(err)
	}
	// The child's ends are the child's now.
	stdoutW.Close()
	stderrW.Close()
	if ctlR != nil {
		ctlR.Close()
	}
	r.cmd = cmd
	r.pid = cmd.Process.Pid
	r.outputs.Add(2)
	go func() { defer r.outputs.Done(); j.out.forward(stdoutR, false, r.Rank, nil); stdoutR.Close() }()
	go func() { defer r.outputs.Done(); j.out.forward(stderrR, true, r.Rank, r.stderrSink); stderrR.Close() }()
	if !r.local {
		// The token goes first on the wrapper's stdin, never in argv.
		r.ctlWrite([]byte(hex.EncodeToString(j.token)+"\n"), 5*time.Second)
	}
	if r.Rank == 0 && j.o.Stdin != nil {
		go j.relayStdin(r)
	}
	go j.wait(r)
	return nil
}

// localEnv is rdmarun's environment without RDMARUN_* (a nested rdmarun
// must not leak its job), with -x settings and the rank's RDMARUN_*.
func (j *job) localEnv(r *rank, ncpu int) []string {
	set := map[string]bool{}
	var env []string
	add := func(k, v string) {
		set[k] = true
		env = append(env, k+"="+v)
	}
	for _, e := range j.o.Env {
		add(e.Name, e.Value)
	}
	for _, kv := range j.rankEnv(r) {
		add(kv[0], kv[1])
	}
	add("RDMARUN_TOKEN", hex.EncodeToString(j.token))
	_, envHas := os.LookupEnv("GOMAXPROCS")
	if !j.userSetsGOMAXPROCS() && !envHas && ncpu > 0 && r.LocalSize > ncpu {
		// Ranks outnumber CPUs: one P each keeps Go's spinning schedulers
		// from fighting over the cores.
		add("GOMAXPROCS", strconv.Itoa(max(1, ncpu/r.LocalSize)))
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if set[k] || strings.HasPrefix(k, "RDMARUN_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// ctlWrite writes b whole to a rank's control stream (remote) or stdin
// pipe (local rank 0). timeout > 0 gives up when nobody reads for that
// long; 0 waits as long as it takes (input for a program that reads
// slowly), until ctlClose.
func (r *rank) ctlWrite(b []byte, timeout time.Duration) error {
	if r.ctl == nil {
		return os.ErrClosed
	}
	r.ctlMu.Lock()
	defer r.ctlMu.Unlock()
	var deadline time.Time
	if timeout > 0 {
		deadline = time.Now().Add(timeout)
	}
	r.ctl.SetWriteDeadline(deadline)
	_, err := r.ctl.Write(b)
	return err
}

// ctlClose closes the stream without waiting for a blocked writer, which
// then fails.
func (r *rank) ctlClose() {
	if r.ctl != nil {
		r.ctlOnce.Do(func() { r.ctl.Close() })
	}
}

// relayStdin copies rdmarun's stdin to rank 0: as is to a local rank, as
// "d"/"p"/"e" control lines to a remote one.
func (j *job) relayStdin(r *rank) {
	if r.local {
		buf := make([]byte, 32<<10)
		for {
			n, err := j.o.Stdin.Read(buf)
			if n > 0 {
				if r.ctlWrite(buf[:n], 0) != nil {
					return
				}
			}
			if err != nil {
				r.ctlClose()
				return
			}
		}
	}
	// A line longer than the buffer goes as several "p" pieces (text
	// without a newline), so memory stays bounded.
	br := bufio.NewReaderSize(j.o.Stdin, 32<<10)
	msg := make([]byte, 0, 32<<10+2)
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if line[len(line)-1] == '\n' {
				msg = append(append(msg[:0], 'd'), line...)
			} else {
				msg = append(append(append(msg[:0], 'p'), line...), '\n')
			}
			if r.ctlWrite(msg, 0) != nil {
				return
			}
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			r.ctlWrite([]byte("e\n"), 0)
			return
		}
	}
}

// wait follows one rank to its end. It learns of the exit without reaping,
// kills whatever the rank left in its process group while the zombie
// still holds the group id, then reaps and drains the output.
func (j *job) wait(r *rank) {
	if err := waitExited(r.pid); err == nil {
		killGroup(r.pid, syscall.SIGKILL)
	}
	r.mu.Lock()
	err := r.cmd.Wait()
	r.reaped = true
	r.state = r.cmd.ProcessState
	if r.state == nil {
		r.startErr = err
	}
	r.mu.Unlock()
	r.ctlClose()
	done := make(chan struct{})
	go func() { r.outputs.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		// Something that escaped the group still holds the pipes; the
		// forwarders end when it does.
	}
	j.events <- r
}

// signal delivers sig to a rank that has not been reaped: to the process
// group of a local rank; over the control stream to a remote one (from a
// goroutine: the stream may be busy with rank 0's input, and the caller
// must not wait). KILL for a remote rank closes the control stream (the
// wrapper there then kills the program) and kills the agent.
func (j *job) signal(r *rank, sig syscall.Signal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reaped || r.pid == 0 {
		return
	}
	if r.local {
		killGroup(r.pid, sig)
		return
	}
	if sig == syscall.SIGKILL {
		r.ctlClose()
		killGroup(r.pid, syscall.SIGKILL)
		return
	}
	go func() {
		if err := r.ctlWrite([]byte("s"+strings.TrimPrefix(signalName(sig), "SIG")+"\n"), 2*time.Second); err != nil {
			// The wrapper does not listen: signal the agent instead.
			r.mu.Lock()
			if !r.reaped {
				killGroup(r.pid, sig)
			}
			r.mu.Unlock()
		}
	}()
}

// outcome is how a rank ended, in words, and the exit status it implies.
type outcome struct {
	failed bool
	code   int
	text   string // "exited with code 3", "was killed by signal SIGKILL", ...
}

func (j *job) outcome(r *rank) outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	where := fmt.Sprintf("rank %d (host %s, pid %d)", r.Rank, r.Host, r.pid)
	if !r.local {
		where = fmt.Sprintf("rank %d (host %s)", r.Rank, r.Host)
	}
	if r.state == nil {
		return outcome{true, ExitLaunch, fmt.Sprintf("%s: %v", where, r.startErr)}
	}
	ws, _ := r.state.Sys().(syscall.WaitStatus)
	if r.local {
		if ws.Signaled() {
			return outcome{true, 128 + int(ws.Signal()), fmt.Sprintf("%s was killed by signal %s", where, signalName(ws.Signal()))}
		}
		if c := ws.ExitStatus(); c != 0 {
			return outcome{true, c, fmt.Sprintf("%s exited with code %d", where, c)}
		}
		return outcome{}
	}
	switch r.status {
	case "":
		agentStatus := fmt.Sprintf("exit code %d", ws.ExitStatus())
		if ws.Signaled() {
			agentStatus = "signal " + signalName(ws.Signal())
		}
		why := r.stderrSink.lastLine()
		if strings.Contains(why, "Could not resolve hostname") {
			return outcome{true, ExitLaunch, fmt.Sprintf("%s: unknown host %s: %s", where, r.Host, why)}
		}
		if why == "" {
			why = "no message"
		}
		if j.agent.shellMode && ws.ExitStatus() == 255 {
			return outcome{true, ExitLaunch, fmt.Sprintf("%s: cannot reach host %s with %s: %s", where, r.Host, j.agent.words[0], why)}
		}
		return outcome{true, ExitLaunch, fmt.Sprintf("%s: could not run it on host %s: the launch agent %s ended (%s) before the program reported: %s",
			where, r.Host, j.agent.words[0], agentStatus, why)}
	case "notfound":
		return outcome{true, 127, fmt.Sprintf("%s: program %s not found on host %s", where, j.programOn(r.Host), r.Host)}
	case "wdir":
		return outcome{true, ExitLaunch, fmt.Sprintf("%s: cannot change to --wdir %s on host %s", where, j.workDir, r.Host)}
	case "setup":
		return outcome{true, ExitLaunch, fmt.Sprintf("%s: could not set up stdin forwarding on host %s (mktemp/mkfifo failed)", where, r.Host)}
	}
	c, err := strconv.Atoi(r.status)
	if err != nil {
		return outcome{true, ExitLaunch, fmt.Sprintf("%s: garbled status %q from the remote wrapper", where, r.status)}
	}
	if c == 0 {
		return outcome{}
	}
	if c > 128 && c < 128+65 {
		// The shell reports death by signal N as 128+N.
		sig := syscall.Signal(c - 128)
		return outcome{true, c, fmt.Sprintf("%s was killed by signal %s (the remote shell reported status %d)", where, signalName(sig), c)}
	}
	return outcome{true, c, fmt.Sprintf("%s exited with code %d", where, c)}
}

func (j *job) programOn(host string) string {
	if p, ok := j.remote[host]; ok {
		return p
	}
	return j.program
}

// supervise runs the job's event loop until every started rank has ended
// and returns rdmarun's exit status.
//
// The first failure decides the status: a rank that exits non-zero or dies
// from a signal, a rank's Abort (which wins over the exits it provokes), a
// signal to rdmarun, --timeout, or a rank that could not start. From then
// on the job is stopping: every live rank gets SIGTERM (or the signal
// rdmarun received), and SIGKILL after the grace period.
func (j *job) supervise(ctx context.Context, srv *bootstrap.Server, running int, startFail error) int {
	var (
		code     = 0
		cause    string
		stopping bool
		causeIs  string // "rank", "abort", "signal", "timeout", "start", "output"
		killT    *time.Timer
		timeoutC <-chan time.Time
		aborts   = srv.Aborts()
		failRank = -1 // the rank whose exit was the first failure
	)
	defer func() {
		if killT != nil {
			killT.Stop()
		}
	}()
	live := func() int {
		n := 0
		for _, r := range j.ranks {
			r.mu.Lock()
			if r.pid != 0 && !r.reaped {
				n++
			}
			r.mu.Unlock()
		}
		return n
	}
	stop := func(sig syscall.Signal) {
		if stopping {
			return
		}
		stopping = true
		for _, r := range j.ranks {
			j.signal(r, sig)
		}
		killT = time.AfterFunc(j.o.Grace, func() {
			for _, r := range j.ranks {
				j.signal(r, syscall.SIGKILL)
			}
		})
	}
	fail := func(kind string, c int, msg string) {
		if causeIs != "" && causeIs != "kept" {
			return
		}
		causeIs, code, cause = kind, c, msg
		n := live()
		if n > 0 {
			j.out.printf("%s; stopping the other %s", msg, plural(n, "rank"))
		} else {
			j.out.printf("%s", msg)
		}
		stop(syscall.SIGTERM)
	}
	abortMsg := func(a bootstrap.AbortInfo) (int, string) {
		c := a.Code
		if c < 1 || c > 255 {
			c = 1
		}
		host := ""
		if a.Rank >= 0 && a.Rank < len(j.ranks) {
			host = fmt.Sprintf(" (host %s)", j.ranks[a.Rank].Host)
		}
		msg := fmt.Sprintf("rank %d%s called Abort(%d)", a.Rank, host, a.Code)
		if a.Reason != "" {
			msg += ": " + a.Reason
		}
		return c, msg
	}
	takeAbort := func() bool {
		select {
		case a, ok := <-aborts:
			if !ok {
				aborts = nil
				return false
			}
			c, msg := abortMsg(a)
			if causeIs == "rank" {
				// An Abort outranks the exits it caused.
				causeIs = ""
			}
			fail("abort", c, msg)
			return true
		default:
			return false
		}
	}
	if startFail != nil {
		fail("start", ExitLaunch, startFail.Error())
	}
	if j.o.Timeout > 0 {
		t := time.NewTimer(j.o.Timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	outClosed := j.out.closed()
	for running > 0 {
		select {
		case <-outClosed:
			// Nobody reads the job's output any more (rdmarun ... | head
			// -1): end it as SIGPIPE would end rdmarun, but with the ranks
			// stopped and the build directory removed.
			outClosed = nil
			if causeIs == "" {
				causeIs, code, cause = "output", 128+int(syscall.SIGPIPE), j.out.closedName()+" closed (broken pipe)"
				j.out.printf("%s; stopping %s", cause, plural(live(), "rank"))
			}
			stop(syscall.SIGTERM)
		case r := <-j.events:
			running--
			oc := j.outcome(r)
			if oc.failed {
				takeAbort()
				if !stopping && j.o.KeepGoing && (causeIs == "" || causeIs == "kept") {
					// --keep-going: the survivors may shrink and carry on.
					if causeIs == "" {
						causeIs, code, cause, failRank = "kept", oc.code, oc.text, r.Rank
					}
					j.out.printf("%s; --keep-going: leaving %s running", oc.text, plural(live(), "other rank"))
					continue
				}
				if !stopping {
					failRank = r.Rank
					text := oc.text
					// A survivor's exit: say where its failure began.
					if o, ok := findOrigin(srv.Failures()); ok && o.rank != r.Rank && slices.Contains(o.followers, r.Rank) {
						text += fmt.Sprintf(" after rank %d %s", o.rank, o.what())
					}
					fail("rank", oc.code, text)
				} else if j.o.Verbose {
					j.out.printf("%s", oc.text)
				}
			}
		case a, ok := <-aborts:
			if !ok {
				aborts = nil
				continue
			}
			c, msg := abortMsg(a)
			if causeIs == "rank" {
				causeIs = ""
			}
			fail("abort", c, msg)
		case sig := <-j.o.Signals:
			s, _ := sig.(syscall.Signal)
			if s == 0 {
				s = syscall.SIGTERM
			}
			if stopping {
				j.out.printf("%s again: killing the ranks now", signalName(s))
				for _, r := range j.ranks {
					j.signal(r, syscall.SIGKILL)
				}
				continue
			}
			causeIs, code, cause = "signal", 128+int(s), "interrupted by "+signalName(s)
			j.out.printf("%s; forwarding it to %s", cause, plural(live(), "rank"))
			stop(s)
		case <-timeoutC:
			if causeIs == "" || causeIs == "kept" {
				causeIs, code, cause = "timeout", ExitTimeout, fmt.Sprintf("job exceeded --timeout %s", j.o.Timeout)
				j.out.printf("%s; stopping %s", cause, plural(live(), "rank"))
			}
			stop(syscall.SIGTERM)
		case <-ctx.Done():
			if causeIs == "" {
				causeIs, code, cause = "signal", ExitLaunch, "cancelled: "+ctx.Err().Error()
			}
			stop(syscall.SIGTERM)
		}
	}
	takeAbort()
	if causeIs == "rank" {
		cause = j.blame(srv.Failures(), failRank, cause)
	}
	if causeIs == "kept" {
		cause += " (--keep-going: the other ranks ran on)"
	}
	if causeIs != "" {
		j.out.printf("job %s failed: %s", j.id, cause)
	}
	return code
}

// blame rewrites the cause of a job that failed by a rank's exit (first,
// the rank failRank's, in words) to name the rank where the failure began
// by the ranks' reports, and the ranks that failed because of it.
func (j *job) blame(reports []bootstrap.FailureReport, failRank int, cause string) string {
	o, ok := findOrigin(reports)
	if !ok {
		return cause
	}
	followers := bootstrap.FormatRanks(o.followers)
	if o.rank == failRank {
		return fmt.Sprintf("%s; %s failed because of it", cause, followers)
	}
	where := fmt.Sprintf("rank %d", o.rank)
	if o.rank >= 0 && o.rank < len(j.ranks) {
		where += fmt.Sprintf(" (host %s)", j.ranks[o.rank].Host)
	}
	msg := fmt.Sprintf("the failure began at %s, which %s", where, o.what())
	if d := o.firstDetail(); d != "" {
		msg += " (" + d + ")"
	}
	return fmt.Sprintf("%s; %s failed because of it (first: %s)", msg, followers, cause)
}

func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return strconv.Itoa(n) + " " + word + "s"
}
