// Command ibv-pingpong is rdma-core's ibv_rc_pingpong written on rdmago's
// verbs API (provider ibv): the same options, the same out-of-band exchange
// over TCP (52-byte "LID:QPN:PSN:GID" messages and a "done" sync) and the
// same traffic (SENDs of -s bytes filled with 0x7b, -n round trips), so it
// can be either side against the real ibv_rc_pingpong. Build it with the
// rdma tag:
//
//	go build -tags rdma ./cmd/ibv-pingpong
//	ibv_rc_pingpong -d rxe0 -g 1 &            # a real server
//	ibv-pingpong -d rxe0 -g 1 127.0.0.1       # our client
//	ibv-pingpong -d rxe0 &                    # our server (GID auto-detected)
//	ibv_rc_pingpong -d rxe0 -g 1 127.0.0.1    # a real client
//
// It also checks every received message is the 0x7b pattern; -c is
// ibv_rc_pingpong's --chk, whose client zeroes the first byte of every page
// (both sides must agree on it, as with the real tool). Exit status: 0 on
// success, 1 on any failure (with the cause on stderr), 2 for a bad
// command line.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ibv-pingpong:", err)
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel2()
	if _, err := run(ctx, cfg, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ibv-pingpong:", err)
		os.Exit(1)
	}
}

// parseFlags parses ibv_rc_pingpong's command line; usage and flag errors
// go to out.
func parseFlags(args []string, out io.Writer) (config, error) {
	cfg := defaultConfig()
	fs := flag.NewFlagSet("ibv-pingpong", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&cfg.Device, "d", "", "use IB device `dev` (default first device found)")
	fs.IntVar(&cfg.IBPort, "i", cfg.IBPort, "use `port` of IB device")
	fs.IntVar(&cfg.GIDIndex, "g", cfg.GIDIndex, "local port GID `index` (default -1: auto-detect the RoCE v2 GID)")
	fs.IntVar(&cfg.TCPPort, "p", cfg.TCPPort, "listen on/connect to `port`")
	fs.IntVar(&cfg.Size, "s", cfg.Size, "`size` of message to exchange")
	fs.IntVar(&cfg.Iters, "n", cfg.Iters, "number of `iters` to ping-pong")
	fs.IntVar(&cfg.RxDepth, "r", cfg.RxDepth, "number of receives to post at a time")
	fs.IntVar(&cfg.MTU, "m", cfg.MTU, "path MTU `bytes`")
	fs.BoolVar(&cfg.Events, "e", false, "sleep on CQ events (default poll)")
	fs.BoolVar(&cfg.Check, "c", false, "ibv_rc_pingpong's --chk: messages carry a 0 in the first byte of every page, checked on receipt (give -c to both sides or neither)")
	fs.StringVar(&cfg.Bind, "bind", "", "server: `address` to listen on (default all)")
	fs.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintf(out, "usage:\n  ibv-pingpong [options]            start a server and wait for connection\n"+
			"  ibv-pingpong [options] <host>     connect to server at <host>\n\noptions:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	switch fs.NArg() {
	case 0:
	case 1:
		cfg.Server = fs.Arg(0)
	default:
		return cfg, fmt.Errorf("one <host> at most, got %q", fs.Args())
	}
	return cfg, nil
}
