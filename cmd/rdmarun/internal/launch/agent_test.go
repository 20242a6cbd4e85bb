package launch

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSplitWords(t *testing.T) {
	tests := map[string][]string{
		"ssh -p 22 {host}":                 {"ssh", "-p", "22", "{host}"},
		`ip netns exec {host}`:             {"ip", "netns", "exec", "{host}"},
		`ssh -o 'ProxyCommand=nc %h %p' x`: {"ssh", "-o", "ProxyCommand=nc %h %p", "x"},
		`a "b \"c\" \$d" e\ f`:             {"a", `b "c" $d`, "e f"},
		`  a  ''  b `:                      {"a", "", "b"},
	}
	for in, want := range tests {
		got, err := splitWords(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{`a 'b`, `a "b`, `a\`} {
		_, err := splitWords(in)
		assert.Error(t, err, in)
	}
}

func TestAgentCommand(t *testing.T) {
	a, err := parseAgent(DefaultAgent)
	require.NoError(t, err)
	assert.Equal(t, []string{"ssh", "-T", "-x", "-o", "BatchMode=yes", "n1", "sh -c 'echo hi'"}, a.command("n1", "echo hi"))
	assert.Equal(t, []string{"ssh", "-T", "-x", "-o", "BatchMode=yes", "-G", "n1"}, a.sshConfigQuery("n1"))

	a, err = parseAgent("rsh")
	require.NoError(t, err)
	assert.Equal(t, []string{"rsh", "n1", "sh -c 'echo it'\\''s'"}, a.command("n1", "echo it's"))

	a, err = parseAgent("ip netns exec {host}")
	require.NoError(t, err)
	assert.Equal(t, []string{"ip", "netns", "exec", "ns1", "sh", "-c", "echo hi"}, a.command("ns1", "echo hi"))
	assert.Nil(t, a.sshConfigQuery("ns1"))

	a, err = parseAgent("docker exec -i {host} bash -c")
	require.NoError(t, err)
	assert.Equal(t, []string{"docker", "exec", "-i", "c1", "bash", "-c", "echo hi"}, a.command("c1", "echo hi"))

	a, err = parseAgent("/usr/bin/ssh -l {host}-user {host}")
	require.NoError(t, err)
	assert.True(t, a.shellMode)
	assert.Equal(t, []string{"/usr/bin/ssh", "-l", "h-user", "h", "sh -c true"}, a.command("h", "true"))

	_, err = parseAgent("   ")
	assert.Error(t, err)
}

// TestShellQuote runs quoted words through a real sh.
func TestShellQuote(t *testing.T) {
	words := []string{"plain", "", "two words", "it's", `"dq"`, "$HOME", "`id`", "a\\b", "*", "~", "-n", "ü", "a!b"}
	var b strings.Builder
	b.WriteString(`printf '%s\n'`)
	for _, w := range words {
		b.WriteString(" " + shellQuote(w))
	}
	out, err := exec.Command("sh", "-c", b.String()).Output()
	require.NoError(t, err)
	assert.Equal(t, strings.Join(words, "\n")+"\n", string(out))
}

// wrapperRun starts a remote wrapper script locally through sh, the way
// an exec-style agent (or sshd, for shell mode) would, in its own process
// group (the wrapper signals its group).
type wrapperRun struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr *bufio.Reader
}

func startWrapper(t *testing.T, s remoteSpec, shellMode bool) *wrapperRun {
	t.Helper()
	script := remoteScript(s)
	tmpl := "env RDMARUN_TEST_HOST={host}"
	if shellMode {
		tmpl = "ssh {host}"
	}
	a, err := parseAgent(tmpl)
	require.NoError(t, err)
	argv := a.command("h", script)
	if shellMode {
		// What sshd does with the command string: the login shell runs it.
		argv = []string{"sh", "-c", argv[len(argv)-1]}
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		cmd.Wait()
	})
	return &wrapperRun{cmd: cmd, stdin: stdin, stdout: bufio.NewReader(stdout), stderr: bufio.NewReader(stderr)}
}

func (w *wrapperRun) line(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	ch := make(chan string, 1)
	go func() {
		l, _ := r.ReadString('\n')
		ch <- l
	}()
	select {
	case l := <-ch:
		return strings.TrimSuffix(l, "\n")
	case <-time.After(10 * time.Second):
		t.Fatal("no line from the wrapper within 10s")
		return ""
	}
}

func (w *wrapperRun) wait(t *testing.T) syscall.WaitStatus {
	t.Helper()
	done := make(chan struct{})
	go func() { w.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("wrapper did not exit within 10s")
	}
	return w.cmd.ProcessState.Sys().(syscall.WaitStatus)
}

func TestRemoteScript(t *testing.T) {
	for _, shellMode := range []bool{false, true} {
		name := "exec-agent"
		if shellMode {
			name = "ssh-agent"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			prog := `printf '[%s]' "$@"; echo; echo "tok=$RDMARUN_TOKEN rank=$RDMARUN_RANK foo=$FOO pwd=$(pwd) gmp=${GOMAXPROCS-unset}"; cat; echo; echo err-line >&2; printf partial >&2; exit 5`
			w := startWrapper(t, remoteSpec{
				Rank: 0, Marker: "MARK-1", WorkDir: dir, StrictWdir: true,
				Env:   [][2]string{{"RDMARUN_RANK", "0"}, {"FOO", `it's "q" $x`}, {"GOMAXPROCS", "7"}},
				Argv:  []string{"sh", "-c", prog, "arg0", "two words", "it's", "$HOME", ""},
				Stdin: true, AutoProcs: true, Grace: 1,
			}, shellMode)
			_, err := io.WriteString(w.stdin, "secret-token\ndline one\nd  spaced \\ line\npno newline\ne\n")
			require.NoError(t, err)
			assert.Equal(t, "[two words][it's][$HOME][]", w.line(t, w.stdout))
			assert.Equal(t, `tok=secret-token rank=0 foo=it's "q" $x pwd=`+dir+` gmp=7`, w.line(t, w.stdout))
			assert.Equal(t, "line one", w.line(t, w.stdout))
			assert.Equal(t, `  spaced \ line`, w.line(t, w.stdout))
			assert.Equal(t, "no newline", w.line(t, w.stdout))
			assert.Equal(t, "err-line", w.line(t, w.stderr))
			assert.Equal(t, "partialMARK-1 5", w.line(t, w.stderr))
			ws := w.wait(t)
			if shellMode && ws.Signaled() {
				// dash does not exec the last command of -c, so the outer
				// "login shell" shares the wrapper's group and gets its
				// final TERM; rdmarun reads the status from the marker.
				assert.Equal(t, syscall.SIGTERM, ws.Signal())
			} else {
				assert.Equal(t, 5, ws.ExitStatus())
			}
		})
	}
}

func TestRemoteScriptSetupFailures(t *testing.T) {
	w := startWrapper(t, remoteSpec{Marker: "M", Argv: []string{"/nonexistent/prog"}, Grace: 1}, false)
	io.WriteString(w.stdin, "tok\n")
	assert.Equal(t, "M notfound", w.line(t, w.stderr))
	assert.Equal(t, 127, w.wait(t).ExitStatus())

	w = startWrapper(t, remoteSpec{Marker: "M", WorkDir: "/nonexistent/dir", StrictWdir: true, Argv: []string{"true"}, Grace: 1}, false)
	io.WriteString(w.stdin, "tok\n")
	l := w.line(t, w.stderr)
	for !strings.HasPrefix(l, "M") { // sh's own "can't cd" comes first
		l = w.line(t, w.stderr)
	}
	assert.Equal(t, "M wdir", l)
	assert.Equal(t, 126, w.wait(t).ExitStatus())

	// Best-effort working directory: a missing one is not an error.
	w = startWrapper(t, remoteSpec{Marker: "M", WorkDir: "/nonexistent/dir", Argv: []string{"true"}, Grace: 1}, false)
	io.WriteString(w.stdin, "tok\n")
	assert.Equal(t, "M 0", w.line(t, w.stderr))
	assert.Equal(t, 0, w.wait(t).ExitStatus())

	// No token: the stream ended at once.
	w = startWrapper(t, remoteSpec{Marker: "M", Argv: []string{"true"}, Grace: 1}, false)
	w.stdin.Close()
	assert.Contains(t, w.line(t, w.stderr), "no token on stdin")
	assert.Equal(t, 126, w.wait(t).ExitStatus())
}

// TestRemoteScriptControl: a signal line reaches the program; the end of
// the control stream (rdmarun gone) kills the program and its children.
func TestRemoteScriptControl(t *testing.T) {
	prog := `trap 'echo got-int; exit 9' INT; echo ready; while :; do sleep 0.05; done`
	w := startWrapper(t, remoteSpec{Marker: "M", Argv: []string{"sh", "-c", prog}, Grace: 1}, false)
	io.WriteString(w.stdin, "tok\n")
	assert.Equal(t, "ready", w.line(t, w.stdout))
	io.WriteString(w.stdin, "sINT\n")
	assert.Equal(t, "got-int", w.line(t, w.stdout))
	assert.Equal(t, "M 9", w.line(t, w.stderr))
	assert.Equal(t, 9, w.wait(t).ExitStatus())

	prog = `sleep 600 & echo child=$!; echo ready; wait`
	w = startWrapper(t, remoteSpec{Marker: "M", Argv: []string{"sh", "-c", prog}, Grace: 1}, true)
	io.WriteString(w.stdin, "tok\n")
	child := w.line(t, w.stdout)
	assert.Equal(t, "ready", w.line(t, w.stdout))
	w.stdin.Close()
	assert.Equal(t, "M 143", w.line(t, w.stderr), "TERM from the watcher")
	w.wait(t)
	pid := strings.TrimPrefix(child, "child=")
	require.Eventually(t, func() bool { return processGone(pid) }, 5*time.Second, 20*time.Millisecond, "child %s outlived the wrapper", pid)
}

// processGone: no such process, or only its zombie.
func processGone(pid string) bool {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return true
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the state follows "(comm) "
	return i >= 0 && i+2 < len(s) && s[i+2] == 'Z'
}
