// Package slurm starts a private single-node Slurm cluster for tests: its
// own munged, slurmctld and slurmd, with a private SLURM_CONF, state
// folder, munge socket and free ports, so it neither needs nor disturbs a
// system Slurm. Tests that use it run one at a time across packages (a
// lock file), and everything is stopped by PID at cleanup, munged last.
//
//	c := slurm.Start(t) // skips with a reason when Slurm cannot run here
//	cmd := exec.Command("srun", "--mpi=pmi2", "-n", "4", prog)
//	cmd.Env = append(os.Environ(), c.Env()...)
//
// Needs root and the Debian packages slurmctld, slurmd, slurm-client and
// munge (the recipe is ../shared/reference/launchers.md). The node claims
// 8 CPUs (config_overrides), so -n 4 fits on a 2-CPU machine.
package slurm

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Cluster is a running private cluster.
type Cluster struct {
	Dir  string // configuration, state, logs, munge socket
	Conf string // the slurm.conf path (SLURM_CONF)
	Node string // the node's name (this host's short name)
}

// Env is what a command needs to talk to the cluster.
func (c *Cluster) Env() []string { return []string{"SLURM_CONF=" + c.Conf} }

// Log returns the daemons' logs, for failure messages.
func (c *Cluster) Log() string {
	var b strings.Builder
	for _, f := range []string{"munged.log", "slurmctld.log", "slurmd.log"} {
		data, _ := os.ReadFile(filepath.Join(c.Dir, f))
		fmt.Fprintf(&b, "==> %s <==\n%s\n", f, data)
	}
	return b.String()
}

const lockPath = "/tmp/rdmago-slurm-test.lock"

// Start starts the cluster and registers its shutdown with t.Cleanup. It
// skips t, saying why, when not root or a program is missing.
func Start(t testing.TB) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("slurm: the private cluster needs root (slurmd runs jobs as their user)")
	}
	var missing []string
	for _, p := range []string{"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd", "srun", "salloc", "sinfo", "munge"} {
		if _, err := exec.LookPath(p); err != nil {
			missing = append(missing, p)
		}
	}
	if len(missing) > 0 {
		t.Skipf("slurm: %s not installed (apt-get install slurmctld slurmd slurm-client munge)", strings.Join(missing, ", "))
	}

	// One private cluster at a time on this machine, across test binaries.
	lock, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // runs last: releases the lock

	dir, err := os.MkdirTemp("", "rdmago-slurm-")
	if err != nil {
		t.Fatal(err)
	}
	// munged wants every directory above its socket searchable by all.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	host, _, _ = strings.Cut(host, ".")
	c := &Cluster{Dir: dir, Conf: filepath.Join(dir, "slurm.conf"), Node: host}

	key := make([]byte, 128)
	if f, err := os.Open("/dev/urandom"); err == nil {
		f.Read(key)
		f.Close()
	}
	must(t, os.WriteFile(filepath.Join(dir, "munge.key"), key, 0o600))
	for _, d := range []string{"state", "spool"} {
		must(t, os.Mkdir(filepath.Join(dir, d), 0o755))
	}
	ctlPort, dPort := freePort(t), freePort(t)
	sock := filepath.Join(dir, "munge.sock")
	conf := strings.Join([]string{
		"ClusterName=rdmagotest",
		fmt.Sprintf("SlurmctldHost=%s(127.0.0.1)", host),
		fmt.Sprintf("SlurmctldPort=%d", ctlPort),
		fmt.Sprintf("SlurmdPort=%d", dPort),
		"SlurmUser=root",
		"AuthType=auth/munge",
		"CredType=cred/munge",
		"AuthInfo=socket=" + sock,
		"ProctrackType=proctrack/linuxproc",
		"TaskPlugin=task/none",
		"SelectType=select/cons_tres",
		"SelectTypeParameters=CR_Core",
		"SlurmdParameters=config_overrides",
		"SchedulerParameters=batch_sched_delay=0",
		"MpiDefault=none",
		"StateSaveLocation=" + filepath.Join(dir, "state"),
		"SlurmdSpoolDir=" + filepath.Join(dir, "spool"),
		"SlurmctldPidFile=" + filepath.Join(dir, "slurmctld.pid"),
		"SlurmdPidFile=" + filepath.Join(dir, "slurmd.pid"),
		"SlurmctldLogFile=" + filepath.Join(dir, "slurmctld.log"),
		"SlurmdLogFile=" + filepath.Join(dir, "slurmd.log"),
		fmt.Sprintf("NodeName=%s NodeAddr=127.0.0.1 CPUs=8 CoresPerSocket=8 State=UNKNOWN", host),
		"PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
		"",
	}, "\n") // one key per line: "A=1 B=2" is a parse error
	must(t, os.WriteFile(c.Conf, []byte(conf), 0o644))

	env := append(os.Environ(), c.Env()...)
	// Stopped in reverse order of start by the cleanups: munged last.
	start := func(name string, args ...string) {
		cmd := exec.Command(name, args...)
		cmd.Env = env
		cmd.Dir = dir
		out, err := os.Create(filepath.Join(dir, filepath.Base(name)+".out"))
		must(t, err)
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			out.Close()
			t.Fatalf("slurm: start %s: %v", name, err)
		}
		done := make(chan struct{})
		go func() { cmd.Wait(); out.Close(); close(done) }()
		t.Cleanup(func() { stop(t, name, cmd.Process, done) })
	}
	start("/usr/sbin/munged", "-F", "--socket="+sock, "--key-file="+filepath.Join(dir, "munge.key"),
		"--log-file="+filepath.Join(dir, "munged.log"), "--pid-file="+filepath.Join(dir, "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munged.seed"))
	waitFor(t, c, 10*time.Second, "munged", func() bool {
		_, err := os.Stat(sock)
		return err == nil
	})
	start("/usr/sbin/slurmctld", "-D", "-c", "-f", c.Conf)
	start("/usr/sbin/slurmd", "-D", "-f", c.Conf)
	waitFor(t, c, 30*time.Second, "the node to be idle", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, "sinfo", "-h", "-o", "%T")
		cmd.Env = env
		out, _ := cmd.Output()
		return strings.TrimSpace(string(out)) == "idle"
	})
	return c
}

func stop(t testing.TB, name string, p *os.Process, done chan struct{}) {
	p.Signal(syscall.SIGTERM)
	select {
	case <-done:
		return
	case <-time.After(10 * time.Second):
	}
	t.Logf("slurm: %s (pid %d) ignored SIGTERM for 10s; killing it", name, p.Pid)
	p.Kill()
	<-done
}

func waitFor(t testing.TB, c *Cluster, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("slurm: waited %s for %s\n%s", d, what, c.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
