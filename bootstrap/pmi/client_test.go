package pmi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/bootstrap"
	"github.com/rdmago/rdmago/internal/stacks"
)

const testTimeout = 10 * time.Second

func openAll(t *testing.T, s *fakeServer, version int) []*Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	conns := s.conns(t)
	out := make([]*Client, s.size)
	for r, conn := range conns {
		c, err := Open(ctx, Options{Conn: conn, Rank: r, Size: s.size, Version: version, JobID: "7.0"})
		require.NoError(t, err, "rank %d", r)
		out[r] = c
		t.Cleanup(func() { c.Close() })
	}
	return out
}

// Every style of server, every kind of value: allgather through Put,
// Fence and Get sees every rank's value, bit for bit.
func TestAllgather(t *testing.T) {
	values := map[string]func(r int) []byte{
		"empty": func(int) []byte { return nil },
		"one":   func(r int) []byte { return []byte{byte(r)} },
		"qp512": func(r int) []byte { return bytes.Repeat([]byte{byte(r), 0, '\n', ' ', ';', '='}, 86)[:512] },
		"max1024": func(r int) []byte {
			b := make([]byte, bootstrap.MaxValueLen)
			for i := range b {
				b[i] = byte(i*7 + r)
			}
			return b
		},
	}
	keys := []string{"qp", "comm/world/host", strings.Repeat("k", 200), "a b=c;d\n\x00é"}
	for _, style := range []string{"hydra", "slurm", "v2"} {
		for name, val := range values {
			t.Run(style+"/"+name, func(t *testing.T) {
				version := 1
				if style == "v2" {
					version = 2
				}
				s := newFake(style, 4)
				cs := openAll(t, s, version)
				ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
				defer cancel()
				var wg sync.WaitGroup
				errs := make([]error, len(cs))
				got := make([][][][]byte, len(cs))
				for r, c := range cs {
					wg.Go(func() {
						for _, k := range keys {
							v, err := bootstrap.Allgather(ctx, c, k, val(r))
							if err != nil {
								errs[r] = err
								return
							}
							got[r] = append(got[r], v)
						}
					})
				}
				wg.Wait()
				for r := range cs {
					require.NoError(t, errs[r], "rank %d", r)
					for ki := range keys {
						for p := range cs {
							assert.Equal(t, val(p), nilIfEmpty(got[r][ki][p]), "rank %d key %d peer %d", r, ki, p)
						}
					}
				}
				// Keys on the wire are namespaced and plain.
				for _, line := range strings.Split(s.Received(), "\n") {
					if strings.Contains(line, "put") {
						assert.Regexp(t, `key=rdmago[:#]`, line)
					}
				}
			})
		}
	}
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// A value longer than the server's limit is split over several keys.
func TestValueSplit(t *testing.T) {
	s := newFake("hydra", 2)
	s.valMax = 260 // room for about 100 characters of value per line
	cs := openAll(t, s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	big := bytes.Repeat([]byte("0123456789"), 100)
	var wg sync.WaitGroup
	var getErr error
	var got []byte
	wg.Go(func() {
		require.NoError(t, cs[0].Put(ctx, "big", big))
		require.NoError(t, cs[0].Fence(ctx))
	})
	wg.Go(func() {
		if err := cs[1].Fence(ctx); err != nil {
			getErr = err
			return
		}
		got, getErr = cs[1].Get(ctx, "big")
	})
	wg.Wait()
	require.NoError(t, getErr)
	assert.Equal(t, big, got)
	assert.Contains(t, s.Received(), "key=rdmago:big~6")
	for _, line := range strings.Split(s.Received(), "\n") {
		assert.LessOrEqual(t, len(line)+1, 260, "every request line fits the server's limit")
	}
}

func TestGetMissingTimesOut(t *testing.T) {
	for _, style := range []string{"hydra", "slurm", "v2"} {
		t.Run(style, func(t *testing.T) {
			s := newFake(style, 1)
			version := 1
			if style == "v2" {
				version = 2
			}
			c := openAll(t, s, version)[0]
			ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
			defer cancel()
			_, err := c.Get(ctx, "nope")
			require.Error(t, err)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.Contains(t, err.Error(), `get "nope": not found after`)
			assert.Contains(t, err.Error(), "Fence")
			switch style {
			case "hydra":
				assert.Contains(t, err.Error(), "rc=-1: key_rdmago:nope_not_found")
			case "slurm":
				assert.Contains(t, err.Error(), "rc=1")
			case "v2":
				assert.Contains(t, err.Error(), "found=FALSE")
			}
			// The client is still usable.
			ctx2, cancel2 := context.WithTimeout(context.Background(), testTimeout)
			defer cancel2()
			require.NoError(t, c.Put(ctx2, "k", []byte("v")))
			require.NoError(t, c.Fence(ctx2))
			v, err := c.Get(ctx2, "k")
			require.NoError(t, err)
			assert.Equal(t, "v", string(v))
		})
	}
}

// A Fence whose context ends still counts as entered: the barrier_out
// that arrives later is consumed by the next operation, and the stream
// stays in step.
func TestCancelledFenceStaysInStep(t *testing.T) {
	s := newFake("hydra", 2)
	cs := openAll(t, s, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := cs[0].Fence(ctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	ctx, cancel = context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	require.NoError(t, cs[1].Put(ctx, "x", []byte("1")))
	require.NoError(t, cs[1].Fence(ctx)) // completes rank 0's cancelled fence
	// Rank 0's next Get first reads the due barrier_out, then its answer.
	v, err := cs[0].Get(ctx, "x")
	require.NoError(t, err)
	assert.Equal(t, "1", string(v))
}

// An operation queued behind a blocked Fence honours its own context.
func TestQueuedOperationCancels(t *testing.T) {
	s := newFake("slurm", 2)
	cs := openAll(t, s, 1)
	fctx, fcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cs[0].Fence(fctx) }()
	require.Eventually(t, func() bool { return strings.Contains(s.Received(), "barrier_in") }, testTimeout, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := cs[0].Put(ctx, "k", []byte("v"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "earlier PMI request")
	fcancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

func TestRCError(t *testing.T) {
	s := newFake("hydra", 1)
	s.reply = map[string]string{"put": "cmd=put_result rc=-1 msg=duplicate_key\n"}
	c := openAll(t, s, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	err := c.Put(ctx, "k", []byte("v"))
	var rce *RCError
	require.ErrorAs(t, err, &rce)
	assert.Equal(t, -1, rce.RC)
	assert.Equal(t, "duplicate_key", rce.Msg)
	assert.Contains(t, err.Error(), `bootstrap: put "k" (PMI server answered put_result`)
	assert.Contains(t, err.Error(), "rc=-1: duplicate_key")
}

// Malformed or unexpected replies end the client with ErrServerLost, at
// once, never a hang or a panic.
func TestMalformedReplies(t *testing.T) {
	cases := []struct{ name, cmd, reply, want string }{
		{"no cmd", "put", "rc=0 msg=success\n", "no cmd"},
		{"not key=value", "put", "cmd=put_result garbage\n", "not key=value"},
		{"wrong cmd", "put", "cmd=barrier_out\n", "expected put_result"},
		{"bad rc", "put", "cmd=put_result rc=zero\n", `rc="zero"`},
		{"duplicate key", "put", "cmd=put_result rc=0 rc=1\n", "twice"},
		{"eof", "put", "CLOSE", "EOF"},
		{"huge line", "put", strings.Repeat("x", maxMsg+100), "without a complete message"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newFake("hydra", 1)
			c := openAll(t, s, 1)[0]
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			s.mu.Lock()
			s.reply = map[string]string{tc.cmd: tc.reply}
			s.mu.Unlock()
			err := c.Put(ctx, "k", []byte("v"))
			require.Error(t, err)
			assert.ErrorIs(t, err, bootstrap.ErrServerLost)
			assert.Contains(t, err.Error(), tc.want)
			err = c.Fence(ctx)
			assert.ErrorIs(t, err, bootstrap.ErrServerLost, "the client is finished")
		})
	}
	t.Run("v2 bad length", func(t *testing.T) {
		s := newFake("v2", 1)
		c := openAll(t, s, 2)[0]
		s.mu.Lock()
		s.reply = map[string]string{"kvs-fence": "abcdefcmd=kvs-fence-response;"}
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		err := c.Fence(ctx)
		assert.ErrorIs(t, err, bootstrap.ErrServerLost)
		assert.Contains(t, err.Error(), "length prefix")
	})
}

func TestAbort(t *testing.T) {
	for _, version := range []int{1, 2} {
		t.Run(fmt.Sprint("v", version), func(t *testing.T) {
			style := "hydra"
			if version == 2 {
				style = "v2"
			}
			s := newFake(style, 2)
			cs := openAll(t, s, version)
			ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
			defer cancel()
			// Abort does not queue behind a Fence that waits for the other rank.
			fenceDone := make(chan error, 1)
			fctx, fcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			defer fcancel()
			go func() { fenceDone <- cs[0].Fence(fctx) }()
			require.Eventually(t, func() bool { // the Fence waits
				for _, g := range stacks.All() {
					if g.State != "running" && g.State != "runnable" && strings.Contains(g.Stack, "(*Client).Fence(") && strings.Contains(g.Stack, "pmi.TestAbort.") {
						return true
					}
				}
				return false
			}, 5*time.Second, time.Millisecond, "the Fence never waited")
			require.NoError(t, cs[0].Abort(ctx, 7, "bad\nthing"))
			require.Eventually(t, func() bool {
				s.mu.Lock()
				defer s.mu.Unlock()
				return len(s.aborts) == 1
			}, testTimeout, time.Millisecond)
			if version == 1 {
				assert.Contains(t, s.aborts[0], "exitcode=7")
			} else {
				assert.Contains(t, s.aborts[0], "isworld=TRUE")
				assert.Contains(t, s.aborts[0], "msg=bad thing")
			}
			<-fenceDone
			err := cs[0].Put(ctx, "k", nil)
			assert.ErrorIs(t, err, bootstrap.ErrAborted)
		})
	}
}

func TestCloseFinalizes(t *testing.T) {
	s := newFake("hydra", 1)
	c := openAll(t, s, 1)[0]
	require.NoError(t, c.Close())
	require.NoError(t, c.Close())
	s.mu.Lock()
	assert.Equal(t, 1, s.finalized)
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	assert.ErrorIs(t, c.Put(ctx, "k", nil), bootstrap.ErrClosed)
}

// A server whose limits leave no room for values is refused at Open.
func TestTinyLimits(t *testing.T) {
	s := newFake("hydra", 1)
	s.valMax = 150
	conns := s.conns(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := Open(ctx, Options{Conn: conns[0], Rank: 0, Size: 1})
	require.ErrorIs(t, err, bootstrap.ErrServerLost)
	assert.Contains(t, err.Error(), "values of 150 bytes")
}

func TestBadArguments(t *testing.T) {
	s := newFake("hydra", 1)
	c := openAll(t, s, 1)[0]
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	assert.ErrorIs(t, c.Put(ctx, "", nil), bootstrap.ErrInvalid)
	assert.ErrorIs(t, c.Put(ctx, strings.Repeat("k", bootstrap.MaxKeyLen+1), nil), bootstrap.ErrInvalid)
	err := c.Put(ctx, "k", make([]byte, bootstrap.MaxValueLen+1))
	assert.ErrorIs(t, err, bootstrap.ErrInvalid)
	assert.Contains(t, err.Error(), "value of 1025 bytes exceeds 1024")
	_, err = c.Get(ctx, "")
	assert.ErrorIs(t, err, bootstrap.ErrInvalid)
	done, stop := context.WithCancel(ctx)
	stop()
	assert.ErrorIs(t, c.Fence(done), context.Canceled)

	for _, o := range []Options{
		{Rank: 4, Size: 4, Conn: c.conn},
		{Rank: -1, Size: 4, Conn: c.conn},
		{Rank: 0, Size: 0, Conn: c.conn},
		{Rank: 0, Size: 1},
		{Rank: 0, Size: 1, Conn: c.conn, Version: 3},
	} {
		_, err := Open(ctx, o)
		assert.ErrorIs(t, err, bootstrap.ErrInvalid, "%+v", o)
	}
}

// PMI-2: the server's rank and size win over nothing: a disagreement with
// the environment is an error.
func TestV2Mismatch(t *testing.T) {
	s := newFake("v2", 2)
	conns := s.conns(t)
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	_, err := Open(ctx, Options{Conn: conns[0], Rank: 0, Size: 3, Version: 2})
	require.ErrorIs(t, err, bootstrap.ErrMismatch)
	assert.Contains(t, err.Error(), "the PMI server says rank 0 of 2, the environment said rank 0 of 3")
}

// The launcher's socket arrives as a descriptor number (PMI_FD).
func TestOpenFD(t *testing.T) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	srvFile := os.NewFile(uintptr(fds[1]), "server")
	srvConn, err := net.FileConn(srvFile)
	srvFile.Close()
	require.NoError(t, err)
	s := newFake("slurm", 1)
	go s.serve(srvConn)
	defer srvConn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := Open(ctx, Options{FD: fds[0], Rank: 0, Size: 1})
	require.NoError(t, err)
	defer c.Close()
	// Open took the descriptor over: the number is closed.
	var st syscall.Stat_t
	assert.ErrorIs(t, syscall.Fstat(fds[0], &st), syscall.EBADF)
	assert.Equal(t, "kvs_4242_0", c.KVSName())
	k, v := c.Limits()
	assert.Equal(t, []int{64, 1024}, []int{k, v})

	_, err = Open(ctx, Options{FD: 987, Rank: 0, Size: 1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "PMI_FD=987")
}

// Hydra's -pmi-port mode: connect, identify with PMI_ID, learn rank and size.
func TestOpenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	s := newFake("hydra", 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		buf := make([]byte, 256)
		n, _ := conn.Read(buf)
		if string(buf[:n]) != "cmd=initack pmiid=5\n" {
			conn.Close()
			return
		}
		conn.Write([]byte("cmd=initack\ncmd=set size=3\ncmd=set rank=2\ncmd=set debug=0\n"))
		s.serve(conn)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	c, err := Open(ctx, Options{Port: ln.Addr().String(), ID: 5})
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, 2, c.Rank())
	assert.Equal(t, 3, c.Size())
}

// A server that never answers cannot hang Open.
func TestOpenSilentServer(t *testing.T) {
	a, b := net.Pipe()
	defer b.Close()
	go func() {
		buf := make([]byte, 1024)
		for {
			if _, err := b.Read(buf); err != nil {
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Open(ctx, Options{Conn: a, Rank: 0, Size: 1})
	require.Error(t, err)
	assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
}

// earlyClock is a ctx whose deadline has already passed by the clock
// while its own timer has not yet marked it done: what a loaded machine
// shows between a socket deadline firing and ctx's timer running.
type earlyClock struct{ context.Context }

func (earlyClock) Deadline() (time.Time, bool) { return time.Now().Add(-time.Second), true }

// A write cut by the deadline ctx gave it fails as ctx's deadline, not as
// a lost server: the client stays usable.
func TestWriteAtDeadlineIsTheDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	c := &Client{conn: a}
	base, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := c.writeMsg(earlyClock{base}, "cmd=get\n")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, bootstrap.ErrServerLost)
	assert.NoError(t, c.terminal(), "the client is not marked broken")
}
