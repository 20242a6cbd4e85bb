// Command rdmarun starts the ranks of an rdmago job, in the tradition of
// mpirun:
//
//	rdmarun -np 4 ./examples/hello
//	rdmarun -np 8 --host a:4,b:4 --tag-output -x LOGLEVEL=debug ./prog -size 1M
//	rdmarun status    # which operation each rank of a running job is in
//
// See docs/rdmarun.md for the options and docs/env.md for the environment
// every rank receives.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/rdmago/rdmago/cmd/rdmarun/internal/launch"
)

func main() {
	os.Exit(run())
}

func run() int {
	if len(os.Args) > 1 && os.Args[1] == "status" { // a program named status runs as ./status
		return statusMain(os.Args[2:], os.Stdout, os.Stderr)
	}
	args, err := launch.ParseArgs(os.Args[1:], nil)
	if errors.Is(err, launch.ErrHelp) {
		fmt.Print(launch.Usage)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmarun: %v\n(rdmarun --help shows the options)\n", err)
		return launch.ExitUsage
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	// A write to a closed stdout or stderr then fails with EPIPE instead of
	// killing rdmarun on the spot, so the job can end cleanly (see
	// launch.Run); the signal itself is dropped.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	o := launch.Options{Args: *args, Stdout: os.Stdout, Stderr: os.Stderr, Signals: sigs}
	if !args.NoStdin {
		o.Stdin = os.Stdin
	}
	code, err := launch.Run(context.Background(), o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "rdmarun: %v\n", err)
		if launch.IsUsage(err) {
			fmt.Fprintf(os.Stderr, "(rdmarun --help shows the options)\n")
		}
	}
	return code
}
