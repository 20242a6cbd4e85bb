package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/rdmago/rdmago/bootstrap"
)

const statusUsage = `usage: rdmarun status [--job ID] [--addr HOST:PORT] [--timeout D]

Shows which operation each rank of a running rdmago job is in: one line
per rank with the communicator, the operation and its sequence number, the
algorithm, the rank it waits for and since when. Works under any launcher:
rank 0 of every job (comm.FromEnv) writes a status file, readable by its
owner only, into $XDG_RUNTIME_DIR/rdmago (else $TMPDIR/rdmago-UID) on its
host, and this command reads it. From another host, give rank 0's status
endpoint with --addr and the job token in RDMARUN_TOKEN (64 hex digits).

  --job ID        the job to ask (its RDMARUN_JOB, or what the list shows)
                  when this user runs several
  --addr H:P      rank 0's status endpoint (the "addr" of the status file)
  --timeout D     give up after D (default 10s)
`

// statusMain runs "rdmarun status"; it returns the exit code.
func statusMain(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("rdmarun status", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	job := fs.String("job", "", "")
	addr := fs.String("addr", "", "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, statusUsage)
			return 0
		}
		fmt.Fprintf(stderr, "rdmarun status: %v\n%s", err, statusUsage)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rdmarun status: unexpected argument %q\n%s", fs.Arg(0), statusUsage)
		return 2
	}
	var token []byte
	name := *addr
	if *addr != "" {
		v := os.Getenv("RDMARUN_TOKEN")
		t, err := hex.DecodeString(v)
		if v != "" && (err != nil || len(t) != 32) {
			fmt.Fprintf(stderr, "rdmarun status: RDMARUN_TOKEN is not 64 hex digits\n")
			return 2
		}
		if v == "" && os.Getenv("RDMARUN_INSECURE") != "1" {
			fmt.Fprintf(stderr, "rdmarun status: --addr needs the job token in RDMARUN_TOKEN (or RDMARUN_INSECURE=1 for a job without one)\n")
			return 2
		}
		token = t
	} else {
		files, err := bootstrap.ReadStatusFiles("")
		if err != nil {
			fmt.Fprintf(stderr, "rdmarun status: %v\n", err)
			return 1
		}
		var match []bootstrap.StatusFile
		for _, f := range files {
			if *job == "" || f.Job == *job {
				match = append(match, f)
			}
		}
		switch {
		case len(match) == 0 && *job != "":
			fmt.Fprintf(stderr, "rdmarun status: no running job %q of this user on this host (status files in %s); from another host use --addr\n", *job, bootstrap.StatusDir())
			return 1
		case len(match) == 0:
			fmt.Fprintf(stderr, "rdmarun status: no running rdmago job of this user on this host (status files in %s); from another host use --addr\n", bootstrap.StatusDir())
			return 1
		case len(match) > 1:
			fmt.Fprintf(stderr, "rdmarun status: %d jobs run; choose one with --job:\n", len(match))
			for _, f := range match {
				fmt.Fprintf(stderr, "  %s  %d ranks, rank 0 pid %d, started %s\n", f.Job, f.Size, f.PID, f.Started.Format(time.DateTime))
			}
			return 2
		}
		f := match[0]
		t, err := hex.DecodeString(f.Token)
		if err != nil {
			fmt.Fprintf(stderr, "rdmarun status: status file of job %s: bad token\n", f.Job)
			return 1
		}
		token, *addr, name = t, f.Addr, "job "+f.Job
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	ranks, err := bootstrap.QueryStatus(ctx, *addr, token, bootstrap.StatusJob)
	if err != nil {
		fmt.Fprintf(stderr, "rdmarun status: %s: rank 0 does not answer: %v\n", name, err)
		return 1
	}
	fmt.Fprintln(stdout, strings.Join(bootstrap.FormatStatus(ranks), "\n"))
	return 0
}
