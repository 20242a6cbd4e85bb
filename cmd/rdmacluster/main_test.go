package main_test

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/cluster"
	"github.com/rdmago/rdmago/internal/testbin"
)

func TestMain(m *testing.M) { testbin.Main(m) }

func bin(t *testing.T) string {
	t.Helper()
	if err := cluster.Check(cluster.Options{}); err != nil {
		t.Skipf("%v (the test runs as root with iproute2 and util-linux)", err)
	}
	return testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmacluster")[0]
}

// An interrupted run takes its cluster down, the command still running in
// it included.
func TestRunInterrupted(t *testing.T) {
	b := bin(t)
	prefix := fmt.Sprintf("%sr", cluster.DefaultPrefix())
	t.Cleanup(func() { _ = cluster.Sweep(prefix) })
	cmd := exec.Command(b, "run", "-hosts", "2", "-prefix", prefix, "--", "sh", "-c", `echo "$RDMACLUSTER_HOSTS|$RDMACLUSTER_AGENT|$(hostname)"; exec sleep 600`)
	var out testbin.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	require.Eventually(t, func() bool { return strings.Contains(out.String(), "\n") }, 30*time.Second, 20*time.Millisecond)
	require.NotEmpty(t, cluster.PidsIn(prefix+"-h0"))
	require.NoError(t, cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-done:
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, out.String())
		assert.Equal(t, 130, ee.ExitCode())
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("rdmacluster run did not end on SIGINT")
	}
	assert.Contains(t, out.String(), fmt.Sprintf("%s-h0,%s-h1|nsenter --net=/run/netns/{host} --uts=/run/rdmacluster/{host} --|%s-h0\n", prefix, prefix, prefix))
	assert.Empty(t, cluster.Leftovers(prefix))
}

// down -stale removes a cluster whose creating process is gone, and only
// that one.
func TestDownStale(t *testing.T) {
	b := bin(t)
	dead := exec.Command("true")
	require.NoError(t, dead.Run())
	stale := fmt.Sprintf("rdc%d", dead.Process.Pid)
	live := fmt.Sprintf("%ss", cluster.DefaultPrefix())
	t.Cleanup(func() { _ = cluster.Sweep(stale); _ = cluster.Sweep(live) })
	for _, p := range []string{stale, live} {
		out, err := exec.Command(b, "up", "-hosts", "1", "-prefix", p).CombinedOutput()
		require.NoError(t, err, "%s", out)
		assert.Contains(t, string(out), "host "+p+"-h0 198.18.200.1\n")
	}
	out, err := exec.Command(b, "down", "-stale").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "removing "+stale)
	assert.Empty(t, cluster.Leftovers(stale))
	assert.NotEmpty(t, cluster.Leftovers(live), "a cluster whose process lives is not stale")
	out, err = exec.Command(b, "exec", live+"-h0", "--", "hostname").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, live+"-h0\n", string(out))
	// rsh joins its words into one shell command, as Open MPI's rsh
	// agent expects.
	out, err = exec.Command(b, "rsh", live+"-h0", "echo", "$(hostname)", "&&", "echo", "two").CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Equal(t, live+"-h0\ntwo\n", string(out))
	out, err = exec.Command(b, "down", live).CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Empty(t, cluster.Leftovers(live))
	_, err = os.Stat("/run/netns/" + live + "-sw")
	assert.True(t, os.IsNotExist(err))
}
