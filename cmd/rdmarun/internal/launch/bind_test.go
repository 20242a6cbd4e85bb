package launch

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestAutoBind: the default binding, over ranks per host and CPUs, is
// Open MPI's: a core each for up to two ranks, a socket each above, none
// when the ranks outnumber the CPUs.
func TestAutoBind(t *testing.T) {
	tests := []struct {
		ranks, cpus int
		want        BindPolicy
	}{
		{1, 1, BindCore},
		{1, 2, BindCore},
		{2, 2, BindCore},
		{2, 64, BindCore},
		{2, 1, BindNone}, // outnumbered
		{3, 2, BindNone},
		{4, 2, BindNone},
		{8, 2, BindNone},
		{3, 4, bindSocket},
		{4, 4, bindSocket},
		{8, 64, bindSocket},
		{65, 64, BindNone},
		{2, 0, BindNone}, // CPUs unknown
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("ranks=%d/cpus=%d", tc.ranks, tc.cpus), func(t *testing.T) {
			assert.Equal(t, tc.want, autoBind(tc.ranks, tc.cpus))
		})
	}
}

func TestPinSet(t *testing.T) {
	cpus := []int{2, 3, 6, 7}
	two := [][]int{{2, 3}, {6, 7}}
	assert.Equal(t, []int{2}, pinSet(BindCore, 0, cpus, nil))
	assert.Equal(t, []int{7}, pinSet(BindCore, 3, cpus, nil))
	assert.Equal(t, []int{2}, pinSet(BindCore, 4, cpus, nil), "wraps around")
	assert.Equal(t, []int{2, 3}, pinSet(bindSocket, 0, cpus, two))
	assert.Equal(t, []int{6, 7}, pinSet(bindSocket, 1, cpus, two), "sockets taken in turn")
	assert.Equal(t, []int{2, 3}, pinSet(bindSocket, 2, cpus, two))
	assert.Nil(t, pinSet(bindSocket, 1, cpus, [][]int{cpus}), "one socket: every CPU, nothing to narrow")
	assert.Nil(t, pinSet(BindNone, 0, cpus, nil))
	assert.Nil(t, pinSet(BindCore, 0, nil, nil), "no CPUs known")
}

func TestBindNote(t *testing.T) {
	assert.Equal(t, "4 ranks on localhost outnumber its 2 CPUs: ranks are not bound (--bind-to core pins them anyway)",
		bindNote(BindAuto, BindNone, "localhost", 4, 2))
	assert.Contains(t, bindNote(BindAuto, BindCore, "a", 2, 2), "bound to one of its 2 CPUs")
	assert.Contains(t, bindNote(BindNone, BindNone, "a", 2, 2), "--bind-to none")
	assert.Contains(t, bindNote(BindAuto, bindSocket, "a", 4, 8), "socket")
}

// TestRemoteScriptBinds: the remote wrapper pins with taskset for core
// always, for auto only when the host's ranks are at most two and have a
// CPU each, and not at all for none.
func TestRemoteScriptBinds(t *testing.T) {
	spec := remoteSpec{Rank: 1, Marker: "m", Argv: []string{"prog"}, Grace: 1}
	spec.Bind = BindNone
	assert.NotContains(t, remoteScript(spec), "taskset")
	spec.Bind = BindCore
	assert.Contains(t, remoteScript(spec), "set -- taskset -c $(rdmarun_cpu $c)")
	spec.Bind = BindAuto
	s := remoteScript(spec)
	assert.Contains(t, s, `[ "$RDMARUN_LOCAL_SIZE" -le 2 ] && [ "$RDMARUN_LOCAL_SIZE" -le "$c" ]`)
	assert.Contains(t, s, "set -- taskset -c")
}

// TestRemoteBindWithinAllowedCPUs: a remote rank binds to the local-rank'th
// CPU it may run on, not to that CPU number: under taskset -c 1, local rank
// 0 must pick CPU 1 (CPU 0 is not allowed), and local rank 1 wraps to it.
func TestRemoteBindWithinAllowedCPUs(t *testing.T) {
	if runtime.NumCPU() < 2 {
		t.Skip("needs 2 CPUs")
	}
	for _, tool := range []string{"taskset", "awk"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s", tool)
		}
	}
	for _, tc := range []struct{ mask, rank, want string }{
		{"1", "0", "1"}, {"1", "1", "1"}, {"0,1", "1", "1"}, {"0,1", "2", "0"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		cmd := exec.CommandContext(ctx, "taskset", "-c", tc.mask, "sh", "-c", pickCPU+`rdmarun_cpu $(nproc)`)
		cmd.Env = append(os.Environ(), "RDMARUN_LOCAL_RANK="+tc.rank)
		out, err := cmd.CombinedOutput()
		cancel()
		require.NoError(t, err, "%s", out)
		assert.Equal(t, tc.want, strings.TrimSpace(string(out)), "CPUs %s, local rank %s", tc.mask, tc.rank)
	}
}
