package bootstrap

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/internal/hostid"
	"github.com/rdmago/rdmago/internal/testbin"
)

// testTimeout bounds every test's waits, so that a bug shows as a failure.
const testTimeout = 20 * time.Second

var testToken = []byte("0123456789abcdef0123456789abcdef")

// logBuf is a slog sink tests can read while servers write to it.
type logBuf struct{ testbin.Buffer }

func (l *logBuf) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// waitLog waits until the log contains every one of subs.
func (l *logBuf) waitLog(t *testing.T, subs ...string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		s := l.String()
		ok := true
		for _, sub := range subs {
			if !strings.Contains(s, sub) {
				ok = false
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("log never contained %q; log:\n%s", subs, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkLeaks fails the test if goroutines running this package's code
// (other than the test's own) outlive it. Call it first in a test.
func checkLeaks(t *testing.T) {
	t.Cleanup(func() {
		deadline := time.Now().Add(5 * time.Second)
		for {
			leaked := bootstrapGoroutines()
			if len(leaked) == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	})
}

func bootstrapGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	// The first stack is the calling goroutine (the test's cleanup).
	for i, g := range strings.Split(string(buf), "\n\n") {
		if i == 0 {
			continue
		}
		if strings.Contains(g, "rdmago/bootstrap.") && !strings.Contains(g, "testing.tRunner") &&
			!strings.Contains(g, "testing.(*T).Run") && !strings.Contains(g, "testing.runExample") {
			out = append(out, g)
		}
	}
	return out
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func newServer(t *testing.T, size int, log *logBuf, mod ...func(*ServerOptions)) *Server {
	t.Helper()
	o := ServerOptions{Token: testToken, Size: size}
	if log != nil {
		o.Logger = log.logger()
	}
	for _, f := range mod {
		f(&o)
	}
	s, err := NewServer(o)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

func clientOpts(s *Server, rank, size int) ClientOptions {
	return ClientOptions{Addr: s.Addr(), Token: testToken, Rank: rank, Size: size,
		Version: "v0.1.0", Config: "tcp", Hostname: "host" + fmt.Sprint(rank%2), HostID: hostid.Named("host" + fmt.Sprint(rank%2))}
}

// joinAll dials every rank concurrently and returns the clients by rank.
func joinAll(t *testing.T, ctx context.Context, s *Server, size int) []*Client {
	t.Helper()
	cs := make([]*Client, size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { cs[r], errs[r] = Dial(ctx, clientOpts(s, r, size)) })
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	t.Cleanup(func() {
		for _, c := range cs {
			c.Close()
		}
	})
	return cs
}

// each runs f for every rank concurrently and returns the errors by rank.
func each(n int, f func(r int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() { errs[r] = f(r) })
	}
	wg.Wait()
	return errs
}

func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Everything the package started must be gone after all tests.
		deadline := time.Now().Add(5 * time.Second)
		for len(bootstrapGoroutines()) > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if g := bootstrapGoroutines(); len(g) > 0 {
			fmt.Fprintf(os.Stderr, "leaked goroutines after tests:\n%s\n", strings.Join(g, "\n\n"))
			code = 1
		}
	}
	os.Exit(code)
}

// The leak detector must see what a live server and client run, or
// checkLeaks could never fail.
func TestLeakDetectorSeesLiveGoroutines(t *testing.T) {
	s := newServer(t, 1, nil)
	joinAll(t, testCtx(t), s, 1)
	// Accept loop, connection reader and writer, client reader.
	require.GreaterOrEqual(t, len(bootstrapGoroutines()), 4)
}
