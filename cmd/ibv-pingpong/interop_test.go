//go:build linux && cgo && rdma

package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/testbin"
)

// These tests need a real RDMA device and rdma-core's ibv_rc_pingpong: they
// run inside rxe-vm (RXE_VM=1), and skip elsewhere.
func needRXE(t *testing.T) (dev string, gid int, pingpong string) {
	t.Helper()
	if os.Getenv("RXE_VM") == "" {
		t.Skip("needs rxe-vm (RXE_VM_DEV, RXE_VM_GID_INDEX) and ibv_rc_pingpong")
	}
	dev = os.Getenv("RXE_VM_DEV")
	gid, err := strconv.Atoi(os.Getenv("RXE_VM_GID_INDEX"))
	require.NoError(t, err, "RXE_VM_GID_INDEX")
	pingpong, err = exec.LookPath("ibv_rc_pingpong")
	require.NoError(t, err)
	return dev, gid, pingpong
}

const iters = 100

func testConfig(dev string, port int) config {
	c := defaultConfig()
	c.Device, c.TCPPort, c.Iters, c.Events, c.Timeout = dev, port, iters, true, time.Minute
	return c
}

// interopPair is the real ibv_rc_pingpong's arguments and our config for
// one run on port; with check, both use -c with messages of three pages
// (so three marks).
func interopPair(dev string, gid, port int, check bool) ([]string, config) {
	args := []string{"-d", dev, "-g", strconv.Itoa(gid), "-p", strconv.Itoa(port), "-n", strconv.Itoa(iters)}
	cfg := testConfig(dev, port)
	if check {
		args = append(args, "-c", "-s", "12288")
		cfg.Check, cfg.Size = true, 12288
	}
	return args, cfg
}

// TestInteropGoClient: the real ibv_rc_pingpong is the server, we connect;
// with -c on both sides too (messages of three pages, so three marks), where
// the real server checks the marks our messages carry.
func TestInteropGoClient(t *testing.T) {
	dev, gid, pp := needRXE(t)
	for i, check := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "check"}[check], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port := 18700 + 10*i
			args, cfg := interopPair(dev, gid, port, check)
			var srvOut bytes.Buffer
			srv := exec.CommandContext(ctx, pp, args...)
			srv.Stdout, srv.Stderr = &srvOut, &srvOut
			srv.WaitDelay = 5 * time.Second // killed at ctx's end, Wait returns even if its output stays open
			require.NoError(t, srv.Start())
			cfg.Server = "127.0.0.1"
			var out bytes.Buffer
			res, err := run(ctx, cfg, &out, io.Discard)
			srvErr := srv.Wait()
			t.Logf("ours:\n%s\nibv_rc_pingpong server:\n%s", out.String(), srvOut.String())
			require.NoError(t, err)
			require.NoError(t, srvErr, "ibv_rc_pingpong server")
			assert.Contains(t, srvOut.String(), strconv.Itoa(iters)+" iters in")
			assert.NotContains(t, srvOut.String(), "invalid data", "the real server's -c check")
			assert.Contains(t, out.String(), strconv.Itoa(iters)+" iters in")
			// Each side saw the other's QP.
			assert.Contains(t, srvOut.String(), "remote address: "+res.Local.String())
			assert.Contains(t, out.String(), "remote address: "+res.Remote.String())
		})
	}
}

// TestInteropGoServer: we are the server, the real ibv_rc_pingpong connects;
// with -c on both sides too, where we check the marks the real client's
// messages carry.
func TestInteropGoServer(t *testing.T) {
	dev, gid, pp := needRXE(t)
	for i, check := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "check"}[check], func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			port := 18701 + 10*i
			args, cfg := interopPair(dev, gid, port, check)
			cfg.Bind = "127.0.0.1"
			var out bytes.Buffer
			status := &testbin.Buffer{}
			type ret struct {
				res result
				err error
			}
			done := make(chan ret, 1)
			go func() {
				r, err := run(ctx, cfg, &out, status)
				done <- ret{r, err}
			}()
			for !strings.Contains(status.String(), "waiting for a connection") {
				select {
				case r := <-done:
					t.Fatalf("server ended before listening: %v", r.err)
				case <-time.After(10 * time.Millisecond):
				}
			}
			cli := exec.CommandContext(ctx, pp, append(args, "127.0.0.1")...)
			cli.WaitDelay = 5 * time.Second
			cliOut, cliErr := cli.CombinedOutput()
			r := <-done
			t.Logf("ours:\n%s\nibv_rc_pingpong client:\n%s", out.String(), cliOut)
			require.NoError(t, r.err)
			require.NoError(t, cliErr, "ibv_rc_pingpong client")
			assert.Contains(t, string(cliOut), strconv.Itoa(iters)+" iters in")
			assert.Equal(t, int64(cfg.Size)*iters*2, r.res.Bytes)
		})
	}
}

// TestGoToGo: both sides ours, busy polling (the default) on one side.
func TestGoToGo(t *testing.T) {
	dev, _, _ := needRXE(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srvCfg := testConfig(dev, 18702)
	srvCfg.Bind = "127.0.0.1"
	srvCfg.Size = 1 << 16 // several MTU-sized packets per message
	status := &testbin.Buffer{}
	errc := make(chan error, 1)
	go func() {
		_, err := run(ctx, srvCfg, io.Discard, status)
		errc <- err
	}()
	for !strings.Contains(status.String(), "waiting for a connection") {
		select {
		case err := <-errc:
			t.Fatalf("server ended before listening: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	cliCfg := srvCfg
	cliCfg.Server, cliCfg.Events = "127.0.0.1", false
	_, err := run(ctx, cliCfg, io.Discard, io.Discard)
	require.NoError(t, err)
	require.NoError(t, <-errc)
}
