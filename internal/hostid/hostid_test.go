package hostid

import (
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestIDStable(t *testing.T) {
	if runtime.GOOS != "linux" {
		_, err := ID()
		require.ErrorIs(t, err, ErrUnavailable)
		return
	}
	a, err := ID()
	require.NoError(t, err)
	assert.Regexp(t, regexp.MustCompile(`^[0-9a-f-]{36}/netns:\d+:\d+$`), a)
	k, err := Kernel()
	require.NoError(t, err)
	assert.Equal(t, a[:36], k, "the kernel is the identity's boot id")
	b, err := ID()
	require.NoError(t, err)
	assert.Equal(t, a, b)
	assert.Equal(t, a, Best())
	assert.True(t, Same(a, b))
	assert.False(t, Same("", ""), "an unknown identity is nobody's host")
	assert.False(t, Same(a, Named(Name())))
}

// TestHelperPrintID is not a test: the child process of TestOtherNetns.
func TestHelperPrintID(t *testing.T) {
	if os.Getenv("HOSTID_HELPER") != "1" {
		t.Skip("helper process")
	}
	id, err := ID()
	require.NoError(t, err)
	os.Stdout.WriteString("id=" + id + " name=" + Name() + "\n")
}

// A process in another network namespace is another host, even under the
// same host name (the case host names get wrong).
func TestOtherNetns(t *testing.T) {
	if runtime.GOOS != "linux" || os.Geteuid() != 0 {
		t.Skip("needs Linux and root to enter a new network namespace")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skip("unshare (util-linux) is not installed")
	}
	run := func(args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(args[0], append(args[1:], "-test.run=^TestHelperPrintID$", "-test.v")...)
		cmd.Env = append(os.Environ(), "HOSTID_HELPER=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		m := regexp.MustCompile(`id=(\S+) name=(\S+)`).FindStringSubmatch(string(out))
		require.NotNil(t, m, "%s", out)
		return m[1], m[2]
	}
	self, err := os.Executable()
	require.NoError(t, err)
	here, _ := ID()
	sameID, sameName := run(self)
	otherID, otherName := run("unshare", "--net", self)
	assert.Equal(t, here, sameID, "another process in this namespace is this host")
	assert.Equal(t, sameName, otherName, "unshare --net keeps the host name")
	assert.False(t, Same(here, otherID), "another network namespace is another host: %s vs %s", here, otherID)
	assert.Equal(t, strings.Split(here, "/")[0], strings.Split(otherID, "/")[0], "one kernel, one boot id")
	assert.True(t, SameKernel(here, otherID), "another network namespace shares this kernel's CPUs")
}

func TestSameKernel(t *testing.T) {
	const a, b = "0b4c5d2e-0000-4000-8000-000000000001", "0b4c5d2e-0000-4000-8000-000000000002"
	for _, c := range []struct {
		x, y string
		want bool
	}{
		{a + "/netns:4:100", a + "/netns:4:100", true},
		{a + "/netns:4:100", a + "/netns:4:200", true},
		{a + "/netns:4:100", b + "/netns:4:100", false},
		{Named("n1"), Named("n1"), false},
		{Named("n1"), a + "/netns:4:100", false},
		{"", "", false},
		{"/netns:4:100", "/netns:4:100", false},
	} {
		assert.Equal(t, c.want, SameKernel(c.x, c.y), "%q, %q", c.x, c.y)
	}
}
