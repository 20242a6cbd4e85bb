package affinity

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartPinned: the child runs on the one CPU it was given, and the
// caller's own CPUs are as before.
func TestStartPinned(t *testing.T) {
	before, err := CPUs()
	require.NoError(t, err)
	require.NotEmpty(t, before)
	cpu := before[len(before)-1]
	cmd := exec.Command("sleep", "30")
	require.NoError(t, StartPinned(cmd, cpu))
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }) // by PID
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	require.NoError(t, err)
	var allowed string
	for _, l := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			allowed = strings.TrimSpace(v)
		}
	}
	require.Equal(t, strconv.Itoa(cpu), allowed, "the child's CPUs")
	after, err := CPUs()
	require.NoError(t, err)
	require.Equal(t, before, after, "the caller's CPUs")
}

// TestPinThreadBadCPU: a CPU the thread may not use is an error, and the
// thread is left as it was.
func TestPinThreadBadCPU(t *testing.T) {
	before, err := CPUs()
	require.NoError(t, err)
	_, err = PinThread(1023)
	if err == nil {
		t.Skip("CPU 1023 exists here")
	}
	require.ErrorContains(t, err, "pin to CPU 1023")
	after, err := CPUs()
	require.NoError(t, err)
	require.Equal(t, before, after)
}

func TestGroupByPackage(t *testing.T) {
	pkg := map[int]int{0: 1, 1: 0, 2: 1, 3: 0}
	got := groupByPackage([]int{0, 1, 2, 3, 4}, func(c int) (int, bool) {
		id, ok := pkg[c]
		return id, ok
	})
	// Groups in the order of their first CPU; CPU 4's package is unknown: 0.
	want := [][]int{{0, 2}, {1, 3, 4}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("groupByPackage = %v, want %v", got, want)
	}
}

func TestSocketsCoverEveryCPU(t *testing.T) {
	cpus, err := CPUs()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range Sockets(cpus) {
		n += len(g)
	}
	if n != len(cpus) {
		t.Fatalf("Sockets(%v) holds %d CPUs", cpus, n)
	}
}
