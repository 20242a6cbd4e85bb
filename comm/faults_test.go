package comm_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/internal/cluster"
	"github.com/rdmago/rdmago/internal/testbin"
)

// The fault matrix: real jobs under rdmarun (comm/internal/faultprog, one
// process per rank) into which one fault is injected, and the promise
// checked for each (docs/errors.md, "The fault matrix"):
//
//   - every surviving rank's call fails with the right sentinel
//     (ErrPeerLost for a rank killed, stopped or cut off; ErrClosed for a
//     rank that closed and left) naming the right rank, within the
//     liveness timeout plus one second of the fault;
//   - rdmarun exits non-zero and its last line names the rank where the
//     failure began;
//   - nothing is left: no process of the job, no listening socket of the
//     rendezvous or an shm device, no /dev/shm entry, no status file.
//
// A handful of cases runs by default; RDMAGO_LONG=1 runs them all:
//
//	RDMAGO_LONG=1 go test -count=1 -v -run 'TestFault' ./comm/ | grep -A70 'fault matrix'

// faultLiveness is the ranks' liveness timeout: short, so that a stopped
// rank is found in seconds. The promise is detection within it plus 1 s.
const faultLiveness = 1500 * time.Millisecond

var faultRdmarun, faultProg string

func buildFaultBinaries(t *testing.T) {
	t.Helper()
	bins := testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/comm/internal/faultprog")
	faultRdmarun, faultProg = bins[0], bins[1]
}

func faultsLong() bool { return os.Getenv("RDMAGO_LONG") == "1" }

// detectBound is how soon after a fault every survivor must fail: the
// promise, liveness plus 1 s, in the full matrix; the default selection,
// which runs under -race beside the rest of the test run on a shared
// machine, allows 2 s more, so that it catches a lost detection (a hang,
// a wait for a timeout) without failing on a slow scheduler.
func detectBound() time.Duration {
	if faultsLong() {
		return faultLiveness + time.Second
	}
	return faultLiveness + 3*time.Second
}

// faultJob is a running rdmarun job whose output the test reads as it
// comes.
type faultJob struct {
	t              *testing.T
	cmd            *exec.Cmd
	stdout, stderr testbin.Buffer
	done           chan struct{}
	code           int
	runDir         string // the job's XDG_RUNTIME_DIR (status files)
	start          time.Time
}

// startFaultJob starts argv (rdmarun, possibly behind nsenter) in a process
// group of its own, with a private XDG_RUNTIME_DIR; the group is killed at
// the end of the test if it is still there.
func startFaultJob(t *testing.T, argv []string) *faultJob {
	t.Helper()
	j := &faultJob{t: t, done: make(chan struct{}), runDir: filepath.Join(t.TempDir(), "run")}
	require.NoError(t, os.Mkdir(j.runDir, 0o700))
	j.cmd = exec.Command(argv[0], argv[1:]...)
	j.cmd.Env = append(testbin.Environ("RDMARUN_*", "RDMAGO_*", "XDG_RUNTIME_DIR"), "XDG_RUNTIME_DIR="+j.runDir)
	j.cmd.Stdout, j.cmd.Stderr = &j.stdout, &j.stderr
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	j.start = time.Now()
	require.NoError(t, j.cmd.Start())
	go func() {
		err := j.cmd.Wait()
		j.code = 0
		if err != nil {
			j.code = -1
			if ee, ok := err.(*exec.ExitError); ok {
				j.code = ee.ExitCode()
			}
		}
		close(j.done)
	}()
	t.Cleanup(func() {
		select {
		case <-j.done:
		default:
			syscall.Kill(-j.cmd.Process.Pid, syscall.SIGKILL) // the group this test made
			<-j.done
		}
	})
	return j
}

func (j *faultJob) String() string {
	return fmt.Sprintf("%s\n--- stdout:\n%s--- stderr:\n%s", strings.Join(j.cmd.Args, " "), j.stdout.String(), j.stderr.String())
}

// wait waits for rdmarun to exit; past timeout the test fails (the job is
// killed by the cleanup).
func (j *faultJob) wait(timeout time.Duration) {
	j.t.Helper()
	select {
	case <-j.done:
	case <-time.After(timeout):
		j.t.Fatalf("rdmarun still running %v after it started: a hang\n%s", timeout, j)
	}
}

// lines returns the submatches of every stdout line matching re, once n
// of them have appeared (or rdmarun has exited, or timeout has passed:
// then what there is).
func (j *faultJob) lines(re *regexp.Regexp, n int, timeout time.Duration) [][]string {
	deadline := time.Now().Add(timeout)
	for {
		ms := re.FindAllStringSubmatch(j.stdout.String(), -1)
		if len(ms) >= n || time.Now().After(deadline) {
			return ms
		}
		select {
		case <-j.done:
			return re.FindAllStringSubmatch(j.stdout.String(), -1)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

var (
	joinedRE  = regexp.MustCompile(`(?m)^joined rank=(\d+) pid=(\d+) addr=(\S+) t=(\d+)$`)
	loopingRE = regexp.MustCompile(`(?m)^looping rank=(\d+) t=(\d+)$`)
	injectRE  = regexp.MustCompile(`(?m)^inject rank=(\d+) fault=(\w+) at=(\w+) t=(\d+)$`)
	failRE    = regexp.MustCompile(`(?m)^fail rank=(\d+) t=(\d+) iter=(\d+) sentinel=(\w+) named=(-?\d+) err=(.*)$`)
	okRE      = regexp.MustCompile(`(?m)^ok rank=(\d+) iters=(\d+)$`)
)

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

func atoi64(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}

// jobProcs are the ranks' pids by rank, and the rendezvous address.
func (j *faultJob) jobProcs() (map[int]int, string) {
	pids := map[int]int{}
	addr := ""
	for _, m := range joinedRE.FindAllStringSubmatch(j.stdout.String(), -1) {
		pids[atoi(m[1])] = atoi(m[2])
		addr = m[3]
	}
	return pids, addr
}

// shmEntries lists /dev/shm entries that rdmago would have named.
func shmEntries() []string {
	ents, _ := os.ReadDir("/dev/shm")
	var out []string
	for _, e := range ents {
		if strings.Contains(e.Name(), "rdmago") {
			out = append(out, e.Name())
		}
	}
	return out
}

// checkNothingLeft checks, after rdmarun exited, that no rank process is
// alive, no shm device socket of a rank and no rendezvous listener
// remain, /dev/shm holds nothing new of rdmago's, and no live status file
// is left.
func (j *faultJob) checkNothingLeft(np int, shmBefore []string, listening func() []int) {
	t := j.t
	t.Helper()
	pids, addr := j.jobProcs()
	assert.Len(t, pids, np, "every rank joined (and printed its pid)")
	for r, pid := range pids {
		assert.Eventually(t, func() bool { return pidGone(pid) }, 5*time.Second, 10*time.Millisecond,
			"rank %d (pid %d) still running after rdmarun exited", r, pid)
	}
	assert.Empty(t, testbin.GroupMembers(j.cmd.Process.Pid), "processes of rdmarun's group left")
	unixSocks, _ := os.ReadFile("/proc/net/unix")
	for r, pid := range pids {
		assert.NotRegexp(t, fmt.Sprintf(`@rdmago-shm\.[0-9a-f]+\.%d\.`, pid), string(unixSocks), "rank %d's shm device socket left", r)
	}
	if _, port, err := net.SplitHostPort(addr); err == nil {
		assert.NotContains(t, listening(), atoi(port), "the rendezvous %s still listens", addr)
	}
	assert.Subset(t, shmBefore, shmEntries(), "new rdmago entries in /dev/shm")
	files, err := bootstrap.ReadStatusFiles(filepath.Join(j.runDir, "rdmago"))
	assert.NoError(t, err)
	assert.Empty(t, files, "status files of the job left (ReadStatusFiles sweeps a dead rank 0's)")
}

func pidGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i >= 0 && i+2 < len(b) && b[i+2] == 'Z'
}

func localListeners() []int { return tcpListeners("/proc/net/tcp", "/proc/net/tcp6") }

// tcpListeners lists the ports in LISTEN state in the given /proc/net
// tables.
func tcpListeners(tables ...string) []int {
	var ports []int
	for _, tab := range tables {
		b, _ := os.ReadFile(tab)
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) < 4 || fs[3] != "0A" {
				continue
			}
			_, port, _ := strings.Cut(fs[1], ":")
			p, _ := strconv.ParseInt(port, 16, 32)
			ports = append(ports, int(p))
		}
	}
	return ports
}

// faultCase is one cell of the matrix.
type faultCase struct {
	transport string
	np        int
	victim    int
	coll      string // the collective family the ranks loop over
	fault     string // kill, stop, leave
	at        string // startup, coll, close
	n         int    // elements per rank and block
	short     bool   // in the default selection
}

func (c faultCase) name() string {
	s := fmt.Sprintf("%s/%s-%s/%s/victim=%d", c.transport, c.fault, c.at, c.coll, c.victim)
	if c.n > 1 {
		s += fmt.Sprintf("/n=%d", c.n)
	}
	return s
}

// wantSentinels are the sentinels a survivor may report: a rank that
// closed and left is not lost, a rank killed or stopped is, and one
// killed or stopped inside Close may have said goodbye to some ranks
// first.
func (c faultCase) wantSentinels() []string {
	switch {
	case c.fault == "leave":
		return []string{"closed"}
	case c.at == "close":
		return []string{"lost", "closed"}
	}
	return []string{"lost"}
}

func faultCases() []faultCase {
	var cs []faultCase
	colls := []string{"barrier", "bcast", "allreduce", "reduce", "gather", "alltoall"}
	for _, tr := range []string{"shm", "tcp"} {
		v := 0
		for _, fault := range []string{"kill", "stop", "leave"} {
			cs = append(cs, faultCase{transport: tr, np: 4, victim: v % 4, coll: "allreduce", fault: fault, at: "startup", n: 1})
			v++
			for _, coll := range colls {
				cs = append(cs, faultCase{transport: tr, np: 4, victim: v % 4, coll: coll, fault: fault, at: "coll", n: 1})
				v++
			}
			if fault != "leave" {
				cs = append(cs, faultCase{transport: tr, np: 4, victim: v % 4, coll: "barrier", fault: fault, at: "close", n: 1})
				v++
			}
		}
		// Large messages: the fault strikes while data is in flight.
		for _, coll := range []string{"allreduce", "bcast"} {
			cs = append(cs, faultCase{transport: tr, np: 4, victim: 1, coll: coll, fault: "kill", at: "coll", n: 128 << 10})
		}
	}
	// The default selection: each fault and place once, both transports.
	short := map[string]bool{
		"shm/kill-coll/allreduce/victim=3":    true,
		"tcp/kill-coll/bcast/victim=2":        true,
		"shm/stop-coll/gather/victim=1":       true,
		"tcp/stop-coll/alltoall/victim=2":     true,
		"tcp/leave-coll/barrier/victim=1":     true,
		"shm/leave-coll/bcast/victim=2":       true,
		"tcp/kill-startup/allreduce/victim=0": true,
		"shm/stop-close/barrier/victim=3":     true,
	}
	for i := range cs {
		cs[i].short = short[cs[i].name()]
	}
	return cs
}

// faultFigures collects the detection times for the summary table.
type faultFigures struct {
	mu   sync.Mutex
	rows []string
}

func (f *faultFigures) add(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rows = append(f.rows, fmt.Sprintf(format, args...))
}

func (f *faultFigures) log(t *testing.T, title string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Logf("fault matrix: %s (liveness %v; detection from the fault to each survivor's error: min / max)\n%s", title, faultLiveness, strings.Join(f.rows, "\n"))
}

// TestFaultMatrix injects a fault into one rank of a four-rank job on one
// host: SIGKILL or SIGSTOP at start-up, inside each collective family and
// inside Close, or a rank that closes and exits 0 early.
func TestFaultMatrix(t *testing.T) {
	buildFaultBinaries(t)
	var figs faultFigures
	defer figs.log(t, "one host")
	for _, fc := range faultCases() {
		t.Run(fc.name(), func(t *testing.T) {
			if !fc.short && !faultsLong() {
				t.Skip("RDMAGO_LONG=1 runs the whole matrix")
			}
			lo, hi := runFaultCase(t, fc)
			figs.add("%-44s %8v %8v", fc.name(), lo.Round(time.Millisecond), hi.Round(time.Millisecond))
		})
	}
}

// runFaultCase runs one case and checks the promise; it returns the
// survivors' fastest and slowest detection.
func runFaultCase(t *testing.T, fc faultCase) (lo, hi time.Duration) {
	shmBefore := shmEntries()
	// The grace lets the survivors of a killed rank, which rdmarun stops
	// at once, notice by themselves; a stopped rank's survivors exit by
	// themselves, and the grace only delays the stopped rank's SIGKILL.
	grace := "3s"
	if fc.fault == "stop" {
		grace = "1s"
	}
	argv := []string{faultRdmarun, "-np", strconv.Itoa(fc.np), "--transport", fc.transport, "--grace", grace, "--connect-timeout", "30s",
		faultProg, "-coll", fc.coll, "-n", strconv.Itoa(fc.n), "-victim", strconv.Itoa(fc.victim), "-fault", fc.fault, "-at", fc.at,
		"-liveness", faultLiveness.String()}
	j := startFaultJob(t, argv)
	j.wait(60 * time.Second)
	t.Logf("exit %d after %v\n%s", j.code, time.Since(j.start).Round(time.Millisecond), j)

	inj := injectRE.FindStringSubmatch(j.stdout.String())
	require.NotNil(t, inj, "the victim never injected its fault\n%s", j)
	t0 := atoi64(inj[4])
	fails := failRE.FindAllStringSubmatch(j.stdout.String(), -1)
	got := map[int]bool{}
	lo, hi = time.Duration(1<<62), 0
	for _, m := range fails {
		r := atoi(m[1])
		if r == fc.victim {
			continue // a stopped victim woken by SIGCONT is no survivor
		}
		got[r] = true
		d := time.Duration(atoi64(m[2]) - t0)
		lo, hi = min(lo, d), max(hi, d)
		assert.Contains(t, fc.wantSentinels(), m[4], "rank %d's error: %s", r, m[6])
		assert.Equal(t, fc.victim, atoi(m[5]), "rank %d's error names rank %s, not the victim: %s", r, m[5], m[6])
		assert.LessOrEqual(t, d, detectBound(), "rank %d noticed %v after the fault: %s", r, d, m[6])
	}
	for r := range fc.np {
		if r != fc.victim {
			assert.True(t, got[r], "rank %d never reported the failure (killed by rdmarun while it waited?)", r)
		}
	}
	assert.NotEqual(t, 0, j.code, "rdmarun's exit status")
	// rdmarun names the rank where the failure began: the rank killed, or
	// by the survivors' reports the rank stopped or gone.
	began := fmt.Sprintf(`(?m)^rdmarun: job \w+ failed: (rank %d \(host \S+, pid \d+\) was killed by signal SIGKILL|the failure began at rank %d \(host \S+\), which (was lost|closed its communicator early))`, fc.victim, fc.victim)
	assert.Regexp(t, began, j.stderr.String())
	j.checkNothingLeft(fc.np, shmBefore, localListeners)
	t.Logf("detection: %v to %v", lo, hi)
	return lo, hi
}

// TestFaultMatrixNetwork cuts, blackholes and degrades the link of one
// host of three (network namespaces joined by a bridge, internal/cluster;
// one rank per host, over tcp) while the ranks loop over allreduces: the
// ranks on the other hosts must fail naming the rank cut off, within the
// liveness bound, and rdmarun must name it too, also once the link is
// back; random loss that TCP repairs must not fail the job.
func TestFaultMatrixNetwork(t *testing.T) {
	o := cluster.Options{Hosts: 3, ShareHostname: true, Prefix: fmt.Sprintf("rdf%d", os.Getpid())}
	if err := cluster.Check(cluster.Options{Hosts: 3, Loss: 1}); err != nil {
		t.Skipf("%v (the test run as root with iproute2, util-linux and nftables installed)", err)
	}
	buildFaultBinaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, o)
	require.NoError(t, err)
	defer func() {
		assert.NoError(t, c.Down())
		assert.Empty(t, cluster.Leftovers(c.Prefix), "namespaces left")
	}()
	var figs faultFigures
	defer figs.log(t, "three hosts, tcp")
	const victim = 2 // the rank on host 2
	cut := func(on bool) error { return c.SetLink(ctx, victim, !on) }
	blackhole := func(on bool) error {
		if on {
			return c.SetLoss(ctx, victim, 100)
		}
		return c.SetLoss(ctx, victim, 0)
	}
	for _, tc := range []struct {
		name  string
		fault func(on bool) error
		short bool
		// lateBug, when set, says why the survivors notice later than
		// the liveness bound: a known failure of the promise, reported
		// by a skip once every other check has passed.
		lateBug string
	}{
		{"link-cut-and-restored", cut, true, ""},
		{"silent-partition", blackhole, false, "known failure: in a one-way partition the survivors notice only once the cut-off rank's frames stop arriving; " +
			"its TCP sends what its congestion window holds without ACKs (a second or more of heartbeats) before it stalls, and p2p's liveness " +
			"looks only at frames received, not at frames sent and never acknowledged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.short && !faultsLong() {
				t.Skip("RDMAGO_LONG=1 runs the whole matrix")
			}
			shmBefore := shmEntries()
			j := startFaultJob(t, clusterJob(c, faultLiveness, "-coll", "allreduce", "-n", "64"))
			require.Len(t, j.lines(loopingRE, 3, 60*time.Second), 3, "every rank looping\n%s", j)
			t0 := time.Now()
			require.NoError(t, tc.fault(true))
			fails := j.lines(failRE, 2, 20*time.Second) // the two survivors, at least
			require.NoError(t, tc.fault(false))
			j.wait(60 * time.Second)
			t.Logf("exit %d after %v\n%s", j.code, time.Since(j.start).Round(time.Millisecond), j)
			lo, hi := time.Duration(1<<62), time.Duration(0)
			got := map[int]bool{}
			for _, m := range fails {
				r := atoi(m[1])
				if r == victim {
					continue // cut off itself: it sees the others lost
				}
				got[r] = true
				d := time.Unix(0, atoi64(m[2])).Sub(t0)
				lo, hi = min(lo, d), max(hi, d)
				assert.Equal(t, "lost", m[4], "rank %d's error: %s", r, m[6])
				assert.Equal(t, victim, atoi(m[5]), "rank %d's error names rank %s, not the rank cut off: %s", r, m[5], m[6])
				if tc.lateBug == "" {
					assert.LessOrEqual(t, d, detectBound(), "rank %d noticed %v after the cut: %s", r, d, m[6])
				}
			}
			assert.True(t, got[0] && got[1], "ranks 0 and 1 both reported the loss")
			assert.NotEqual(t, 0, j.code, "rdmarun's exit status")
			assert.Regexp(t, fmt.Sprintf(`(?m)^rdmarun: job \w+ failed: the failure began at rank %d \(host \S+\), which was lost`, victim), j.stderr.String())
			j.checkNothingLeft(3, shmBefore, func() []int { return clusterListeners(t, c, 0) })
			figs.add("%-44s %8v %8v", "tcp/"+tc.name+"/victim=2", lo.Round(time.Millisecond), hi.Round(time.Millisecond))
			if tc.lateBug != "" && hi > faultLiveness+time.Second {
				t.Skipf("noticed %v after the fault, over the bound of %v: %s", hi.Round(time.Millisecond), faultLiveness+time.Second, tc.lateBug)
			}
		})
	}
	t.Run("random-loss", func(t *testing.T) {
		if !faultsLong() {
			t.Skip("RDMAGO_LONG=1 runs the whole matrix")
		}
		// 3% of the packets to host 2 dropped: TCP repairs it, well within
		// a liveness timeout above its retransmission back-off, so the
		// job must end well, every result checked.
		shmBefore := shmEntries()
		require.NoError(t, c.SetLoss(ctx, victim, 3))
		defer func() { assert.NoError(t, c.SetLoss(ctx, victim, 0)) }()
		j := startFaultJob(t, clusterJob(c, 5*time.Second, "-coll", "allreduce", "-n", "4096", "-iters", "300"))
		j.wait(2 * time.Minute)
		t.Logf("exit %d after %v\n%s", j.code, time.Since(j.start).Round(time.Millisecond), j)
		assert.Equal(t, 0, j.code)
		assert.Len(t, okRE.FindAllString(j.stdout.String(), -1), 3, "every rank ends well")
		cmd := c.Command(ctx, victim, "nft", "list", "table", "netdev", "rdmacluster")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		m := regexp.MustCompile(`counter packets (\d+)`).FindStringSubmatch(string(out))
		require.NotNil(t, m, "%s", out)
		assert.Positive(t, atoi(m[1]), "the loss rule dropped packets during the job")
		t.Logf("dropped %s packets to host 2", m[1])
		j.checkNothingLeft(3, shmBefore, func() []int { return clusterListeners(t, c, 0) })
	})
}

// clusterJob is the command line of a job of one rank per host of c, with
// rdmarun in host 0.
func clusterJob(c *cluster.Cluster, liveness time.Duration, prog ...string) []string {
	argv := append(cluster.Enter(c.Hosts[0].Name), faultRdmarun, "-np", strconv.Itoa(len(c.Hosts)), "--host", c.HostList(1),
		"--launch-agent", c.Agent(), "--iface", cluster.Subnet.String(), "--transport", "tcp", "--grace", "3s", "--connect-timeout", "30s",
		faultProg, "-liveness", liveness.String())
	return append(argv, prog...)
}

// clusterListeners lists the listening TCP ports in host i.
func clusterListeners(t *testing.T, c *cluster.Cluster, i int) []int {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	cmd := c.Command(ctx, i, "sh", "-c", "cat /proc/net/tcp > "+dir+"/tcp; cat /proc/net/tcp6 > "+dir+"/tcp6")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("reading host %d's sockets: %v: %s", i, err, out)
	}
	return tcpListeners(filepath.Join(dir, "tcp"), filepath.Join(dir, "tcp6"))
}

// TestFaultStrangers has strangers connect to every listener of a running
// job while its ranks loop over checked allreduces: rdmarun's rendezvous,
// each rank's status endpoint, its tcp transport's listener (over tcp) and
// its shm device's abstract socket (over shm). Each listener gets a
// connection closed at once, one that sends garbage and closes, one that
// sends garbage and stays, and one that stays silent. The job must not
// notice: every rank ends well, and the silent connections still open do
// not hold up its end.
func TestFaultStrangers(t *testing.T) {
	buildFaultBinaries(t)
	for _, tr := range []string{"shm", "tcp"} {
		t.Run(tr, func(t *testing.T) {
			if tr == "tcp" && !faultsLong() {
				t.Skip("RDMAGO_LONG=1 runs the whole matrix")
			}
			shmBefore := shmEntries()
			until := filepath.Join(t.TempDir(), "until")
			j := startFaultJob(t, []string{faultRdmarun, "-np", "3", "--transport", tr, "--grace", "3s", "--connect-timeout", "30s",
				faultProg, "-coll", "allreduce", "-n", "1024", "-until", until, "-liveness", faultLiveness.String()})
			require.Len(t, j.lines(loopingRE, 3, 60*time.Second), 3, "every rank looping\n%s", j)
			pids, _ := j.jobProcs()
			procs := []int{j.cmd.Process.Pid}
			for _, p := range pids {
				procs = append(procs, p)
			}
			var tcps, unixes []string
			for _, p := range procs {
				tl, ul := listenersOf(p)
				tcps, unixes = append(tcps, tl...), append(unixes, ul...)
			}
			t.Logf("listeners: tcp %v, unix %v", tcps, unixes)
			// rdmarun's rendezvous and a status endpoint per rank at least;
			// a transport listener per rank over tcp, a device socket per
			// rank over shm.
			wantTCP, wantUnix := 1+3, 0
			if tr == "tcp" {
				wantTCP += 3
			} else {
				wantUnix = 3
			}
			require.GreaterOrEqual(t, len(tcps), wantTCP, "listening TCP sockets of the job")
			require.GreaterOrEqual(t, len(unixes), wantUnix, "abstract shm device sockets of the job")
			var held []net.Conn
			defer func() {
				for _, c := range held {
					c.Close()
				}
			}()
			garbage := make([]byte, 4096)
			for _, a := range append(tagged("tcp", tcps), tagged("unix", unixes)...) {
				for kind := range 4 {
					c, err := net.DialTimeout(a[0], a[1], 5*time.Second)
					if !assert.NoError(t, err, "a stranger connecting to %s %s", a[0], a[1]) {
						continue
					}
					c.SetWriteDeadline(time.Now().Add(5 * time.Second))
					if kind == 1 || kind == 2 {
						rand.Read(garbage)
						c.Write(garbage) // a listener may hang up at once: no error to check
					}
					if kind >= 2 {
						held = append(held, c)
					} else {
						c.Close()
					}
				}
			}
			// The job goes on: rank 0 sees the file after some more calls.
			loops := j.lines(okRE, 0, 0)
			require.Empty(t, loops, "the job ended before the strangers were done\n%s", j)
			require.NoError(t, os.WriteFile(until, nil, 0o644))
			j.wait(60 * time.Second)
			t.Logf("exit %d after %v\n%s", j.code, time.Since(j.start).Round(time.Millisecond), j)
			assert.Equal(t, 0, j.code, "rdmarun's exit status")
			assert.Len(t, okRE.FindAllString(j.stdout.String(), -1), 3, "every rank ends well")
			assert.Empty(t, failRE.FindAllString(j.stdout.String(), -1))
			j.checkNothingLeft(3, shmBefore, localListeners)
		})
	}
}

func tagged(network string, addrs []string) [][2]string {
	var out [][2]string
	for _, a := range addrs {
		out = append(out, [2]string{network, a})
	}
	return out
}

// listenersOf lists the listening sockets of process pid: TCP as
// host:port to dial (127.0.0.1 for an unspecified address), abstract Unix
// sockets as "@name".
func listenersOf(pid int) (tcps, unixes []string) {
	inodes := map[string]bool{}
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	for _, tab := range []string{"tcp", "tcp6"} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, tab))
		for _, l := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(l)
			if len(fs) < 10 || fs[3] != "0A" || !inodes[fs[9]] {
				continue
			}
			hexIP, hexPort, _ := strings.Cut(fs[1], ":")
			port, _ := strconv.ParseInt(hexPort, 16, 32)
			ip := procIP(hexIP)
			if ip == nil || ip.IsUnspecified() {
				ip = net.IPv4(127, 0, 0, 1)
			}
			tcps = append(tcps, net.JoinHostPort(ip.String(), strconv.Itoa(int(port))))
		}
	}
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/unix", pid))
	for _, l := range strings.Split(string(b), "\n")[1:] {
		// Num RefCount Protocol Flags Type St Inode Path; Flags 00010000
		// is a listening socket.
		fs := strings.Fields(l)
		if len(fs) >= 8 && fs[3] == "00010000" && inodes[fs[6]] && strings.HasPrefix(fs[7], "@") {
			unixes = append(unixes, fs[7])
		}
	}
	return tcps, unixes
}

// procIP decodes an address of /proc/net/tcp{,6}: 32-bit words in host
// (little-endian) order.
func procIP(h string) net.IP {
	b := make([]byte, len(h)/2)
	for i := range b {
		v, err := strconv.ParseUint(h[2*i:2*i+2], 16, 8)
		if err != nil {
			return nil
		}
		b[i] = byte(v)
	}
	for w := 0; w+4 <= len(b); w += 4 {
		b[w], b[w+1], b[w+2], b[w+3] = b[w+3], b[w+2], b[w+1], b[w]
	}
	return net.IP(b)
}
