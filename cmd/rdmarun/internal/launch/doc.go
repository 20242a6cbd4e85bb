// Package launch is rdmarun's engine: it parses an mpirun-style command
// line, places ranks on hosts, starts them (directly, or through a launch
// agent such as ssh on other hosts), runs the bootstrap rendezvous they
// join, forwards their output, input and signals, and ends the job with
// the cause named when one fails.
//
//	args, err := launch.ParseArgs(os.Args[1:], nil) // -np 4 --host a:2,b:2 ./prog
//	if err != nil { ... }                            // launch.IsUsage(err): exit 2
//	code, err := launch.Run(ctx, launch.Options{Args: *args,
//		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Signals: sigs})
//	os.Exit(code)
//
// The environment each rank receives is documented in docs/env.md; the
// command line, exit statuses and remote-host behaviour in docs/rdmarun.md.
//
// # How a job runs
//
// Run maps ranks to hosts by slot (MapRanks), builds PROGRAM if it is a Go
// package directory, starts a bootstrap.Server (on loopback, or on the
// address internal/netsel picks when some host is remote), copies a built
// program to remote hosts, and starts every rank. Local ranks are direct
// children, each the leader of its own process group with PDEATHSIG set;
// remote ranks are agent processes (ssh, ip netns exec, ...) running a
// small sh wrapper (remoteScript) that receives the token and control lines
// on stdin and reports the program's status on stderr.
//
// One goroutine (supervise) then owns the job's fate. Events are rank
// exits, Aborts from the rendezvous, signals, --timeout and ctx; the first
// failure is the cause, every live rank gets SIGTERM (or the signal
// rdmarun received) and SIGKILL after the grace period, and rdmarun's exit
// status follows the cause. A rank's exit is observed with waitid(WNOWAIT)
// so that its process group can be cleared of leftovers while the zombie
// still pins the group id; only then is it reaped.
//
// # Concurrency
//
// Run is synchronous. Inside, each rank has a waiter goroutine and two
// output forwarders; output lines are written under one mutex so lines of
// different ranks never interleave; signal delivery to a rank is
// serialised with its reaping by the rank's mutex, so rdmarun never
// signals a pid it has already reaped.
package launch
