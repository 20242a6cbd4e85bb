package cluster_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/cluster"
	"github.com/rdmago/rdmago/internal/testbin"
)

var (
	prefixMu sync.Mutex
	prefixes []string
)

// TestMain removes every cluster this test binary made, also when it is
// interrupted (SIGINT, SIGTERM): a test's Cleanup does not run then.
func TestMain(m *testing.M) {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		s := <-sig
		sweepAll()
		testbin.Cleanup()
		fmt.Fprintf(os.Stderr, "cluster tests: %v: removed the clusters made\n", s)
		os.Exit(1)
	}()
	code := m.Run()
	sweepAll()
	testbin.Cleanup()
	os.Exit(code)
}

func sweepAll() {
	prefixMu.Lock()
	defer prefixMu.Unlock()
	for _, p := range prefixes {
		_ = cluster.Sweep(p)
	}
}

// up builds a cluster named after this process and the test, removed when
// the test ends. It skips when the machine cannot (not root, no ip).
func up(t *testing.T, o cluster.Options) *cluster.Cluster {
	t.Helper()
	if err := cluster.Check(o); err != nil {
		t.Skipf("%v (the test run as root with iproute2, util-linux and nftables installed)", err)
	}
	prefixMu.Lock()
	o.Prefix = fmt.Sprintf("%s%c", cluster.DefaultPrefix(), 'a'+len(prefixes))
	prefixes = append(prefixes, o.Prefix)
	prefixMu.Unlock()
	o.Logf = t.Logf
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := cluster.Up(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() {
		assert.NoError(t, c.Down())
		assert.Empty(t, cluster.Leftovers(c.Prefix))
	})
	return c
}

func inHost(t *testing.T, c *cluster.Cluster, i int, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := c.Command(ctx, i, name, args...).CombinedOutput()
	require.NoError(t, err, "%s %v in host %d: %s", name, args, i, out)
	return string(out)
}

// Up makes hosts with their own names and addresses and network
// namespaces; Down removes all of it, the processes left inside included.
func TestUpDown(t *testing.T) {
	c := up(t, cluster.Options{Hosts: 3})
	require.Len(t, c.Hosts, 3)
	machine, _ := os.Hostname()
	nets := map[string]bool{}
	for i, h := range c.Hosts {
		assert.Equal(t, fmt.Sprintf("%s-h%d", c.Prefix, i), h.Name)
		assert.Equal(t, fmt.Sprintf("198.18.200.%d", i+1), h.Addr.String())
		assert.Equal(t, h.Name+"\n", inHost(t, c, i, "hostname"))
		assert.Contains(t, inHost(t, c, i, "ip", "-4", "addr", "show", "dev", "eth0"), "inet "+h.Addr.String()+"/24")
		ns, err := os.Readlink("/proc/self/ns/net")
		require.NoError(t, err)
		inner := strings.TrimSpace(inHost(t, c, i, "readlink", "/proc/self/ns/net"))
		assert.NotEqual(t, ns, inner, "host %d has its own network namespace", i)
		nets[inner] = true
	}
	assert.Len(t, nets, 3)
	got, _ := os.Hostname()
	assert.Equal(t, machine, got, "the machine keeps its host name")

	// A process left running in a host (a crashed job's rank) is killed
	// by Down, and nothing named after the cluster remains.
	sleeper := c.Command(context.Background(), 1, "sleep", "600")
	require.NoError(t, sleeper.Start())
	waited := make(chan error, 1)
	go func() { waited <- sleeper.Wait() }()
	require.Eventually(t, func() bool { return len(cluster.PidsIn(c.Hosts[1].Name)) > 0 }, 10*time.Second, 10*time.Millisecond)
	require.NotEmpty(t, cluster.Leftovers(c.Prefix))
	require.NoError(t, c.Down())
	select {
	case err := <-waited:
		assert.Error(t, err, "killed")
	case <-time.After(10 * time.Second):
		t.Fatal("the process in the host survived Down")
	}
	assert.Empty(t, cluster.Leftovers(c.Prefix))
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	require.NoError(t, err)
	assert.NotContains(t, string(out), c.Prefix+"-")
}

func TestBadOptions(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		o    cluster.Options
		want string
	}{
		{cluster.Options{Hosts: 0, Prefix: "x"}, "0 hosts: want 1..250"},
		{cluster.Options{Hosts: 2, Prefix: "Bad-Name"}, `prefix "Bad-Name"`},
		{cluster.Options{Hosts: 2, Prefix: "x", Rate: "fast"}, `rate "fast"`},
		{cluster.Options{Hosts: 2, Prefix: "x", Loss: 101}, "loss 101%: want 0..100"},
	} {
		_, err := cluster.Up(ctx, tc.o)
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	bps, err := cluster.ParseRate("10gbit")
	require.NoError(t, err)
	assert.Equal(t, 10e9, bps)
}

// xcheckLine is what internal/cluster/xcheck prints for a rank that moved
// and checked all its data.
var xcheckLine = regexp.MustCompile(`(?m)^xcheck rank=(\d+) size=(\d+) host=(\S+) hostidx=(\d+) peers=(\S+) ok$`)

// runJob runs xcheck over the cluster with rdmarun started in host 0, slots
// ranks per host, and checks every rank's report: its host, and shm to the
// ranks of its host, tcp to the others.
func runJob(t *testing.T, c *cluster.Cluster, slots int, hostname func(i int) string) {
	t.Helper()
	runXcheck(t, c, slots, hostname, 0)
}

// runXcheck is runJob with xcheck's -soak for soakFor (none when 0); it
// returns the job's standard output.
func runXcheck(t *testing.T, c *cluster.Cluster, slots int, hostname func(i int) string, soakFor time.Duration) string {
	t.Helper()
	bins := testbin.Build(t, "github.com/rdmago/rdmago/cmd/rdmarun", "github.com/rdmago/rdmago/internal/cluster/xcheck")
	np := slots * len(c.Hosts)
	limit := 80*time.Second + 2*soakFor
	argv := append(cluster.Enter(c.Hosts[0].Name), bins[0], "-np", strconv.Itoa(np), "--host", c.HostList(slots),
		"--launch-agent", c.Agent(), "--iface", cluster.Subnet.String(), bins[1], "-timeout", limit.String())
	if soakFor > 0 {
		argv = append(argv, "-soak", soakFor.String())
	}
	r := testbin.Run(t, limit+10*time.Second, testbin.Environ("RDMARUN_*", "RDMAGO_*"), argv[0], argv[1:]...)
	require.Equal(t, 0, r.Code, r)
	lines := xcheckLine.FindAllStringSubmatch(r.Stdout, -1)
	require.Len(t, lines, np, r)
	for _, m := range lines {
		rank, _ := strconv.Atoi(m[1])
		host := rank / slots
		assert.Equal(t, strconv.Itoa(np), m[2])
		assert.Equal(t, hostname(host), m[3], "rank %d", rank)
		assert.Equal(t, strconv.Itoa(host), m[4], "rank %d", rank)
		var want []string
		for p := range np {
			tr := "tcp"
			switch {
			case p == rank:
				tr = "self"
			case p/slots == host:
				tr = "shm"
			}
			want = append(want, fmt.Sprintf("%d:%s@%d", p, tr, p/slots))
		}
		assert.Equal(t, strings.Join(want, ","), m[5], "rank %d: transport@host per peer", rank)
	}
	return r.Stdout
}

// Four ranks on two hosts, two each: collectives and point-to-point both
// ways with every element checked, shm inside a host, tcp between.
func TestJobTwoHostsTwoRanks(t *testing.T) {
	c := up(t, cluster.Options{Hosts: 2})
	runJob(t, c, 2, func(i int) string { return c.Hosts[i].Name })
}

// Random operations across two hosts, every element checked
// (internal/soak through xcheck -soak): with one rank a host, over tcp
// between network namespaces, where a waiting rank reads large messages
// as they arrive, which the in-process soak of comm never does; with two,
// the two-level forms of the collectives (shm inside a host, the leaders
// over tcp) on the world and on random sub-communicators that span the
// hosts or not. A few seconds each in the default run; RDMAGO_LONG=1 runs
// each for RDMAGO_SOAK (default 1m).
func TestSoakAcrossHosts(t *testing.T) {
	d := 3 * time.Second
	if os.Getenv("RDMAGO_LONG") == "1" {
		d = time.Minute
		if v := os.Getenv("RDMAGO_SOAK"); v != "" {
			var err error
			d, err = time.ParseDuration(v)
			require.NoError(t, err, "RDMAGO_SOAK")
		}
	}
	c := up(t, cluster.Options{Hosts: 2})
	for _, slots := range []int{1, 2} {
		t.Run(fmt.Sprintf("%dx%d", len(c.Hosts), slots), func(t *testing.T) {
			out := runXcheck(t, c, slots, func(i int) string { return c.Hosts[i].Name }, d)
			m := regexp.MustCompile(`(?m)^xcheck soak rank=(\d+) rounds=(\d+) ok$`).FindAllStringSubmatch(out, -1)
			require.Len(t, m, slots*len(c.Hosts), out)
			for _, r := range m[1:] {
				assert.Equal(t, m[0][2], r[2], "every rank ran the same rounds")
			}
			rounds, _ := strconv.Atoi(m[0][2])
			assert.Positive(t, rounds, out)
			t.Logf("%d rounds in %v", rounds, d)
		})
	}
}

// Hosts that share a host name (containers, bare network namespaces) are
// still two hosts: tcp between them on routable addresses.
func TestJobSharedHostname(t *testing.T) {
	c := up(t, cluster.Options{Hosts: 2, ShareHostname: true})
	machine, err := os.Hostname()
	require.NoError(t, err)
	assert.Equal(t, machine+"\n", inHost(t, c, 1, "hostname"))
	runJob(t, c, 2, func(int) string { return machine })
}

// On links shaped to a rate and dropping 1% of packets at random, the data
// still arrives intact; the shaping is in place and did drop packets.
func TestJobShapedLossy(t *testing.T) {
	o := cluster.Options{Hosts: 2, Rate: "1gbit", Loss: 1}
	if err := cluster.Check(o); err != nil {
		t.Skipf("%v (shaping needs tc and nft)", err)
	}
	c := up(t, o)
	for i := range c.Hosts {
		assert.Regexp(t, `tbf .*rate 1Gbit`, inHost(t, c, i, "tc", "qdisc", "show", "dev", "eth0"))
	}
	runJob(t, c, 1, func(i int) string { return c.Hosts[i].Name })
	dropped := 0
	for i := range c.Hosts {
		rules := inHost(t, c, i, "nft", "list", "table", "netdev", "rdmacluster")
		m := regexp.MustCompile(`numgen random mod 10000 < 100 counter packets (\d+)`).FindStringSubmatch(rules)
		require.NotNil(t, m, rules)
		n, _ := strconv.Atoi(m[1])
		t.Logf("host %d dropped %d packets", i, n)
		dropped += n
	}
	assert.Positive(t, dropped, "the 1% loss rule dropped packets during the job")
}

// Up interrupted half way (its context canceled, as a signal would) removes
// what it had built.
func TestUpInterrupted(t *testing.T) {
	o := cluster.Options{Hosts: 3}
	if err := cluster.Check(o); err != nil {
		t.Skipf("%v (the test runs as root with iproute2 and util-linux)", err)
	}
	prefixMu.Lock()
	o.Prefix = fmt.Sprintf("%s%c", cluster.DefaultPrefix(), 'a'+len(prefixes))
	prefixes = append(prefixes, o.Prefix)
	prefixMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n := 0
	o.Logf = func(f string, a ...any) {
		if n++; n == 12 { // in the middle of the second host
			require.NotEmpty(t, cluster.Leftovers(o.Prefix))
			cancel()
		}
	}
	_, err := cluster.Up(ctx, o)
	require.Error(t, err)
	assert.Empty(t, cluster.Leftovers(o.Prefix))
}

// reachable reports whether host from reaches host to: a TCP connection
// to a port nothing listens on is refused at once when packets pass, and
// times out when they do not.
func reachable(t *testing.T, c *cluster.Cluster, from, to int) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := fmt.Sprintf("timeout 1 bash -c '</dev/tcp/%s/9' 2>&1; echo status=$?", c.Hosts[to].Addr)
	out, _ := c.Command(ctx, from, "bash", "-c", probe).CombinedOutput()
	switch {
	case strings.Contains(string(out), "Connection refused"):
		return true
	case strings.Contains(string(out), "status=124"), strings.Contains(string(out), "No route to host"):
		return false
	}
	t.Fatalf("probe from host %d to host %d: %s", from, to, out)
	return false
}

// SetLink cuts a host off and restores it; SetLoss 100 drops everything
// the host receives while its link stays up, and 0 lets it all through.
func TestSetLinkAndLoss(t *testing.T) {
	o := cluster.Options{Hosts: 2}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("nft is not installed")
	}
	c := up(t, o)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.True(t, reachable(t, c, 0, 1))
	require.NoError(t, c.SetLink(ctx, 1, false))
	assert.False(t, reachable(t, c, 0, 1), "after the cut")
	require.NoError(t, c.SetLink(ctx, 1, true))
	require.Eventually(t, func() bool { return reachable(t, c, 0, 1) }, 20*time.Second, 100*time.Millisecond, "after the restore")
	require.NoError(t, c.SetLoss(ctx, 1, 100))
	assert.False(t, reachable(t, c, 0, 1), "with 100% loss")
	require.NoError(t, c.SetLoss(ctx, 1, 0))
	assert.True(t, reachable(t, c, 0, 1), "with the loss rule replaced by 0%")
	assert.Error(t, c.SetLink(ctx, 2, false), "no host 2")
	assert.Error(t, c.SetLoss(ctx, 0, 101))
}
