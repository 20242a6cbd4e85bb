// Package cluster builds a cluster of "hosts" on one Linux machine, for the
// project's multi-host tests and cross-host benchmarks. Each host is a
// network namespace with a UTS namespace of its own (its own host name),
// connected by a veth pair to a bridge in a switch namespace, with an
// address in 198.18.200.0/24 (RFC 2544 benchmarking space). Optionally each
// host's link is shaped: a rate (tc tbf, both directions, like a NIC of
// that speed) and random loss (nftables: numgen random on the host's
// ingress, so senders see a real loss, not a local drop).
//
// Nothing runs in the background: the namespaces persist as bind mounts
// (ip netns under /run/netns, the UTS namespaces under RunDir), and a
// command enters a host with nsenter. Down removes everything, killing
// the processes still inside the hosts first; Sweep does the same for the
// leftovers of a crashed run by their name prefix. Every name starts with
// the cluster's prefix (by default "rdc" and the creating process's pid),
// so clusters of concurrent runs never meet: each has its own switch
// namespace, and nothing is added to the machine's own network namespace.
//
// It needs root and iproute2's ip, plus util-linux's unshare, nsenter and
// umount; tc for a rate, nft for loss.
package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RunDir holds the bind mounts of the hosts' UTS namespaces, one file per
// host, named after it.
const RunDir = "/run/rdmacluster"

// netnsDir is where ip netns keeps its namespaces.
const netnsDir = "/run/netns"

// Subnet holds the hosts' addresses: host i is .(i+1).
var Subnet = netip.MustParsePrefix("198.18.200.0/24")

// MaxHosts is the largest cluster (the subnet's usable addresses).
const MaxHosts = 250

// Options describe a cluster.
type Options struct {
	// Hosts is the number of hosts, 1..MaxHosts.
	Hosts int
	// Prefix starts every name the cluster creates (namespaces, host
	// names): lower-case letters and digits, 1 to 16, starting with a
	// letter. Empty means DefaultPrefix().
	Prefix string
	// Rate shapes each host's link in each direction with tc tbf, in tc's
	// syntax ("10gbit", "25gbit", "500mbit"). Empty leaves it unshaped.
	Rate string
	// Loss is the percentage of packets each host's link drops on arrival
	// (0 to 100, to 0.01), chosen at random by nftables. Zero drops none.
	Loss float64
	// ShareHostname keeps the machine's host name in every host (no UTS
	// namespace of their own): hosts are then told apart only by their
	// network namespaces, as containers sharing a name would be.
	ShareHostname bool
	// Logf, when set, receives each command run.
	Logf func(format string, args ...any)
}

// Host is one host of a cluster.
type Host struct {
	// Name is the host's network namespace and, unless ShareHostname, its
	// host name: "<prefix>-h<i>".
	Name string
	// Addr is its address on the cluster's bridge.
	Addr netip.Addr
}

// Cluster is a running cluster. Its methods are safe for concurrent use;
// Down must be the last call.
type Cluster struct {
	Prefix string
	Hosts  []Host
	opts   Options
}

// DefaultPrefix is "rdc" and this process's pid: unique among the
// processes alive, and it tells Sweep whose cluster a leftover was.
func DefaultPrefix() string { return fmt.Sprintf("rdc%d", os.Getpid()) }

var prefixRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,15}$`)

// ErrUnsupported is returned when this machine cannot build a cluster (not
// root, not Linux, a tool missing); the message says what is missing.
var ErrUnsupported = errors.New("cluster: unsupported here")

// Check reports whether a cluster with these options can be built here:
// root, and the tools the options need.
func Check(o Options) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%w: network namespaces need root", ErrUnsupported)
	}
	tools := []string{"ip", "nsenter", "umount"}
	if !o.ShareHostname {
		tools = append(tools, "unshare")
	}
	if o.Rate != "" {
		tools = append(tools, "tc")
	}
	if o.Loss > 0 {
		tools = append(tools, "nft")
	}
	for _, t := range tools {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("%w: %s is not installed", ErrUnsupported, t)
		}
	}
	return nil
}

func (o *Options) check() error {
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix()
	}
	switch {
	case !prefixRE.MatchString(o.Prefix):
		return fmt.Errorf("cluster: prefix %q: want 1 to 16 lower-case letters and digits, starting with a letter", o.Prefix)
	case o.Hosts < 1 || o.Hosts > MaxHosts:
		return fmt.Errorf("cluster: %d hosts: want 1..%d", o.Hosts, MaxHosts)
	case o.Loss < 0 || o.Loss > 100:
		return fmt.Errorf("cluster: loss %v%%: want 0..100", o.Loss)
	}
	if o.Rate != "" {
		if _, err := ParseRate(o.Rate); err != nil {
			return err
		}
	}
	return Check(*o)
}

// ParseRate reads a rate in tc's syntax ("10gbit", "100mbit", "1.5gbit",
// "800kbit", "1000000bit") as bits per second.
func ParseRate(s string) (float64, error) {
	m := regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)([kmgt]?)bit$`).FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return 0, fmt.Errorf("cluster: rate %q: want a number and kbit, mbit, gbit or tbit (\"10gbit\")", s)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	v *= map[string]float64{"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m[2]]
	if v < 8000 {
		return 0, fmt.Errorf("cluster: rate %q is below 8kbit", s)
	}
	return v, nil
}

func (c *Cluster) switchNS() string { return c.Prefix + "-sw" }

// Up builds a cluster. On failure, or when ctx ends first, it removes what
// it had built.
func Up(ctx context.Context, o Options) (_ *Cluster, err error) {
	if err := o.check(); err != nil {
		return nil, err
	}
	c := &Cluster{Prefix: o.Prefix, opts: o}
	if left := Leftovers(c.Prefix); len(left) > 0 {
		return nil, fmt.Errorf("cluster: prefix %s is in use (%s); remove it with Sweep or `down %s`", c.Prefix, strings.Join(left, ", "), c.Prefix)
	}
	defer func() {
		if err != nil {
			if derr := c.Down(); derr != nil {
				err = fmt.Errorf("%w (and removing it: %v)", err, derr)
			}
		}
	}()
	run := func(args ...string) error { return c.run(ctx, args...) }
	sw := c.switchNS()
	if err := run("ip", "netns", "add", sw); err != nil {
		return nil, err
	}
	for _, a := range [][]string{
		{"ip", "-n", sw, "link", "add", "br0", "type", "bridge"},
		{"ip", "-n", sw, "link", "set", "br0", "up"},
	} {
		if err := run(a...); err != nil {
			return nil, err
		}
	}
	if !o.ShareHostname {
		if err := os.MkdirAll(RunDir, 0o755); err != nil {
			return nil, fmt.Errorf("cluster: %v", err)
		}
	}
	base := Subnet.Addr().As4()
	for i := range o.Hosts {
		b := base
		b[3] = byte(i + 1)
		h := Host{Name: fmt.Sprintf("%s-h%d", c.Prefix, i), Addr: netip.AddrFrom4(b)}
		c.Hosts = append(c.Hosts, h)
		if err := c.addHost(ctx, i, h); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Cluster) addHost(ctx context.Context, i int, h Host) error {
	o, sw, port := c.opts, c.switchNS(), fmt.Sprintf("p%d", i)
	run := func(args ...string) error { return c.run(ctx, args...) }
	if err := run("ip", "netns", "add", h.Name); err != nil {
		return err
	}
	if !o.ShareHostname {
		// The UTS namespace persists as a bind mount on this file, made
		// by unshare, which sets the host name inside and exits.
		f := filepath.Join(RunDir, h.Name)
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			return fmt.Errorf("cluster: %v", err)
		}
		if err := run("unshare", "--uts="+f, "hostname", h.Name); err != nil {
			return err
		}
	}
	bits := strconv.Itoa(Subnet.Bits())
	for _, a := range [][]string{
		{"ip", "-n", sw, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", h.Name},
		{"ip", "-n", sw, "link", "set", port, "master", "br0"},
		{"ip", "-n", sw, "link", "set", port, "up"},
		{"ip", "-n", h.Name, "addr", "add", h.Addr.String() + "/" + bits, "dev", "eth0"},
		{"ip", "-n", h.Name, "link", "set", "eth0", "up"},
		{"ip", "-n", h.Name, "link", "set", "lo", "up"},
	} {
		if err := run(a...); err != nil {
			return err
		}
	}
	if o.Rate != "" {
		// Both directions: the host's sending (its eth0) and its
		// receiving (the switch port's sending).
		bps, _ := ParseRate(o.Rate)
		// The bucket holds 1 ms at the rate, at least 64 KiB (a GSO
		// packet on veth), so tbf does not cap below the rate.
		burst := strconv.Itoa(max(int(bps/8/1000), 64<<10))
		for _, ns := range [][2]string{{h.Name, "eth0"}, {sw, port}} {
			if err := run("ip", "netns", "exec", ns[0], "tc", "qdisc", "add", "dev", ns[1], "root",
				"tbf", "rate", o.Rate, "burst", burst, "latency", "50ms"); err != nil {
				return err
			}
		}
	}
	if o.Loss > 0 {
		return c.setLoss(ctx, i, o.Loss)
	}
	return nil
}

// setLoss makes host i's link drop pct percent of the packets it receives
// (replacing the rule in place, if any).
func (c *Cluster) setLoss(ctx context.Context, i int, pct float64) error {
	h, sw, port := c.Hosts[i], c.switchNS(), fmt.Sprintf("p%d", i)
	// One wire frame per packet, not one 64 KiB GSO super-packet, so
	// that a loss costs what it costs on a network.
	for _, ns := range [][2]string{{h.Name, "eth0"}, {sw, port}} {
		if err := c.run(ctx, "ip", "-n", ns[0], "link", "set", "dev", ns[1], "gso_max_segs", "1"); err != nil {
			return err
		}
	}
	// On the host's ingress, so that the sender's stack sees a loss in
	// the network rather than a local drop (which TCP is told about). The
	// table is declared, then flushed and filled in one transaction, so a
	// rule set anew replaces the old one.
	drop := fmt.Sprintf("numgen random mod 10000 < %d counter drop", int(pct*100+0.5))
	if pct >= 100 {
		drop = "counter drop" // nft refuses a comparison the numgen cannot reach
	}
	rules := fmt.Sprintf("table netdev rdmacluster\nflush table netdev rdmacluster\ntable netdev rdmacluster {\n chain loss {\n  type filter hook ingress device \"eth0\" priority 0; policy accept;\n  %s\n }\n}\n", drop)
	cmd := exec.CommandContext(ctx, "ip", "netns", "exec", h.Name, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	return c.runCmd(cmd)
}

// SetLoss makes host i's link drop pct percent (0 to 100, to 0.01) of the
// packets arriving at the host, chosen at random, from now on; 100 is a
// silent partition: the link stays up, nothing gets through to the host.
// It needs nft.
func (c *Cluster) SetLoss(ctx context.Context, i int, pct float64) error {
	if i < 0 || i >= len(c.Hosts) {
		return fmt.Errorf("cluster: host %d: have %d hosts", i, len(c.Hosts))
	}
	if pct < 0 || pct > 100 {
		return fmt.Errorf("cluster: loss %v%%: want 0..100", pct)
	}
	return c.setLoss(ctx, i, pct)
}

// SetLink cuts host i's link (its switch port goes down: the host's eth0
// loses its carrier, and nothing passes either way) or restores it.
func (c *Cluster) SetLink(ctx context.Context, i int, up bool) error {
	if i < 0 || i >= len(c.Hosts) {
		return fmt.Errorf("cluster: host %d: have %d hosts", i, len(c.Hosts))
	}
	state := "down"
	if up {
		state = "up"
	}
	return c.run(ctx, "ip", "-n", c.switchNS(), "link", "set", fmt.Sprintf("p%d", i), state)
}

func (c *Cluster) run(ctx context.Context, args ...string) error {
	return c.runCmd(exec.CommandContext(ctx, args[0], args[1:]...))
}

func (c *Cluster) runCmd(cmd *exec.Cmd) error {
	if c.opts.Logf != nil {
		c.opts.Logf("cluster: %s", strings.Join(cmd.Args, " "))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cluster: %s: %v: %s", strings.Join(cmd.Args, " "), err, bytes.TrimSpace(out.Bytes()))
	}
	return nil
}

// Enter is the command prefix that runs a program in host name: nsenter
// into its network namespace and, if it has one, its UTS namespace.
func Enter(name string) []string {
	args := []string{"nsenter", "--net=" + filepath.Join(netnsDir, name)}
	if _, err := os.Stat(filepath.Join(RunDir, name)); err == nil {
		args = append(args, "--uts="+filepath.Join(RunDir, name))
	}
	return append(args, "--")
}

// Command is exec.CommandContext for a program run in host i.
func (c *Cluster) Command(ctx context.Context, i int, name string, args ...string) *exec.Cmd {
	argv := append(Enter(c.Hosts[i].Name), name)
	argv = append(argv, args...)
	return exec.CommandContext(ctx, argv[0], argv[1:]...)
}

// Agent is the launch agent template that starts a program in a host of
// this cluster, for rdmarun's --launch-agent and Open MPI's
// plm_rsh_agent ({host} is the host's name).
func (c *Cluster) Agent() string {
	a := "nsenter --net=" + netnsDir + "/{host}"
	if !c.opts.ShareHostname {
		a += " --uts=" + RunDir + "/{host}"
	}
	return a + " --"
}

// HostList is rdmarun's --host value with slots ranks on every host.
func (c *Cluster) HostList(slots int) string {
	var s []string
	for _, h := range c.Hosts {
		s = append(s, fmt.Sprintf("%s:%d", h.Name, slots))
	}
	return strings.Join(s, ",")
}

// Down removes the cluster: the processes still in its hosts, its
// namespaces and their bind mounts. It reports what it could not remove.
func (c *Cluster) Down() error { return Sweep(c.Prefix) }

// Leftovers lists what exists under prefix: network namespaces in
// /run/netns and UTS bind mounts in RunDir named "<prefix>-...".
func Leftovers(prefix string) []string {
	var out []string
	for _, d := range []string{netnsDir, RunDir} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), prefix+"-") {
				out = append(out, filepath.Join(d, e.Name()))
			}
		}
	}
	return out
}

// Sweep removes everything named "<prefix>-..." that a cluster leaves: it
// kills the processes inside the network namespaces (a crashed job's
// ranks), then deletes the namespaces (and with them their links, bridge,
// qdiscs and nftables tables) and the UTS bind mounts. Use it to clean up
// after a run that died before its Down.
func Sweep(prefix string) error {
	if !prefixRE.MatchString(prefix) {
		return fmt.Errorf("cluster: prefix %q: want 1 to 16 lower-case letters and digits, starting with a letter", prefix)
	}
	var errs []error
	for _, p := range Leftovers(prefix) {
		name := filepath.Base(p)
		if filepath.Dir(p) == netnsDir {
			killIn(p)
			out, err := exec.Command("ip", "netns", "del", name).CombinedOutput()
			if err != nil {
				errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", name, err, bytes.TrimSpace(out)))
			}
			continue
		}
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
		if err := os.Remove(p); err != nil {
			errs = append(errs, fmt.Errorf("cluster: %v", err))
		}
	}
	if left := Leftovers(prefix); len(left) > 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("cluster: still there after removal: %s", strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

// killIn kills every process whose network namespace is the one bound at
// path, and waits (up to 5 s) until none is left: they belong to the
// cluster, and a namespace with processes in it outlives its name.
func killIn(path string) {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		pids := pidsIn(st.Dev, st.Ino)
		if len(pids) == 0 || time.Now().After(deadline) {
			return
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// PidsIn lists the processes in host name's network namespace.
func PidsIn(name string) []int {
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(netnsDir, name), &st) != nil {
		return nil
	}
	return pidsIn(st.Dev, st.Ino)
}

func pidsIn(dev, ino uint64) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Dev == dev && st.Ino == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

var nameRE = regexp.MustCompile(`^([a-z][a-z0-9]{0,15})-(sw|h[0-9]+)$`)

// Prefixes lists the prefixes of the clusters whose names are present
// (namespaces or UTS bind mounts), live or left over.
func Prefixes() []string {
	seen := map[string]bool{}
	var out []string
	for _, d := range []string{netnsDir, RunDir} {
		ents, _ := os.ReadDir(d)
		for _, e := range ents {
			if m := nameRE.FindStringSubmatch(e.Name()); m != nil && !seen[m[1]] {
				seen[m[1]] = true
				out = append(out, m[1])
			}
		}
	}
	return out
}
