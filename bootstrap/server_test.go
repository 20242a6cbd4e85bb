package bootstrap

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/hostid"
	"github.com/rdmago/rdmago/internal/netsel"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFormatRanks(t *testing.T) {
	for _, tc := range []struct {
		in   []int
		want string
	}{
		{nil, "no ranks"},
		{[]int{3}, "rank 3"},
		{[]int{3, 7}, "ranks 3 and 7"},
		{[]int{3, 4}, "ranks 3 and 4"},
		{[]int{3, 4, 5}, "ranks 3-5"},
		{[]int{0, 3, 7}, "ranks 0, 3 and 7"},
		{append([]int{3, 7}, seq(10, 250)...), "ranks 3, 7 and 10-250"},
		{append(seq(0, 2), 9), "ranks 0-2 and 9"},
	} {
		assert.Equal(t, tc.want, FormatRanks(tc.in))
	}
}

func seq(a, b int) []int {
	var out []int
	for i := a; i <= b; i++ {
		out = append(out, i)
	}
	return out
}

func TestJoinPutGetAddFenceAllgather(t *testing.T) {
	checkLeaks(t)
	for _, size := range []int{1, 2, 3, 8} {
		t.Run(fmt.Sprint("size=", size), func(t *testing.T) {
			ctx := testCtx(t)
			s := newServer(t, size, nil)
			cs := joinAll(t, ctx, s, size)
			errs := each(size, func(r int) error {
				c := cs[r]
				if c.Rank() != r || c.Size() != size {
					return fmt.Errorf("rank/size %d/%d", c.Rank(), c.Size())
				}
				if err := c.Put(ctx, fmt.Sprint("k", r), []byte(fmt.Sprint("v", r))); err != nil {
					return err
				}
				// Get waits for a value not put yet, without a fence.
				v, err := c.Get(ctx, fmt.Sprint("k", (r+1)%size))
				if err != nil {
					return err
				}
				if string(v) != fmt.Sprint("v", (r+1)%size) {
					return fmt.Errorf("got %q", v)
				}
				if _, err := c.Add(ctx, "counter", int64(r+1)); err != nil {
					return err
				}
				if err := Barrier(ctx, c); err != nil {
					return err
				}
				n, err := c.Add(ctx, "counter", 0)
				if err != nil {
					return err
				}
				if want := int64(size * (size + 1) / 2); n != want {
					return fmt.Errorf("counter %d, want %d", n, want)
				}
				for round := range 3 {
					out, err := Allgather(ctx, c, fmt.Sprint("ag", round), []byte(fmt.Sprint(round, ":", r)))
					if err != nil {
						return err
					}
					for q, v := range out {
						if string(v) != fmt.Sprint(round, ":", q) {
							return fmt.Errorf("round %d: out[%d] = %q", round, q, v)
						}
					}
				}
				// Empty and maximum-size values go through.
				out, err := c.Allgather(ctx, "sizes", make([]byte, (r%2)*MaxValueLen))
				if err != nil {
					return err
				}
				for q, v := range out {
					if len(v) != (q%2)*MaxValueLen {
						return fmt.Errorf("out[%d] has %d bytes", q, len(v))
					}
				}
				return c.Fence(ctx)
			})
			for r, err := range errs {
				require.NoError(t, err, "rank %d", r)
			}
			peers := cs[0].Peers()
			require.Len(t, peers, size)
			for r, p := range peers {
				assert.Equal(t, r, p.Rank)
				assert.Equal(t, fmt.Sprint("host", r%2), p.Host)
				assert.Equal(t, "127.0.0.1", p.Addr)
			}
			assert.Equal(t, size > 1, cs[0].SpansHosts())
			assert.Empty(t, s.Missing())
			select {
			case <-s.Ready():
			default:
				t.Error("Ready not closed after every rank joined")
			}
		})
	}
}

func TestBadArguments(t *testing.T) {
	checkLeaks(t)
	ctx := testCtx(t)
	s := newServer(t, 1, nil)
	c := joinAll(t, ctx, s, 1)[0]
	long := strings.Repeat("k", MaxKeyLen+1)
	for name, err := range map[string]error{
		"empty key":      c.Put(ctx, "", nil),
		"long key":       c.Put(ctx, long, nil),
		"long value":     c.Put(ctx, "k", make([]byte, MaxValueLen+1)),
		"get empty":      func() error { _, err := c.Get(ctx, ""); return err }(),
		"add long key":   func() error { _, err := c.Add(ctx, long, 1); return err }(),
		"allgather long": func() error { _, err := c.Allgather(ctx, "k", make([]byte, MaxValueLen+1)); return err }(),
	} {
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
	assert.ErrorContains(t, c.Put(ctx, "k", make([]byte, MaxValueLen+1)), `bootstrap: put "k": value of 1025 bytes exceeds 1024`)
	// The client still works.
	require.NoError(t, c.Put(ctx, "k", []byte("v")))

	for _, o := range []ClientOptions{
		{Token: testToken, Size: 1},
		{Addr: s.Addr(), Size: 1},
		{Addr: s.Addr(), Token: testToken, Size: 0},
		{Addr: s.Addr(), Token: testToken, Size: 2, Rank: 2},
		{Addr: s.Addr(), Token: testToken, Size: 2, Rank: -1},
		{Addr: s.Addr(), Token: testToken, Size: 2, Version: strings.Repeat("v", MaxVersionLen+1)},
	} {
		_, err := Dial(ctx, o)
		assert.ErrorIs(t, err, ErrInvalid, "%+v", o)
	}
	_, err := NewServer(ServerOptions{Size: 2})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = NewServer(ServerOptions{Token: testToken})
	assert.ErrorIs(t, err, ErrInvalid)
}

// rawConn is a hand-driven client for feeding the server bad input.
type rawConn struct {
	net.Conn
	br *bufio.Reader
}

func rawDial(t *testing.T, addr string) *rawConn {
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(testTimeout))
	return &rawConn{Conn: c, br: bufio.NewReader(c)}
}

// handshake authenticates with token and, if join is not nil, joins.
func (c *rawConn) handshake(t *testing.T, token []byte, join *msg) {
	nc, err := newNonce()
	require.NoError(t, err)
	_, err = c.Write((&msg{typ: tHello, nonce: nc}).encode(nil))
	require.NoError(t, err)
	ch, err := readFrame(c.br, maxClientFrame)
	require.NoError(t, err)
	require.Equal(t, tChallenge, ch.typ)
	_, err = c.Write((&msg{typ: tProof, mac: proof(token, labelClient, &nc, &ch.nonce)}).encode(nil))
	require.NoError(t, err)
	if join != nil {
		_, err = c.Write(join.encode(nil))
		require.NoError(t, err)
	}
}

// closedByPeer reports whether the server closed the connection.
func (c *rawConn) closedByPeer() bool {
	c.SetReadDeadline(time.Now().Add(testTimeout))
	var b [1]byte
	for {
		_, err := c.br.Read(b[:])
		if err != nil {
			var ne net.Error
			return !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// Bad clients of every kind arrive while a real job joins and runs; each is
// dropped and logged, and the job does not notice.
func TestAuthBadClientsDoNotDisturbJob(t *testing.T) {
	checkLeaks(t)
	ctx := testCtx(t)
	log := &logBuf{}
	s := newServer(t, 4, log, func(o *ServerOptions) { o.HandshakeTimeout = 300 * time.Millisecond })

	var wg sync.WaitGroup
	var badErr error
	wg.Go(func() {
		// A client with the wrong token is told so, and the server logs it.
		o := clientOpts(s, 1, 4)
		o.Token = []byte("not the token")
		_, badErr = Dial(ctx, o)
	})
	garbage := rawDial(t, s.Addr())
	garbage.Write([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))
	small := rawDial(t, s.Addr())
	small.Write([]byte{0, 0, 0, 9, tHello, 'J', 'U', 'N', 'K', 1, 2, 3, 4})
	oversized := rawDial(t, s.Addr())
	hdr := binary.BigEndian.AppendUint32(nil, 1<<30)
	oversized.Write(append(hdr, tHello))
	silent := rawDial(t, s.Addr())
	// Authenticated but then sends a frame that is not a join.
	nojoin := rawDial(t, s.Addr())
	nojoin.handshake(t, testToken, &msg{typ: tPut, id: 1, key: "x"})
	// Wrong proof from a raw client.
	wrong := rawDial(t, s.Addr())
	wrong.handshake(t, []byte("guess"), nil)

	cs := joinAll(t, ctx, s, 4)
	errs := each(4, func(r int) error {
		out, err := Allgather(ctx, cs[r], "ag", []byte{byte(r)})
		if err == nil && len(out) != 4 {
			err = fmt.Errorf("%d values", len(out))
		}
		return err
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	wg.Wait()
	require.ErrorIs(t, badErr, ErrAuth)
	assert.Contains(t, badErr.Error(), "does not know this job's token")
	for name, c := range map[string]*rawConn{"garbage": garbage, "small": small, "oversized": oversized,
		"silent": silent, "nojoin": nojoin, "wrong": wrong} {
		assert.True(t, c.closedByPeer(), name)
	}
	log.waitLog(t, "wrong token", "frame too large", "bad magic", "no handshake within 300ms", "no join after the handshake")
	assert.Equal(t, 2, strings.Count(log.String(), "wrong token"), log.String())
	// The token never appears in the log, nor does anything look like a panic.
	assert.NotContains(t, log.String(), string(testToken))
	assert.NotContains(t, log.String(), "panic")
}

func TestSilentClientsAreBounded(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 1, nil, func(o *ServerOptions) { o.HandshakeTimeout = 100 * time.Millisecond })
	var conns []*rawConn
	for range 20 {
		conns = append(conns, rawDial(t, s.Addr()))
	}
	for i, c := range conns {
		assert.True(t, c.closedByPeer(), "conn %d", i)
	}
	// Still serving.
	joinAll(t, testCtx(t), s, 1)
}

func TestJoinTimeoutNamesMissingRanks(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 8, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	errs := each(8, func(r int) error {
		if r == 3 || r == 7 {
			return nil
		}
		c, err := Dial(ctx, clientOpts(s, r, 8))
		if err == nil {
			c.Close()
			return errors.New("joined")
		}
		return err
	})
	for r, err := range errs {
		if r == 3 || r == 7 {
			continue
		}
		require.ErrorIs(t, err, context.DeadlineExceeded, "rank %d", r)
		assert.Regexp(t, `^bootstrap: join: after \d+ms, ranks 3 and 7 of 8 have not joined( \(ranks? [-0-9, and]+ joined but ha(s|ve) given up\))? \(context deadline exceeded\)$`, err.Error())
		var e *Error
		require.ErrorAs(t, err, &e)
		assert.Equal(t, []int{3, 7}, e.Ranks)
		assert.Equal(t, 8, e.Size)
	}
	// The ranks that gave up left: the server knows nobody is there.
	require.Eventually(t, func() bool { return len(s.Missing()) == 8 }, testTimeout, 5*time.Millisecond)
	select {
	case <-s.Ready():
		t.Error("Ready closed though ranks are missing")
	default:
	}
}

func TestJoinTimeoutManyMissing(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 256, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	present := []int{0, 1, 2, 4, 5, 6, 8, 9}
	errs := each(len(present), func(i int) error {
		_, err := Dial(ctx, clientOpts(s, present[i], 256))
		return err
	})
	for _, err := range errs {
		assert.ErrorContains(t, err, "ranks 3, 7 and 10-255 of 256 have not joined")
	}
}

func TestDialUnreachable(t *testing.T) {
	checkLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	// Long enough that the first attempt ends by itself even on a loaded
	// machine: a deadline that cuts it leaves no refusal to report.
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = Dial(ctx, ClientOptions{Addr: addr, Token: testToken, Size: 1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "could not reach the rendezvous server at "+addr)
	assert.Contains(t, err.Error(), "connection refused")
}

func TestNotABootstrapServer(t *testing.T) {
	checkLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n"))
		time.Sleep(100 * time.Millisecond)
		c.Close()
	}()
	_, err = Dial(testCtx(t), ClientOptions{Addr: ln.Addr().String(), Token: testToken, Size: 1})
	require.ErrorIs(t, err, ErrServerLost)
	assert.Contains(t, err.Error(), "is this a bootstrap server?")
	<-done
}

func TestVersionAndConfigMismatch(t *testing.T) {
	checkLeaks(t)
	for _, tc := range []struct {
		name string
		mod  func(r int, o *ClientOptions)
		want string
		bad  []int
	}{
		{"version", func(r int, o *ClientOptions) {
			if r == 2 {
				o.Version = "v0.1.0"
			} else {
				o.Version = "v0.2.0"
			}
		}, `rank 2 has version "v0.1.0", rank 0 has "v0.2.0"`, []int{2}},
		{"versions", func(r int, o *ClientOptions) {
			o.Version = map[int]string{1: "v0.3.0", 3: "v0.3.0", 2: "v0.1.0"}[r]
			if o.Version == "" {
				o.Version = "v0.2.0"
			}
		}, `ranks 1 and 3 have version "v0.3.0"; rank 2 has version "v0.1.0", rank 0 has "v0.2.0"`, []int{1, 2, 3}},
		{"config", func(r int, o *ClientOptions) {
			if r == 1 {
				o.Config = "shm"
			}
		}, `rank 1 has transport configuration "shm", rank 0 has "tcp"`, []int{1}},
		{"size", func(r int, o *ClientOptions) {
			if r == 1 {
				o.Size = 3
			}
		}, `rank 1 says the job has 3 ranks, the rendezvous server expects 4`, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := &logBuf{}
			s := newServer(t, 4, log)
			errs := each(4, func(r int) error {
				o := clientOpts(s, r, 4)
				tc.mod(r, &o)
				c, err := Dial(testCtx(t), o)
				if err == nil {
					c.Close()
					return errors.New("joined")
				}
				return err
			})
			for r, err := range errs {
				require.ErrorIs(t, err, ErrMismatch, "rank %d", r)
				assert.Contains(t, err.Error(), tc.want, "rank %d", r)
				var e *Error
				require.ErrorAs(t, err, &e)
				assert.Equal(t, tc.bad, e.Ranks)
			}
			log.waitLog(t, "join failed")
			// A late or retrying rank hears the same.
			_, err := Dial(testCtx(t), clientOpts(s, 0, 4))
			require.ErrorIs(t, err, ErrMismatch)
		})
	}
}

func TestDuplicateAndOutOfRangeRank(t *testing.T) {
	checkLeaks(t)
	ctx := testCtx(t)
	log := &logBuf{}
	s := newServer(t, 2, log)
	first := make(chan *Client, 1)
	go func() {
		c, err := Dial(ctx, clientOpts(s, 0, 2))
		assert.NoError(t, err)
		first <- c
	}()
	require.Eventually(t, func() bool { return len(s.Missing()) == 1 }, testTimeout, time.Millisecond)
	_, err := Dial(ctx, clientOpts(s, 0, 2))
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), `rank 0 has already joined (from host "host0", 127.0.0.1)`)

	// A rank beyond the server's size (the client thinks the job is bigger).
	_, err = Dial(ctx, ClientOptions{Addr: s.Addr(), Token: testToken, Rank: 5, Size: 8})
	require.ErrorIs(t, err, ErrRefused)
	assert.Contains(t, err.Error(), "rank 5 is out of range for a job of 2 ranks")
	log.waitLog(t, "refused join")

	// The job goes on.
	c1, err := Dial(ctx, clientOpts(s, 1, 2))
	require.NoError(t, err)
	c0 := <-first
	require.NotNil(t, c0)
	errs := each(2, func(r int) error { return []*Client{c0, c1}[r].Fence(ctx) })
	require.NoError(t, errors.Join(errs...))
	c0.Close()
	c1.Close()
}

func TestCollectiveTimeoutNamesMissingRanks(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 4, nil)
	cs := joinAll(t, testCtx(t), s, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	errs := each(4, func(r int) error {
		if r == 3 {
			return nil
		}
		return cs[r].Fence(ctx)
	})
	for r := range 3 {
		require.ErrorIs(t, errs[r], context.DeadlineExceeded)
		assert.Regexp(t, `^bootstrap: fence: after \d+ms, rank 3 of 4 has not arrived`, errs[r].Error())
		var e *Error
		require.ErrorAs(t, errs[r], &e)
		assert.Equal(t, []int{3}, e.Ranks)
	}

	// Allgather: ranks 1 and 2 stay out (rank 3 comes to the fence late,
	// completing it, so the next collective lines up).
	require.NoError(t, cs[3].Fence(testCtx(t)))
	ctx2, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	errs = each(4, func(r int) error {
		if r == 1 || r == 2 {
			return nil
		}
		_, err := cs[r].Allgather(ctx2, "qp", []byte("x"))
		return err
	})
	for _, r := range []int{0, 3} {
		assert.Regexp(t, `^bootstrap: allgather "qp": after \d+ms, ranks 1 and 2 of 4 have not arrived`, errs[r].Error())
	}
}

func TestGetTimeoutAndCancel(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 2, nil)
	cs := joinAll(t, testCtx(t), s, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := cs[0].Get(ctx, "never")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Regexp(t, `^bootstrap: get "never": no rank had put the key after \d+ms`, err.Error())

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error)
	go func() { _, err := cs[0].Get(ctx, "later"); done <- err }()
	awaitBlocked(t, 1, "(*Client).Get")
	cancel()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(testTimeout):
		t.Fatal("Get did not return after cancel")
	}
	// The server forgot the cancelled waiters.
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.getters) == 0
	}, testTimeout, time.Millisecond)
	// A cancelled context fails at once, and the client is still usable.
	_, err = cs[0].Get(ctx, "later")
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, cs[1].Put(testCtx(t), "later", []byte("v")))
	v, err := cs[0].Get(testCtx(t), "later")
	require.NoError(t, err)
	assert.Equal(t, "v", string(v))
}

func TestServerCloseWhileClientsWait(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 3, nil)
	cs := joinAll(t, testCtx(t), s, 3)
	ctx := testCtx(t)
	started := make(chan struct{}, 3)
	res := make(chan error, 3)
	go func() { started <- struct{}{}; _, err := cs[0].Get(ctx, "nothing"); res <- err }()
	go func() { started <- struct{}{}; res <- cs[1].Fence(ctx) }()
	go func() { started <- struct{}{}; res <- cs[2].Fence(ctx) }()
	for range 3 {
		<-started
	}
	awaitBlocked(t, 1, "(*Client).Get")
	awaitBlocked(t, 2, "(*Client).Fence")
	require.NoError(t, s.Close())
	for range 3 {
		select {
		case err := <-res:
			require.ErrorIs(t, err, ErrClosed)
			assert.Contains(t, err.Error(), "the rendezvous server closed")
		case <-time.After(testTimeout):
			t.Fatal("a waiting client hung after server Close")
		}
	}
	for _, c := range cs {
		<-c.Done()
		assert.ErrorIs(t, c.Err(), ErrClosed)
		assert.ErrorIs(t, c.Put(ctx, "k", nil), ErrClosed)
	}
	_, ok := <-s.Aborts()
	assert.False(t, ok, "Aborts is closed by Close")
}

func TestAbort(t *testing.T) {
	checkLeaks(t)
	log := &logBuf{}
	s := newServer(t, 3, log)
	cs := joinAll(t, testCtx(t), s, 3)
	ctx := testCtx(t)
	waiting := make(chan error, 1)
	go func() { _, err := cs[0].Get(ctx, "never"); waiting <- err }()
	awaitBlocked(t, 1, "(*Client).Get")
	require.NoError(t, cs[1].Abort(ctx, 3, "out of memory on GPU 0"))
	select {
	case a := <-s.Aborts():
		assert.Equal(t, AbortInfo{Rank: 1, Code: 3, Reason: "out of memory on GPU 0"}, a)
	case <-time.After(testTimeout):
		t.Fatal("no abort delivered")
	}
	err := <-waiting
	require.ErrorIs(t, err, ErrAborted)
	var ae *AbortError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, 1, ae.Info.Rank)
	assert.Contains(t, err.Error(), "job aborted by rank 1 with code 3: out of memory on GPU 0")
	for _, c := range cs {
		select {
		case <-c.Done():
		case <-time.After(testTimeout):
			t.Fatal("client not done after abort")
		}
		assert.ErrorIs(t, c.Fence(ctx), ErrAborted)
	}
	log.waitLog(t, "rank aborted the job")
}

func TestRankLeftFailsCollectives(t *testing.T) {
	checkLeaks(t)
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprint("crash=", crash), func(t *testing.T) {
			s := newServer(t, 3, nil)
			cs := joinAll(t, testCtx(t), s, 3)
			ctx := testCtx(t)
			res := make(chan error, 1)
			go func() { res <- cs[0].Fence(ctx) }()
			awaitArrived(t, s, 0, 0)
			if crash {
				cs[2].conn.Close() // no goodbye, as if the process died
			} else {
				cs[2].Close()
			}
			err := <-res
			require.ErrorIs(t, err, ErrRankLeft)
			want := "rank 2 closed its connection before entering fence #0"
			if crash {
				want = "rank 2 lost its connection before entering fence #0"
			}
			assert.Contains(t, err.Error(), want)
			// Rank 1 entering later learns it at once, as does a new collective.
			assert.ErrorIs(t, cs[1].Fence(ctx), ErrRankLeft)
			_, err = cs[1].Allgather(ctx, "x", nil)
			require.ErrorIs(t, err, ErrRankLeft)
			assert.Contains(t, err.Error(), "rank 2 left the job before")
			// Put and Get still work between the remaining ranks.
			require.NoError(t, cs[0].Put(ctx, "k", []byte("v")))
			_, err = cs[1].Get(ctx, "k")
			require.NoError(t, err)
		})
	}
}

func TestCollectiveMismatch(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 2, nil)
	cs := joinAll(t, testCtx(t), s, 2)
	ctx := testCtx(t)
	errs := each(2, func(r int) error {
		if r == 0 {
			return cs[0].Fence(ctx)
		}
		_, err := cs[1].Allgather(ctx, "qp", nil)
		return err
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrMismatch, "rank %d", r)
		assert.Regexp(t, `rank \d called .* while rank \d called`, err.Error())
	}
}

// A joined rank that sends a malformed frame is dropped (and counts as
// lost); the others carry on.
func TestMalformedFrameAfterJoin(t *testing.T) {
	checkLeaks(t)
	log := &logBuf{}
	s := newServer(t, 2, log)
	ctx := testCtx(t)
	raw := rawDial(t, s.Addr())
	raw.handshake(t, testToken, &msg{typ: tJoin, rank: 1, size: 2, key: "v0.1.0", config: "tcp", host: "evil"})
	c0, err := Dial(ctx, clientOpts(s, 0, 2))
	require.NoError(t, err)
	defer c0.Close()
	w, err := readFrame(raw.br, maxServerFrame(2))
	require.NoError(t, err)
	require.Equal(t, tWelcome, w.typ)
	for _, bad := range [][]byte{
		{0, 0, 0, 3, tPut, 0, 0},          // truncated
		{0, 0, 0, 1, 0x7f},                // unknown type
		{0, 0, 0, 5, tCancel, 0, 0, 0, 1}, // fine: cancel of nothing
	} {
		raw.Write(bad)
	}
	assert.True(t, raw.closedByPeer())
	log.waitLog(t, "malformed frame", "truncated id")
	err = c0.Fence(ctx)
	require.ErrorIs(t, err, ErrRankLeft)
	require.NoError(t, c0.Put(ctx, "still", []byte("fine")))
}

func Test256RanksAllgather(t *testing.T) {
	checkLeaks(t)
	const n = 256
	ctx := testCtx(t)
	s := newServer(t, n, nil)
	cs := make([]*Client, n)
	errs := each(n, func(r int) error {
		c, err := Dial(ctx, clientOpts(s, r, n))
		if err != nil {
			return err
		}
		cs[r] = c
		out, err := Allgather(ctx, c, "qp", fmt.Appendf(nil, "rank-%d-address", r))
		if err != nil {
			return err
		}
		for q, v := range out {
			if string(v) != fmt.Sprintf("rank-%d-address", q) {
				return fmt.Errorf("out[%d] = %q", q, v)
			}
		}
		return c.Fence(ctx)
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	for _, c := range cs {
		c.Close()
	}
}

func TestJoinServe(t *testing.T) {
	checkLeaks(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	ctx := testCtx(t)
	const n = 4
	cs := make([]*Client, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	// Ranks 1-3 start first and keep retrying until rank 0 serves.
	for r := 1; r < n; r++ {
		wg.Go(func() {
			cs[r], errs[r] = Join(ctx, JoinOptions{ClientOptions: ClientOptions{Addr: addr, Token: testToken, Rank: r, Size: n}})
		})
	}
	time.Sleep(100 * time.Millisecond)
	wg.Go(func() {
		cs[0], errs[0] = Join(ctx, JoinOptions{Serve: true, ClientOptions: ClientOptions{Addr: addr, Token: testToken, Rank: 0, Size: n}})
	})
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	errs = each(n, func(r int) error {
		_, err := Allgather(ctx, cs[r], "x", []byte{byte(r)})
		return err
	})
	require.NoError(t, errors.Join(errs...))
	// Rank 0 closing first waits for the others before closing the server.
	closed := make(chan struct{})
	go func() { cs[0].Close(); close(closed) }()
	awaitBlocked(t, 1, "(*Client).Close")
	errs = each(n-1, func(i int) error { return cs[i+1].Put(ctx, fmt.Sprint("after", i), nil) })
	require.NoError(t, errors.Join(errs...))
	for r := 1; r < n; r++ {
		cs[r].Close()
	}
	select {
	case <-closed:
	case <-time.After(testTimeout):
		t.Fatal("serving rank's Close did not return after the others left")
	}
}

func TestServerCloseIdempotentAndListen(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 1, nil)
	assert.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"))
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	_, err := NewServer(ServerOptions{Token: testToken, Size: 1, Listen: "256.0.0.1:0"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "listen on 256.0.0.1:0")
}

func TestJoinTimeoutNamesRanksThatGaveUp(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 3, nil)
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := Dial(short, clientOpts(s, 0, 3))
	require.ErrorContains(t, err, "ranks 1 and 2 of 3 have not joined")
	long, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	_, err = Dial(long, clientOpts(s, 1, 3))
	require.ErrorContains(t, err, "rank 2 of 3 has not joined (rank 0 joined but has given up)")
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Equal(t, []int{2}, e.Ranks)
}

func TestAdvertiseAddr(t *testing.T) {
	checkLeaks(t)
	s := newServer(t, 2, nil)
	ctx := testCtx(t)
	// Both ranks on one host: loopback.
	cs := make([]*Client, 2)
	errs := each(2, func(r int) (err error) {
		o := clientOpts(s, r, 2)
		o.Hostname, o.HostID = "same", hostid.Named("same")
		cs[r], err = Dial(ctx, o)
		return err
	})
	require.NoError(t, errors.Join(errs...))
	defer cs[0].Close()
	defer cs[1].Close()
	a, err := cs[0].AdvertiseAddr("")
	require.NoError(t, err)
	assert.True(t, a.IsLoopback(), a.String())
	_, err = cs[0].AdvertiseAddr("eth0,^lo")
	require.ErrorIs(t, err, ErrInvalid)
	assert.Contains(t, err.Error(), `bootstrap: advertise: netsel: bad interface selector "eth0,^lo"`)

	// Pretend the ranks are on two hosts, on a machine with only loopback
	// and a docker bridge: loopback is out, the bridge is all there is.
	cs[0].peers[1].HostID = hostid.Named("other")
	host := netsel.Static{Ifaces: []netsel.Interface{
		{Name: "lo", Index: 1, Up: true, Loopback: true, Addrs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/8")}},
		{Name: "docker0", Index: 2, Up: true, Addrs: []netip.Prefix{netip.MustParsePrefix("172.17.0.1/16")}},
	}}
	a, err = cs[0].advertiseAddr(host, "")
	require.NoError(t, err)
	assert.Equal(t, "172.17.0.1", a.String())
	_, err = cs[0].advertiseAddr(host, "^docker0")
	require.ErrorIs(t, err, netsel.ErrNoAddress)
	assert.Contains(t, err.Error(), "the job spans hosts, so loopback is out")
}

// TestLongManyRanks runs a 1024-rank job (set RDMAGO_LONG=1): join, a few
// allgathers of QP-address-sized values, a fence.
func TestLongManyRanks(t *testing.T) {
	if os.Getenv("RDMAGO_LONG") == "" {
		t.Skip("set RDMAGO_LONG=1")
	}
	checkLeaks(t)
	const n = 1024
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := newServer(t, n, nil)
	cs := make([]*Client, n)
	val := make([]byte, 512)
	errs := each(n, func(r int) (err error) {
		cs[r], err = Dial(ctx, clientOpts(s, r, n))
		if err != nil {
			return err
		}
		for i := range 3 {
			out, err := Allgather(ctx, cs[r], fmt.Sprint("qp", i), val)
			if err != nil {
				return err
			}
			if len(out) != n {
				return fmt.Errorf("%d values", len(out))
			}
		}
		return cs[r].Fence(ctx)
	})
	require.NoError(t, errors.Join(errs...))
	for _, c := range cs {
		c.Close()
	}
}

// When the handshake slots are full of silent clients, a real rank waits
// in the backlog and gets in once they time out; it is not turned away.
func TestHandshakeSlotsBackpressure(t *testing.T) {
	checkLeaks(t)
	old := maxHandshaking
	maxHandshaking = 2
	defer func() { maxHandshaking = old }()
	s := newServer(t, 1, nil, func(o *ServerOptions) { o.HandshakeTimeout = 200 * time.Millisecond })
	a, b := rawDial(t, s.Addr()), rawDial(t, s.Addr())
	start := time.Now()
	c, err := Dial(testCtx(t), clientOpts(s, 0, 1))
	require.NoError(t, err)
	c.Close()
	assert.True(t, a.closedByPeer())
	assert.True(t, b.closedByPeer())
	// It had to wait for a slot (not a speed assertion: a lower bound).
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond)
}

// A job spans hosts when its ranks report different host identities; the
// host names they report are for people and decide nothing.
func TestSpansHostsByIdentity(t *testing.T) {
	checkLeaks(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		name       string
		hosts, ids [2]string
		spans      bool
	}{
		{"one name, two identities", [2]string{"box", "box"}, [2]string{"boot/netns:1", "boot/netns:2"}, true},
		{"two names, one identity", [2]string{"a", "b"}, [2]string{"boot/netns:1", "boot/netns:1"}, false},
		{"default identity", [2]string{"a", "b"}, [2]string{"", ""}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newServer(t, 2, nil)
			cs := make([]*Client, 2)
			errs := each(2, func(r int) (err error) {
				o := clientOpts(s, r, 2)
				o.Hostname, o.HostID = tc.hosts[r], tc.ids[r]
				cs[r], err = Dial(ctx, o)
				return err
			})
			for r := range cs {
				require.NoError(t, errs[r])
				defer cs[r].Close()
			}
			for r := range cs {
				assert.Equal(t, tc.spans, cs[r].SpansHosts(), "rank %d", r)
				assert.Equal(t, tc.hosts[1], cs[r].Peers()[1].Host)
			}
			if tc.ids[0] != "" {
				assert.Equal(t, tc.ids[1], cs[0].Peers()[1].HostID)
			} else {
				assert.Equal(t, hostid.Best(), cs[0].Peers()[1].HostID)
			}
		})
	}
}

// A request the server takes after an abort, though the rank sent it
// before it learned of the abort, is refused with the abort's code; its
// error carries the AbortError all the same (TestAbort failed so once in
// CI-like runs: the pending Get's error had only the sentinel).
func TestAbortRefusalCarriesAbortError(t *testing.T) {
	c := &Client{err: &AbortError{Info: AbortInfo{Rank: 1, Code: 3, Reason: "out of memory"}}}
	err := c.replyErr("get", "never", msg{typ: tError, ecode: ecAborted, ranks: []uint32{1}, key: "rank 1 aborted the job with code 3: out of memory"})
	require.ErrorIs(t, err, ErrAborted)
	var ae *AbortError
	require.ErrorAs(t, err, &ae)
	assert.Equal(t, AbortInfo{Rank: 1, Code: 3, Reason: "out of memory"}, ae.Info)
	assert.Contains(t, err.Error(), "job aborted by rank 1 with code 3: out of memory")
}
