package main_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The binaries under test, built once by TestMain.
var rdmarunBin, testprogBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rdmarun-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rdmarunBin = filepath.Join(dir, "rdmarun")
	testprogBin = filepath.Join(dir, "testprog")
	for _, b := range []struct{ out, pkg string }{{rdmarunBin, "."}, {testprogBin, "./internal/testprog"}} {
		args := []string{"build", "-o", b.out}
		if raceEnabled && b.out == rdmarunBin {
			args = append(args, "-race") // check the launcher itself under real jobs
		}
		cmd := exec.Command("go", append(args, b.pkg)...)
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n", b.pkg, err)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	code           int
}

// testEnv is the environment rdmarun runs with: the test's, without
// variables that would change what the tests check.
func testEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GOMAXPROCS=") || strings.HasPrefix(kv, "RDMARUN_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, rdmarunBin, args...)
	cmd.Env = testEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	return cmd
}

func run(t *testing.T, stdin io.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "rdmarun %v did not finish within 60s; stderr:\n%s", args, errb.String())
	r := result{stdout: out.String(), stderr: errb.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "run rdmarun: %v", err)
		r.code = ee.ExitCode()
	}
	t.Logf("rdmarun %s\n--- exit %d, stdout:\n%s--- stderr:\n%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

var helloRE = regexp.MustCompile(`(?m)^(\[(\d+)\] )?hello rank=(\d+) size=(\d+) local=(\d+)/(\d+) host=(\S+) netns=(\S+) peers=(\S+)(.*)$`)

type hello struct {
	tag, rank, size, local, localSize int
	host, netns, peers, extra         string
}

func hellos(t *testing.T, stdout string) map[int]hello {
	t.Helper()
	out := map[int]hello{}
	for _, m := range helloRE.FindAllStringSubmatch(stdout, -1) {
		atoi := func(s string) int {
			if s == "" {
				return -1
			}
			n, err := strconv.Atoi(s)
			require.NoError(t, err)
			return n
		}
		h := hello{atoi(m[2]), atoi(m[3]), atoi(m[4]), atoi(m[5]), atoi(m[6]), m[7], m[8], m[9], m[10]}
		_, dup := out[h.rank]
		require.False(t, dup, "rank %d said hello twice", h.rank)
		out[h.rank] = h
	}
	return out
}

// pidsGone checks that every process whose pid the test program wrote to
// dir (ranks and their children) has ended.
func pidsGone(t *testing.T, dir string, want int) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.pid"))
	require.NoError(t, err)
	require.Len(t, files, want, "pid files: %v", files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		pid := strings.TrimSpace(string(b))
		require.NotEmpty(t, pid, "pid file %s is empty", f)
		require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 20*time.Millisecond,
			"process %s (%s) is still running after rdmarun exited", pid, filepath.Base(f))
	}
}

func processGone(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return true
	}
	// state is the field after the parenthesised command name
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}

func TestFourRanks(t *testing.T) {
	r := run(t, nil, "-np", "4", "--tag-output", testprogBin, "-check-cmdline")
	require.Equal(t, 0, r.code, r.stderr)
	hs := hellos(t, r.stdout)
	require.Len(t, hs, 4)
	host, _ := os.Hostname()
	var peers string
	for rank := range 4 {
		h := hs[rank]
		assert.Equal(t, rank, h.tag, "--tag-output prefix")
		assert.Equal(t, 4, h.size)
		assert.Equal(t, rank, h.local)
		assert.Equal(t, 4, h.localSize)
		assert.Equal(t, host, h.host)
		if peers == "" {
			peers = h.peers
		}
		assert.Equal(t, peers, h.peers, "every rank sees the same allgather")
		assert.Regexp(t, `^ token_in_cmdline=0 procs=[1-9]`, h.extra, "the token is on no command line")
	}
	assert.Len(t, strings.Split(peers, ","), 4)
	assert.Empty(t, r.stderr)
}

func TestPackageDirIsBuilt(t *testing.T) {
	r := run(t, nil, "-np", "2", "./internal/testprog")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Len(t, hellos(t, r.stdout), 2)
	for _, h := range hellos(t, r.stdout) {
		assert.Equal(t, -1, h.tag, "no --tag-output, no prefix")
	}
}

func TestRankFails(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "4", "--grace", "2s", testprogBin, "-exit-rank", "2", "-exit-code", "3", "-sleep", "60s", "-piddir", dir, "-child")
	assert.Equal(t, 3, r.code, "rdmarun exits with the failed rank's code")
	assert.Regexp(t, `rank 2 \(host localhost, pid \d+\) exited with code 3; stopping the other 3 ranks`, r.stderr)
	assert.Regexp(t, `job \w+ failed: rank 2 \(host localhost, pid \d+\) exited with code 3`, r.stderr)
	pidsGone(t, dir, 8)
}

func TestRankKilledBySignal(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "3", testprogBin, "-kill-rank", "1", "-sleep", "60s", "-piddir", dir)
	assert.Equal(t, 128+9, r.code)
	assert.Regexp(t, `rank 1 \(host localhost, pid \d+\) was killed by signal SIGKILL`, r.stderr)
	pidsGone(t, dir, 3)
}

// A stopped rank cannot say anything, and the ranks that notice it exit
// first: rdmarun must name the stopped rank, from the survivors' failure
// reports, not the first survivor to exit (rank 3 here), and say which
// ranks failed because of it.
func TestStoppedRankBlamed(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "4", "--grace", "1s", testprogBin, "-stop-rank", "1", "-piddir", dir)
	assert.Equal(t, 1, r.code, "the first failed rank's code")
	assert.Regexp(t, `rank 3 \(host localhost, pid \d+\) exited with code 1 after rank 1 was lost; stopping the other 3 ranks`, r.stderr)
	assert.Regexp(t, `job \w+ failed: the failure began at rank 1 \(host localhost\), which was lost \(rank 1 lost: no frame for 1.5s\); ranks 0, 2 and 3 failed because of it`, r.stderr)
	pidsGone(t, dir, 4)
}

func TestAbort(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "3", testprogBin, "-abort-rank", "1", "-abort-code", "7", "-piddir", dir)
	assert.Equal(t, 7, r.code, "Abort's code becomes rdmarun's")
	assert.Contains(t, r.stderr, "failed: rank 1 (host localhost) called Abort(7): testprog was told to abort")
	pidsGone(t, dir, 3)
}

func TestTimeout(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "2", "--timeout", "1s", testprogBin, "-sleep", "60s", "-piddir", dir)
	assert.Equal(t, 124, r.code)
	assert.Contains(t, r.stderr, "job exceeded --timeout 1s; stopping 2 ranks")
	pidsGone(t, dir, 2)
}

func TestCtrlC(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := command(ctx, "-np", "3", "--tag-output", testprogBin, "-signals", "-sleep", "60s", "-piddir", dir, "-child")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	var lines []string
	for len(lines) < 3 && sc.Scan() {
		lines = append(lines, sc.Text())
	}
	require.Len(t, lines, 3, "three hellos before the interrupt")
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	err = cmd.Wait()
	require.NoError(t, ctx.Err())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 130, ee.ExitCode())
	out := strings.Join(lines, "\n")
	for rank := range 3 {
		assert.Contains(t, out, fmt.Sprintf("[%d] rank %d got interrupt", rank, rank), "every rank got SIGINT")
	}
	assert.Contains(t, errb.String(), "interrupted by SIGINT; forwarding it to 3 ranks")
	pidsGone(t, dir, 6)
}

func TestStdinGoesToRank0(t *testing.T) {
	r := run(t, strings.NewReader("first\nsecond"), "-np", "2", testprogBin, "-stdin")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `stdin 12 bytes: "first\nsecond"`)
	assert.Equal(t, 1, strings.Count(r.stdout, "stdin "), "only rank 0 reads stdin")
}

func TestEnvironment(t *testing.T) {
	t.Setenv("FROM_ENV_TEST", "from env")
	r := run(t, nil, "-np", "2", "-x", "FOO=bar baz", "-x", "FROM_ENV_TEST", "--transport", "tcp", "--connect-timeout", "45s",
		testprogBin, "-env", "FOO,FROM_ENV_TEST,RDMARUN_TRANSPORT,RDMARUN_TIMEOUT,RDMARUN_JOB")
	require.Equal(t, 0, r.code, r.stderr)
	hs := hellos(t, r.stdout)
	require.Len(t, hs, 2)
	assert.Regexp(t, `^ FOO=bar baz FROM_ENV_TEST=from env RDMARUN_TRANSPORT=tcp RDMARUN_TIMEOUT=45s RDMARUN_JOB=[0-9a-f]{16}$`, hs[0].extra)
	assert.Equal(t, hs[0].extra, hs[1].extra)
}

func TestGOMAXPROCS(t *testing.T) {
	r := run(t, nil, "-np", "4", testprogBin, "-env", "GOMAXPROCS", "-nodial")
	require.Equal(t, 0, r.code, r.stderr)
	want := " GOMAXPROCS=<unset>"
	if ncpu := runtime.NumCPU(); ncpu < 4 {
		want = fmt.Sprintf(" GOMAXPROCS=%d", max(1, ncpu/4))
	}
	for _, h := range hellos(t, r.stdout) {
		assert.Equal(t, want, h.extra)
	}
	r = run(t, nil, "-np", "4", "-x", "GOMAXPROCS=3", testprogBin, "-env", "GOMAXPROCS", "-nodial")
	require.Equal(t, 0, r.code, r.stderr)
	for _, h := range hellos(t, r.stdout) {
		assert.Equal(t, " GOMAXPROCS=3", h.extra, "the user's choice wins")
	}
}

func TestBindToCore(t *testing.T) {
	ncpu := runtime.NumCPU()
	r := run(t, nil, "-np", "2", "--bind-to", "core", testprogBin, "-affinity", "-nodial")
	require.Equal(t, 0, r.code, r.stderr)
	hs := hellos(t, r.stdout)
	require.Len(t, hs, 2)
	var cpus []string
	for rank := range 2 {
		m := regexp.MustCompile(`cpus=(\S+)`).FindStringSubmatch(hs[rank].extra)
		require.NotNil(t, m)
		assert.NotContains(t, m[1], ",", "rank %d is bound to one CPU", rank)
		cpus = append(cpus, m[1])
	}
	if ncpu >= 2 {
		assert.NotEqual(t, cpus[0], cpus[1], "two ranks, two CPUs")
	}
}

// TestBindDefault: without --bind-to, two ranks on a host with two CPUs
// or more are bound to a CPU each; ranks that outnumber the CPUs stay
// unbound and -v says why; --bind-to none leaves two ranks unbound.
func TestBindDefault(t *testing.T) {
	ncpu := runtime.NumCPU()
	cpusOf := func(r result, n int) []string {
		t.Helper()
		hs := hellos(t, r.stdout)
		require.Len(t, hs, n)
		var cpus []string
		for rank := range n {
			m := regexp.MustCompile(`cpus=(\S+)`).FindStringSubmatch(hs[rank].extra)
			require.NotNil(t, m)
			cpus = append(cpus, m[1])
		}
		return cpus
	}
	if ncpu >= 2 {
		r := run(t, nil, "-np", "2", testprogBin, "-affinity", "-nodial")
		require.Equal(t, 0, r.code, r.stderr)
		cpus := cpusOf(r, 2)
		for rank, c := range cpus {
			assert.NotContains(t, c, ",", "rank %d is bound to one CPU by default", rank)
		}
		assert.NotEqual(t, cpus[0], cpus[1], "two ranks, two CPUs")

		r = run(t, nil, "-np", "2", "--bind-to", "none", testprogBin, "-affinity", "-nodial")
		require.Equal(t, 0, r.code, r.stderr)
		for rank, c := range cpusOf(r, 2) {
			assert.Contains(t, c, ",", "rank %d is not bound with --bind-to none", rank)
		}
	}
	np := ncpu + 1
	r := run(t, nil, "-v", "-np", strconv.Itoa(np), testprogBin, "-affinity", "-nodial")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, fmt.Sprintf("%d ranks on localhost outnumber its %d CPUs: ranks are not bound", np, ncpu))
	if ncpu >= 2 {
		for rank, c := range cpusOf(r, np) {
			assert.Contains(t, c, ",", "rank %d (outnumbering the CPUs) is not bound", rank)
		}
	}
}

func TestBadInput(t *testing.T) {
	hostfile := filepath.Join(t.TempDir(), "hosts")
	require.NoError(t, os.WriteFile(hostfile, []byte("# two hosts\nlocalhost slots=2\nnode2 slots=many\n"), 0o644))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"np over slots", []string{"-np", "3", "--host", "localhost:2", testprogBin}, "-np 3 is more than the 2 slots on localhost:2; add --oversubscribe"},
		{"missing program path", []string{"-np", "2", "./no/such/prog"}, "program ./no/such/prog not found"},
		{"missing program name", []string{"-np", "2", "no-such-program-rdmarun"}, `program "no-such-program-rdmarun" not found in PATH`},
		{"bad hostfile line", []string{"-np", "2", "--hostfile", hostfile, testprogBin}, "hostfile " + hostfile + `:3: slots="many": want a number in 1..1048576`},
		{"missing np", []string{testprogBin}, "missing -np N"},
		{"missing wdir", []string{"-np", "1", "--wdir", "/no/such/dir", testprogBin}, "--wdir /no/such/dir: not a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := run(t, nil, tt.args...)
			assert.Equal(t, 2, r.code)
			assert.Contains(t, r.stderr, tt.want)
			assert.Empty(t, r.stdout)
		})
	}
	t.Run("np over slots with oversubscribe", func(t *testing.T) {
		r := run(t, nil, "-np", "3", "--host", "localhost:2", "--oversubscribe", testprogBin, "-nodial")
		assert.Equal(t, 0, r.code)
		assert.Len(t, hellos(t, r.stdout), 3)
	})
}

func TestUnknownAndUnreachableHosts(t *testing.T) {
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("ssh (openssh-client) is not installed; the CI script installs it")
	}
	r := run(t, nil, "-np", "2", "--host", "no-such-host.invalid:2", testprogBin)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, `unknown host "no-such-host.invalid" (named in --host)`)

	// A port nothing listens on: ssh is refused.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := filepath.Join(t.TempDir(), "ssh_config")
	require.NoError(t, os.WriteFile(cfg, []byte(fmt.Sprintf("Host unreachable-node\n  HostName 127.0.0.1\n  Port %d\n  BatchMode yes\n  ConnectTimeout 3\n", port)), 0o644))
	r = run(t, nil, "-np", "2", "--host", "unreachable-node:2", "--iface", "lo", "--launch-agent", "ssh -F "+cfg+" {host}", testprogBin)
	assert.Equal(t, 1, r.code)
	assert.Regexp(t, `rank \d \(host unreachable-node\): cannot reach host unreachable-node with ssh: ssh: connect to host 127.0.0.1 port \d+: Connection refused`, r.stderr)
}

func TestSecondCtrlCKills(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// The grace period outlasts the test's patience: only the second
	// signal can end this job in time.
	cmd := command(ctx, "-np", "2", "--grace", "10m", testprogBin, "-ignore-signals", "-sleep", "10m", "-piddir", dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	require.NoError(t, cmd.Start())
	sc := bufio.NewScanner(stdout)
	next := func() string {
		if !sc.Scan() {
			cmd.Wait() // errb is complete only then
			t.Fatalf("stdout ended early; stderr:\n%s", errb.String())
		}
		return sc.Text()
	}
	next()
	next()
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	ignored := []string{next(), next()}
	assert.ElementsMatch(t, []string{"rank 0 ignored interrupt", "rank 1 ignored interrupt"}, ignored)
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	err = cmd.Wait()
	require.NoError(t, ctx.Err())
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, 130, ee.ExitCode())
	assert.Contains(t, errb.String(), "SIGINT again: killing the ranks now")
	pidsGone(t, dir, 2)
}

func TestGraceThenKill(t *testing.T) {
	dir := t.TempDir()
	r := run(t, nil, "-np", "3", "--grace", "300ms", testprogBin, "-ignore-signals", "-exit-rank", "1", "-sleep", "10m", "-piddir", dir)
	assert.Equal(t, 3, r.code)
	assert.Contains(t, r.stdout, "rank 0 ignored terminated")
	assert.Contains(t, r.stdout, "rank 2 ignored terminated")
	assert.Contains(t, r.stderr, "failed: rank 1 (host localhost, pid ")
	pidsGone(t, dir, 3)
}

func TestHostfileAndWdir(t *testing.T) {
	dir := t.TempDir()
	wdir, err := filepath.EvalSymlinks(t.TempDir())
	require.NoError(t, err)
	hostfile := filepath.Join(dir, "hosts")
	require.NoError(t, os.WriteFile(hostfile, []byte("localhost slots=3 # this machine\n"), 0o644))
	r := run(t, nil, "-np", "3", "--hostfile", hostfile, "--wdir", wdir, testprogBin, "-cwd", "-nodial")
	require.Equal(t, 0, r.code, r.stderr)
	hs := hellos(t, r.stdout)
	require.Len(t, hs, 3)
	for rank := range 3 {
		assert.Equal(t, " cwd="+wdir, hs[rank].extra)
		assert.Equal(t, 3, hs[rank].localSize)
	}
	r = run(t, nil, "-np", "4", "--hostfile", hostfile, testprogBin)
	assert.Equal(t, 2, r.code)
	assert.Contains(t, r.stderr, "-np 4 is more than the 3 slots on localhost:3")
}
