// Command testprog is the rank program of rdmarun's multi-process tests. It
// reads the RDMARUN_* environment itself (test-only code: real programs use
// comm.FromEnv), joins the rendezvous, allgathers (rank, host, network
// namespace) and prints one checkable line per rank:
//
//	hello rank=1 size=4 local=1/4 host=h netns=net:[4026531840] peers=0@net:[...],1@...
//
// Flags make a rank fail in the ways rdmarun must report.
package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
	"golang.org/x/sys/unix"
)

var (
	exitRank  = flag.Int("exit-rank", -1, "this rank exits with -exit-code after the allgather")
	exitCode  = flag.Int("exit-code", 3, "exit code for -exit-rank")
	killRank  = flag.Int("kill-rank", -1, "this rank kills itself with SIGKILL after the allgather")
	abortRank = flag.Int("abort-rank", -1, "this rank calls Abort(-abort-code) after the allgather")
	abortCode = flag.Int("abort-code", 7, "code for -abort-rank")
	sleep     = flag.Duration("sleep", 0, "sleep this long after the allgather")
	pidDir    = flag.String("piddir", "", "write rank.N.pid (and child.N.pid with -child) here")
	child     = flag.Bool("child", false, "start a child process (sleep 600) that rdmarun must also stop")
	readStdin = flag.Bool("stdin", false, "rank 0 prints what it reads on stdin")
	printEnv  = flag.String("env", "", "comma-separated variables to print")
	signals   = flag.Bool("signals", false, "report SIGINT/SIGTERM and exit 130/143")
	ignore    = flag.Bool("ignore-signals", false, "report SIGINT/SIGTERM and carry on")
	noDial    = flag.Bool("nodial", false, "do not join the rendezvous")
	affinity  = flag.Bool("affinity", false, "print the CPUs this rank may run on")
	printCwd  = flag.Bool("cwd", false, "print the working directory")
	cmdlines  = flag.Bool("check-cmdline", false, "count the processes whose command line contains the job token")
	awaitLeft = flag.Int("await-left", -1, "the other ranks wait for the rendezvous to report that this rank left, and print it")
	stopRank  = flag.Int("stop-rank", -1, "this rank stops itself (SIGSTOP) after the allgather; the others report it lost, as comm does, and exit 1, the last rank first")
)

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "testprog: %v\n", err)
		os.Exit(1)
	}
}

func envInt(k string) (int, error) {
	v, ok := os.LookupEnv(k)
	if !ok {
		return 0, fmt.Errorf("%s not set", k)
	}
	return strconv.Atoi(v)
}

func run() error {
	rank, err := envInt("RDMARUN_RANK")
	if err != nil {
		return err
	}
	size, err := envInt("RDMARUN_SIZE")
	if err != nil {
		return err
	}
	lrank, err := envInt("RDMARUN_LOCAL_RANK")
	if err != nil {
		return err
	}
	lsize, err := envInt("RDMARUN_LOCAL_SIZE")
	if err != nil {
		return err
	}
	token, err := hex.DecodeString(os.Getenv("RDMARUN_TOKEN"))
	if err != nil || len(token) == 0 {
		return fmt.Errorf("RDMARUN_TOKEN: not hex or empty")
	}
	timeout, err := time.ParseDuration(os.Getenv("RDMARUN_TIMEOUT"))
	if err != nil {
		return fmt.Errorf("RDMARUN_TIMEOUT: %v", err)
	}
	for _, k := range []string{"RDMARUN_ADDR", "RDMARUN_JOB", "RDMARUN_TRANSPORT"} {
		if os.Getenv(k) == "" {
			return fmt.Errorf("%s not set", k)
		}
	}
	if *signals {
		ch := make(chan os.Signal, 1)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			s := <-ch
			fmt.Printf("rank %d got %s\n", rank, s)
			os.Exit(128 + int(s.(syscall.Signal)))
		}()
	}
	if *ignore {
		ch := make(chan os.Signal, 4)
		signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			for s := range ch {
				fmt.Printf("rank %d ignored %s\n", rank, s)
			}
		}()
	}
	if *pidDir != "" {
		if err := writePid(filepath.Join(*pidDir, fmt.Sprintf("rank.%d.pid", rank)), os.Getpid()); err != nil {
			return err
		}
		if *child {
			c := exec.Command("sleep", "600")
			if err := c.Start(); err != nil {
				return err
			}
			if err := writePid(filepath.Join(*pidDir, fmt.Sprintf("child.%d.pid", rank)), c.Process.Pid); err != nil {
				return err
			}
		}
	}
	host, _ := os.Hostname()
	netns, _ := os.Readlink("/proc/self/ns/net")
	var c *bootstrap.Client
	peers := "-"
	if !*noDial {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		c, err = bootstrap.Dial(ctx, bootstrap.ClientOptions{Addr: os.Getenv("RDMARUN_ADDR"), Token: token, Rank: rank, Size: size, Version: "testprog", Config: os.Getenv("RDMARUN_TRANSPORT")})
		if err != nil {
			cancel()
			return err
		}
		vals, err := bootstrap.Allgather(ctx, c, "who", []byte(fmt.Sprintf("%d@%s", rank, netns)))
		cancel()
		if err != nil {
			return err
		}
		var ps []string
		for _, v := range vals {
			ps = append(ps, string(v))
		}
		peers = strings.Join(ps, ",")
		defer c.Close()
	}
	var extra string
	if *printEnv != "" {
		for _, k := range strings.Split(*printEnv, ",") {
			v, ok := os.LookupEnv(k)
			if !ok {
				v = "<unset>"
			}
			extra += fmt.Sprintf(" %s=%s", k, v)
		}
	}
	if *affinity {
		var set unix.CPUSet
		if err := unix.SchedGetaffinity(0, &set); err != nil {
			return err
		}
		var cpus []string
		for i := 0; i < 1024; i++ {
			if set.IsSet(i) {
				cpus = append(cpus, strconv.Itoa(i))
			}
		}
		extra += " cpus=" + strings.Join(cpus, ",")
	}
	if *printCwd {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		extra += " cwd=" + wd
	}
	if *cmdlines {
		// The token must never be on a command line: any user can read
		// /proc/PID/cmdline. Look at every process, the launcher's
		// agents and shells included.
		n := 0
		secret := os.Getenv("RDMARUN_TOKEN")
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(b), secret) {
				n++
			}
		}
		extra += fmt.Sprintf(" token_in_cmdline=%d procs=%d", n, len(procs))
	}
	fmt.Printf("hello rank=%d size=%d local=%d/%d host=%s netns=%s peers=%s%s\n", rank, size, lrank, lsize, host, netns, peers, extra)
	if *readStdin && rank == 0 {
		b, err := io.ReadAll(os.Stdin)
		if err != nil {
			return err
		}
		fmt.Printf("stdin %d bytes: %q\n", len(b), b)
	}
	switch {
	case rank == *stopRank:
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
		time.Sleep(time.Minute) // rdmarun ends the job
	case *stopRank >= 0 && c != nil:
		// What a comm rank does when it notices a silent peer: report
		// it, then fail. The survivors exit in reverse rank order, so the
		// first rank to exit is a survivor, never the stopped one.
		f := bootstrap.FailureReport{Kind: "lost", Origins: []int{*stopRank}, Detail: fmt.Sprintf("rank %d lost: no frame for 1.5s", *stopRank)}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Put(ctx, bootstrap.FailureKey(rank), f.Encode()); err != nil {
			return err
		}
		// Exit only once every survivor has reported: on a loaded host a
		// slow survivor could otherwise still be starting when the first
		// exit makes rdmarun stop the job, and go unnamed.
		for r := 0; r < size; r++ {
			if r != rank && r != *stopRank {
				if _, err := c.Get(ctx, bootstrap.FailureKey(r)); err != nil {
					return err
				}
			}
		}
		time.Sleep(time.Duration(size-1-rank) * 200 * time.Millisecond)
		return fmt.Errorf("rank %d: rank %d lost", rank, *stopRank)
	}
	switch rank {
	case *exitRank:
		fmt.Fprintf(os.Stderr, "rank %d exiting with %d\n", rank, *exitCode)
		os.Exit(*exitCode)
	case *killRank:
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case *abortRank:
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Abort(ctx, *abortCode, "testprog was told to abort"); err != nil {
			return err
		}
		time.Sleep(time.Minute) // rdmarun ends the job
	}
	if *abortRank >= 0 && c != nil {
		// Wait in a barrier the aborting rank never joins: it fails with
		// the abort.
		if err := bootstrap.Barrier(context.Background(), c); err != nil {
			return fmt.Errorf("rank %d: barrier: %w", rank, err)
		}
	}
	if *awaitLeft >= 0 && c != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		v, err := c.Get(ctx, bootstrap.LeftKey(*awaitLeft))
		if err != nil {
			return fmt.Errorf("rank %d: waiting for rank %d to leave: %w", rank, *awaitLeft, err)
		}
		fmt.Printf("rank %d saw: %s\n", rank, v)
	}
	time.Sleep(*sleep)
	return nil
}

// writePid writes pid to path aside and renames it into place, so that a
// test that reads the file as soon as it exists never reads it empty.
func writePid(path string, pid int) error {
	if err := os.WriteFile(path+".tmp", []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}
