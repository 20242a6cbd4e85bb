package main_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// These tests create network namespaces or start sshd. They run one at a
// time (no t.Parallel) and name everything they create after the test
// process's pid, so parallel test binaries do not collide.

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
}

// netnsHosts creates three namespaces joined by a bridge in the first, with
// addresses 198.18.0.1-3/24, and returns their names. Everything is
// removed in cleanup (deleting a namespace deletes its links).
func netnsHosts(t *testing.T) []string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root (CI runs as root)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) is not installed; the CI script installs it")
	}
	pid := os.Getpid()
	names := []string{fmt.Sprintf("rdmr-a-%d", pid), fmt.Sprintf("rdmr-b-%d", pid), fmt.Sprintf("rdmr-c-%d", pid)}
	for _, n := range names {
		ipCmd(t, "netns", "add", n)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", n).Run() })
		ipCmd(t, "-n", n, "link", "set", "lo", "up")
	}
	br := fmt.Sprintf("rbr%d", pid)
	ipCmd(t, "-n", names[0], "link", "add", br, "type", "bridge")
	ipCmd(t, "-n", names[0], "addr", "add", "198.18.0.1/24", "dev", br)
	ipCmd(t, "-n", names[0], "link", "set", br, "up")
	for i, n := range names[1:] {
		outer, inner := fmt.Sprintf("rva%d-%d", i, pid), fmt.Sprintf("rvb%d-%d", i, pid)
		ipCmd(t, "link", "add", outer, "type", "veth", "peer", "name", inner)
		ipCmd(t, "link", "set", outer, "netns", names[0])
		ipCmd(t, "link", "set", inner, "netns", n)
		ipCmd(t, "-n", names[0], "link", "set", outer, "master", br)
		ipCmd(t, "-n", names[0], "link", "set", outer, "up")
		ipCmd(t, "-n", n, "addr", "add", fmt.Sprintf("198.18.0.%d/24", i+2), "dev", inner)
		ipCmd(t, "-n", n, "link", "set", inner, "up")
	}
	return names
}

func TestNetnsHosts(t *testing.T) {
	ns := netnsHosts(t)
	agent := "ip netns exec {host}"
	hostList := fmt.Sprintf("%s:2,%s:2,%s:2", ns[0], ns[1], ns[2])
	// rdmarun itself runs in the first namespace, where the rendezvous
	// listens on the bridge address every namespace reaches.
	inNS := func(args ...string) []string {
		return append([]string{"netns", "exec", ns[0], rdmarunBin}, args...)
	}

	t.Run("six ranks on three hosts", func(t *testing.T) {
		dir := t.TempDir()
		r := runCmd(t, "ip", nil, inNS("-np", "6", "--host", hostList, "--launch-agent", agent, "--iface", "198.18.0.0/24",
			"--tag-output", testprogBin, "-piddir", dir, "-child", "-check-cmdline")...)
		require.Equal(t, 0, r.code, r.stderr)
		hs := hellos(t, r.stdout)
		require.Len(t, hs, 6)
		nets := map[string]bool{}
		for rank := range 6 {
			h := hs[rank]
			assert.Equal(t, rank, h.tag)
			assert.Equal(t, rank%2, h.local)
			assert.Equal(t, 2, h.localSize)
			assert.Equal(t, hs[rank-rank%2].netns, h.netns, "ranks %d and %d share a host", rank-rank%2, rank)
			assert.Equal(t, hs[0].peers, h.peers)
			assert.Regexp(t, `^ token_in_cmdline=0 procs=[1-9]`, h.extra, "the token is on no command line")
			nets[h.netns] = true
		}
		assert.Len(t, nets, 3, "three hosts, three network namespaces")
		pidsGone(t, dir, 12)
	})

	t.Run("rank on a remote host fails", func(t *testing.T) {
		dir := t.TempDir()
		r := runCmd(t, "ip", nil, inNS("-np", "6", "--host", hostList, "--launch-agent", agent, "--iface", "198.18.0.0/24",
			"--grace", "1s", testprogBin, "-exit-rank", "3", "-exit-code", "3", "-sleep", "60s", "-piddir", dir, "-child")...)
		assert.Equal(t, 3, r.code)
		assert.Contains(t, r.stderr, fmt.Sprintf("rank 3 (host %s) exited with code 3; stopping the other 5 ranks", ns[1]))
		pidsGone(t, dir, 12)
	})

	t.Run("package directory is built and copied", func(t *testing.T) {
		wdir, err := filepath.EvalSymlinks(t.TempDir())
		require.NoError(t, err)
		r := runCmd(t, "ip", nil, inNS("-np", "2", "--host", ns[1]+":1,"+ns[2]+":1", "--launch-agent", agent,
			"--iface", "198.18.0.0/24", "-v", "--wdir", wdir, "./internal/testprog", "-cwd")...)
		require.Equal(t, 0, r.code, r.stderr)
		hs := hellos(t, r.stdout)
		require.Len(t, hs, 2)
		for _, h := range hs {
			assert.Equal(t, " cwd="+wdir, h.extra, "--wdir on a remote host")
		}
		copies := regexp.MustCompile(`copied testprog to \S+:(\S+)`).FindAllStringSubmatch(r.stderr, -1)
		require.Len(t, copies, 2, "one copy per remote host")
		for _, c := range copies {
			_, err := os.Stat(filepath.Dir(c[1]))
			assert.True(t, os.IsNotExist(err), "%s removed after the job", filepath.Dir(c[1]))
		}
	})

	t.Run("stdin to a remote rank 0", func(t *testing.T) {
		// Lines longer than rdmarun's relay buffer travel in pieces.
		in := "first line\n\n  spaces and \\ backslash  \n" + strings.Repeat("x", 100_000) + "\nno newline at the end"
		r := runCmd(t, "ip", strings.NewReader(in), inNS("-np", "2", "--host", ns[1]+":1,"+ns[2]+":1", "--launch-agent", agent,
			"--iface", "198.18.0.0/24", testprogBin, "-stdin")...)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, fmt.Sprintf("stdin %d bytes: %q\n", len(in), in))
	})

	t.Run("data between hosts that share a host name", func(t *testing.T) {
		// The namespaces share this machine's host name (no UTS namespace
		// of their own): only the network namespace tells the hosts apart,
		// and the transports must advertise routable addresses, not
		// loopback. The program checks every element it receives.
		xcheck := filepath.Join(t.TempDir(), "xcheck")
		out, err := exec.Command("go", "build", "-o", xcheck, "../../internal/cluster/xcheck").CombinedOutput()
		require.NoError(t, err, "%s", out)
		r := runCmd(t, "ip", nil, inNS("-np", "4", "--host", ns[1]+":2,"+ns[2]+":2", "--launch-agent", agent,
			"--iface", "198.18.0.0/24", xcheck, "-timeout", "40s")...)
		require.Equal(t, 0, r.code, r.stderr)
		name, _ := os.Hostname()
		want := []string{"0:self@0,1:shm@0,2:tcp@1,3:tcp@1", "0:shm@0,1:self@0,2:tcp@1,3:tcp@1",
			"0:tcp@0,1:tcp@0,2:self@1,3:shm@1", "0:tcp@0,1:tcp@0,2:shm@1,3:self@1"}
		for rank, peers := range want {
			assert.Contains(t, r.stdout, fmt.Sprintf("xcheck rank=%d size=4 host=%s hostidx=%d peers=%s ok\n", rank, name, rank/2, peers))
		}
	})

	t.Run("unknown namespace", func(t *testing.T) {
		r := runCmd(t, "ip", nil, inNS("-np", "2", "--host", ns[1]+",no-such-ns-rdmarun", "--launch-agent", agent,
			"--iface", "198.18.0.0/24", testprogBin)...)
		assert.Equal(t, 1, r.code)
		assert.Contains(t, r.stderr, `rank 1 (host no-such-ns-rdmarun): could not run it on host no-such-ns-rdmarun: the launch agent ip ended (exit code 255) before the program reported: Cannot open network namespace "no-such-ns-rdmarun"`)
	})
}

func runCmd(t *testing.T, name string, stdin *strings.Reader, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = testEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	if stdin != nil {
		cmd.Stdin = stdin
	}
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "%s %v did not finish within 60s; stderr:\n%s", name, args, errb.String())
	r := result{stdout: out.String(), stderr: errb.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		require.True(t, ok, "run %s: %v", name, err)
		r.code = ee.ExitCode()
	}
	t.Logf("%s %s\n--- exit %d, stdout:\n%s--- stderr:\n%s", name, strings.Join(args, " "), r.code, r.stdout, r.stderr)
	return r
}

// sshd starts an OpenSSH server on a free loopback port with keys and
// configuration in a private directory, and returns an ssh_config in which
// the hosts node1 and node2 are that server.
func sshd(t *testing.T) string {
	t.Helper()
	const sshdBin = "/usr/sbin/sshd"
	if _, err := os.Stat(sshdBin); err != nil {
		t.Skip("no /usr/sbin/sshd (openssh-server); the CI script installs it")
	}
	if _, err := exec.LookPath("ssh"); err != nil {
		t.Skip("no ssh (openssh-client); the CI script installs it")
	}
	if os.Geteuid() != 0 {
		t.Skip("the sshd test runs as root (sshd's privilege separation needs it; CI runs as root)")
	}
	require.NoError(t, os.MkdirAll("/run/sshd", 0o755)) // sshd refuses to start without it
	me, err := user.Current()
	require.NoError(t, err)
	dir := t.TempDir()
	for _, k := range []string{"host_key", "client_key"} {
		out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", filepath.Join(dir, k)).CombinedOutput()
		require.NoError(t, err, "ssh-keygen: %s", out)
	}
	pub, err := os.ReadFile(filepath.Join(dir, "client_key.pub"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "authorized_keys"), pub, 0o600))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	cfg := fmt.Sprintf(`ListenAddress 127.0.0.1
Port %d
HostKey %s/host_key
AuthorizedKeysFile %s/authorized_keys
PidFile %s/sshd.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
StrictModes no
UsePAM no
`, port, dir, dir, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sshd_config"), []byte(cfg), 0o644))
	clientCfg := filepath.Join(dir, "ssh_config")
	require.NoError(t, os.WriteFile(clientCfg, []byte(fmt.Sprintf(`Host node1 node2
  HostName 127.0.0.1
Host *
  Port %d
  User %s
  IdentityFile %s/client_key
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  BatchMode yes
  LogLevel ERROR
  ConnectTimeout 3
  # the default post-quantum key exchange costs CPU the test does not need
  KexAlgorithms curve25519-sha256
`, port, me.Username, dir)), 0o644))
	log, err := os.Create(filepath.Join(dir, "sshd.log"))
	require.NoError(t, err)
	cmd := exec.Command(sshdBin, "-D", "-e", "-f", filepath.Join(dir, "sshd_config"))
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "sshd.log"))
			t.Logf("sshd log:\n%s", b)
		}
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := exec.Command("ssh", "-F", clientCfg, "node1", "true").Run()
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "sshd did not accept a login within 10s: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	return clientCfg
}

func TestSSH(t *testing.T) {
	cfg := sshd(t)
	agent := "ssh -F " + cfg + " {host}"

	t.Run("local and remote ranks", func(t *testing.T) {
		dir := t.TempDir()
		r := run(t, nil, "-np", "3", "--host", "localhost:1,node1:2", "--launch-agent", agent, "--iface", "lo",
			"-x", "FOO=it's here", "--tag-output", testprogBin, "-piddir", dir, "-child", "-env", "FOO", "-check-cmdline")
		require.Equal(t, 0, r.code, r.stderr)
		hs := hellos(t, r.stdout)
		require.Len(t, hs, 3)
		for rank := range 3 {
			assert.Regexp(t, `^ FOO=it's here token_in_cmdline=0 procs=[1-9]`, hs[rank].extra, "-x reaches rank %d; no token on a command line", rank)
			assert.Equal(t, rank, hs[rank].tag)
		}
		assert.Equal(t, []int{0, 0, 1}, []int{hs[0].local, hs[1].local, hs[2].local})
		assert.Equal(t, []int{1, 2, 2}, []int{hs[0].localSize, hs[1].localSize, hs[2].localSize})
		pidsGone(t, dir, 6)
	})

	t.Run("remote rank fails", func(t *testing.T) {
		dir := t.TempDir()
		r := run(t, nil, "-np", "2", "--host", "localhost:1,node1:1", "--launch-agent", agent, "--iface", "lo", "--grace", "1s",
			testprogBin, "-exit-rank", "1", "-exit-code", "3", "-sleep", "60s", "-piddir", dir, "-child")
		assert.Equal(t, 3, r.code)
		assert.Contains(t, r.stderr, "rank 1 (host node1) exited with code 3; stopping the other 1 rank")
		pidsGone(t, dir, 4)
	})

	t.Run("stdin to a remote rank 0, then Ctrl-C", func(t *testing.T) {
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		// Rank 0 is remote: it reads rdmarun's stdin through the control
		// stream, then every rank waits for the interrupt.
		cmd := command(ctx, "-np", "2", "--host", "node1:1,localhost:1", "--launch-agent", agent, "--iface", "lo",
			"--tag-output", testprogBin, "-stdin", "-signals", "-sleep", "60s", "-piddir", dir, "-child")
		cmd.Stdin = strings.NewReader("over\nssh")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(stdout)
		var lines []string
		for !slices.Contains(lines, `[0] stdin 8 bytes: "over\nssh"`) && sc.Scan() {
			lines = append(lines, sc.Text())
		}
		require.Contains(t, lines, `[0] stdin 8 bytes: "over\nssh"`)
		for len(lines) < 3 && sc.Scan() { // both hellos and the stdin line
			lines = append(lines, sc.Text())
		}
		require.Len(t, lines, 3, "%q", lines)
		require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
		for sc.Scan() {
			lines = append(lines, sc.Text())
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee)
		assert.Equal(t, 130, ee.ExitCode())
		for rank := range 2 {
			assert.Contains(t, lines, fmt.Sprintf("[%d] rank %d got interrupt", rank, rank))
		}
		pidsGone(t, dir, 4)
	})

	t.Run("rdmarun killed", func(t *testing.T) {
		// SIGKILL gives rdmarun no chance to stop anything: the remote
		// wrappers see their control stream end and kill their ranks.
		dir := t.TempDir()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := command(ctx, "-np", "1", "--host", "node1", "--launch-agent", agent, "--iface", "lo", "--grace", "1s",
			testprogBin, "-sleep", "60s", "-piddir", dir, "-child")
		stdout, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		sc := bufio.NewScanner(stdout)
		require.True(t, sc.Scan(), "hello from the rank")
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		cmd.Wait()
		pidsGone(t, dir, 2)
	})
}
