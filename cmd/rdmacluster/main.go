// Command rdmacluster builds a cluster of hosts on this machine (network
// namespaces with their own host names, joined by a bridge) for multi-host
// runs and benchmarks; see internal/cluster and docs/cluster.md. As root:
//
//	rdmacluster up -hosts 2 [-rate 10gbit] [-loss 1] [-prefix NAME] [-share-hostname]
//	rdmacluster exec HOST -- COMMAND [ARG...]
//	rdmacluster rsh HOST COMMAND...
//	rdmacluster run -hosts 2 [-rate ...] [-loss ...] -- COMMAND [ARG...]
//	rdmacluster down PREFIX...
//	rdmacluster down -stale
//
// up prints the hosts and what rdmarun needs (the launch agent, the host
// list, the interface) and leaves the cluster up until down. run brings a
// cluster up, runs COMMAND in its first host with that in the environment
// (RDMACLUSTER_AGENT, RDMACLUSTER_HOSTS, RDMACLUSTER_IFACE,
// RDMACLUSTER_PREFIX), and takes the cluster down when COMMAND ends or
// rdmacluster is interrupted. rsh is an rsh-style launch agent for
// launchers that append the host and a command line, such as Open MPI's
// plm_rsh_agent: it runs the words after HOST as one shell command in
// HOST. down -stale removes the clusters of test
// runs whose process is gone (prefix "rdc<pid>").
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/rdmago/rdmago/internal/cluster"
)

func usage() {
	fmt.Fprint(os.Stderr, `usage:
  rdmacluster up -hosts N [-rate 10gbit] [-loss 1] [-prefix NAME] [-share-hostname]
  rdmacluster exec HOST -- COMMAND [ARG...]
  rdmacluster rsh HOST COMMAND...   (an rsh-style agent: COMMAND is joined into one sh -c command line)
  rdmacluster run -hosts N [-rate ...] [-loss ...] [-prefix NAME] -- COMMAND [ARG...]
  rdmacluster down PREFIX... | -stale
`)
}

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "up":
		err = up(os.Args[2:])
	case "run":
		var code int
		code, err = runCmd(os.Args[2:])
		if err == nil {
			os.Exit(code)
		}
	case "exec":
		err = execIn(os.Args[2:])
	case "rsh":
		err = rsh(os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "-h", "-help", "--help", "help":
		usage()
		return
	default:
		usage()
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmacluster: %v\n", err)
		os.Exit(1)
	}
}

func clusterFlags(name string, args []string) (cluster.Options, []string, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	var o cluster.Options
	fs.IntVar(&o.Hosts, "hosts", 2, "number of hosts")
	fs.StringVar(&o.Rate, "rate", "", `shape each host's link to this rate, both ways ("10gbit")`)
	fs.Float64Var(&o.Loss, "loss", 0, "percent of packets each host's link drops at random (1 = 1%)")
	fs.StringVar(&o.Prefix, "prefix", fmt.Sprintf("rdu%d", os.Getpid()), "name prefix of everything created")
	fs.BoolVar(&o.ShareHostname, "share-hostname", false, "hosts keep this machine's host name (no UTS namespaces)")
	verbose := fs.Bool("v", false, "print each command run")
	if err := fs.Parse(args); err != nil {
		return o, nil, err
	}
	if *verbose {
		o.Logf = func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) }
	}
	return o, fs.Args(), nil
}

// signalContext is canceled by SIGINT, SIGTERM or SIGHUP, so that a
// cluster half built is removed rather than left behind.
func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
}

func up(args []string) error {
	o, rest, err := clusterFlags("up", args)
	if err != nil {
		return err
	}
	if len(rest) > 0 {
		return fmt.Errorf("up: unexpected arguments %q", rest)
	}
	ctx, stop := signalContext()
	defer stop()
	c, err := cluster.Up(ctx, o)
	if err != nil {
		return err
	}
	fmt.Printf("prefix %s\n", c.Prefix)
	for _, h := range c.Hosts {
		fmt.Printf("host %s %s\n", h.Name, h.Addr)
	}
	fmt.Printf("agent %s\nhosts %s\niface %s\n", c.Agent(), c.HostList(1), cluster.Subnet)
	fmt.Printf("# rdmacluster exec %s -- rdmarun -np %d --host %s --launch-agent '%s' --iface %s PROGRAM\n",
		c.Hosts[0].Name, len(c.Hosts), c.HostList(1), c.Agent(), cluster.Subnet)
	fmt.Printf("# rdmacluster down %s\n", c.Prefix)
	return nil
}

func runCmd(args []string) (int, error) {
	o, rest, err := clusterFlags("run", args)
	if err != nil {
		return 0, err
	}
	if len(rest) > 0 && rest[0] == "--" {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		return 0, errors.New("run: no command (rdmacluster run -hosts 2 -- COMMAND)")
	}
	ctx, stop := signalContext()
	defer stop()
	c, err := cluster.Up(ctx, o)
	if err != nil {
		return 0, err
	}
	defer func() {
		if derr := c.Down(); derr != nil {
			fmt.Fprintf(os.Stderr, "rdmacluster: %v\n", derr)
		}
	}()
	var names []string
	for _, h := range c.Hosts {
		names = append(names, h.Name)
	}
	cmd := c.Command(context.Background(), 0, rest[0], rest[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), "RDMACLUSTER_AGENT="+c.Agent(), "RDMACLUSTER_HOSTS="+strings.Join(names, ","),
		"RDMACLUSTER_IFACE="+cluster.Subnet.String(), "RDMACLUSTER_PREFIX="+c.Prefix)
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		// Interrupted: pass it on, then Down kills whatever is left in the
		// hosts.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-done
		return 130, nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), nil
	}
	return 0, err
}

func execIn(args []string) error {
	if len(args) < 3 || args[1] != "--" {
		return errors.New("exec: want HOST -- COMMAND [ARG...]")
	}
	host := args[0]
	if _, err := os.Stat(filepath.Join("/run/netns", host)); err != nil {
		return fmt.Errorf("exec: no host %q (no network namespace of that name)", host)
	}
	argv := append(cluster.Enter(host), args[2:]...)
	path, err := exec.LookPath(argv[0])
	if err != nil {
		return err
	}
	return syscall.Exec(path, argv, os.Environ())
}

// rsh runs args[1:] joined by spaces as a shell command line in host
// args[0], as rsh and ssh do with their arguments.
func rsh(args []string) error {
	if len(args) < 2 {
		return errors.New("rsh: want HOST COMMAND...")
	}
	return execIn([]string{args[0], "--", "/bin/sh", "-c", strings.Join(args[1:], " ")})
}

var staleRE = regexp.MustCompile(`^rdc([0-9]+)$`)

func down(args []string) error {
	if len(args) == 1 && args[0] == "-stale" {
		var errs []error
		for _, p := range cluster.Prefixes() {
			m := staleRE.FindStringSubmatch(p)
			if m == nil {
				continue
			}
			pid, _ := strconv.Atoi(m[1])
			if err := syscall.Kill(pid, 0); err == nil || errors.Is(err, syscall.EPERM) {
				continue // its process is alive: not stale
			}
			fmt.Printf("removing %s (process %d is gone)\n", p, pid)
			errs = append(errs, cluster.Sweep(p))
		}
		return errors.Join(errs...)
	}
	if len(args) == 0 {
		return errors.New("down: want PREFIX... (as printed by up) or -stale")
	}
	var errs []error
	for _, p := range args {
		if len(cluster.Leftovers(p)) == 0 {
			fmt.Fprintf(os.Stderr, "rdmacluster: nothing named %s-*\n", p)
		}
		errs = append(errs, cluster.Sweep(p))
	}
	return errors.Join(errs...)
}
