package comm_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/comm"
)

var (
	rankCounts = []int{1, 2, 3, 4, 5, 8}
	long       = os.Getenv("RDMAGO_LONG") == "1"
)

// run starts n ranks as goroutines, each with its own world communicator
// over an in-memory rendezvous and the given transport ("loop" by
// default), runs fn on every rank and returns each rank's error. A run
// past its deadline fails instead of hanging; every communicator is closed
// before run returns.
func run(t testing.TB, n int, o comm.Options, fn func(ctx context.Context, c *comm.Comm) error) []error {
	t.Helper()
	o.NoEnv = true
	return runEnv(t, n, o, fn)
}

// runEnv is run that lets Init read the RDMAGO_* variables (unless
// o.NoEnv).
func runEnv(t testing.TB, n int, o comm.Options, fn func(ctx context.Context, c *comm.Comm) error) []error {
	t.Helper()
	return runWith(t, n, o, nil, fn)
}

// runWith is runEnv with per-rank options: per (when not nil) adjusts
// rank r's copy of o.
func runWith(t testing.TB, n int, o comm.Options, per func(r int, o *comm.Options), fn func(ctx context.Context, c *comm.Comm) error) []error {
	t.Helper()
	return runFor(t, 30*time.Second, n, o, per, fn)
}

// runFor is runWith with its own bound on the whole run, for the soak,
// whose length is set by the environment.
func runFor(t testing.TB, timeout time.Duration, n int, o comm.Options, per func(r int, o *comm.Options), fn func(ctx context.Context, c *comm.Comm) error) []error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	stores, err := bootstrap.NewMemory(n)
	require.NoError(t, err)
	if o.Transport == "" {
		o.Transport = "loop"
	}
	errs := make([]error, n)
	comms := make([]*comm.Comm, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() {
				if p := recover(); p != nil {
					buf := make([]byte, 16<<10)
					buf = buf[:runtime.Stack(buf, false)]
					errs[r] = fmt.Errorf("rank %d panicked: %v\n%s", r, p, buf)
					cancel()
				}
			}()
			ro := o
			ro.Store = stores[r]
			if per != nil {
				per(r, &ro)
			}
			c, err := comm.Init(ctx, ro)
			if err != nil {
				errs[r] = err
				cancel()
				return
			}
			comms[r] = c
			if errs[r] = fn(ctx, c); errs[r] != nil {
				cancel() // the others must not wait for this rank forever
			}
		}()
	}
	wg.Wait()
	var cw sync.WaitGroup
	for r, c := range comms {
		if c != nil {
			cw.Add(1)
			go func() {
				defer cw.Done()
				if err := c.Close(); err != nil && errs[r] == nil {
					errs[r] = fmt.Errorf("close: %w", err)
				}
			}()
		}
	}
	cw.Wait()
	for _, s := range stores {
		s.Close()
	}
	if ctx.Err() != nil && ctx.Err() != context.Canceled {
		t.Errorf("run of %d ranks exceeded %v", n, timeout)
	}
	return errs
}

func requireOK(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
}

// runOK is run that requires every rank to succeed.
func runOK(t testing.TB, n int, o comm.Options, fn func(ctx context.Context, c *comm.Comm) error) {
	t.Helper()
	requireOK(t, run(t, n, o, fn))
}
