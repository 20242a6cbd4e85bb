package launchers

import (
	"bufio"
	"bytes"
	"context"
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
)

// miniPMI is a PMI-1 server in Hydra's manner for n ranks, each on its own
// socketpair whose client end is handed over as a PMI_FD number.
type miniPMI struct {
	n       int
	mu      sync.Mutex
	kv      map[string]string
	pending map[string]string
	waiting int
	release chan struct{}
	aborts  []string
	stop    chan struct{}
}

func startMiniPMI(t *testing.T, n int) (*miniPMI, []int) {
	s := &miniPMI{n: n, kv: map[string]string{}, pending: map[string]string{}, release: make(chan struct{}), stop: make(chan struct{})}
	fds := make([]int, n)
	var wg sync.WaitGroup
	var conns []net.Conn
	for r := range n {
		p, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		require.NoError(t, err)
		f := os.NewFile(uintptr(p[1]), "pmi-server")
		c, err := net.FileConn(f)
		f.Close()
		require.NoError(t, err)
		conns = append(conns, c)
		fds[r] = p[0]
		wg.Go(func() { s.serve(c) })
	}
	t.Cleanup(func() {
		close(s.stop)
		for _, c := range conns {
			c.Close()
		}
		wg.Wait()
	})
	return s, fds
}

func (s *miniPMI) serve(c net.Conn) {
	br := bufio.NewReader(c)
	var wmu sync.Mutex
	reply := func(line string) {
		wmu.Lock()
		c.Write([]byte(line + "\n"))
		wmu.Unlock()
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			return
		}
		f := map[string]string{}
		for _, tok := range strings.Fields(line) {
			k, v, _ := strings.Cut(tok, "=")
			f[k] = v
		}
		switch f["cmd"] {
		case "init":
			reply("cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0")
		case "get_maxes":
			reply("cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024")
		case "get_my_kvsname":
			reply("cmd=my_kvsname kvsname=kvs_1")
		case "put":
			s.mu.Lock()
			s.pending[f["key"]] = f["value"]
			s.mu.Unlock()
			reply("cmd=put_result rc=0 msg=success")
		case "get":
			s.mu.Lock()
			v, ok := s.kv[f["key"]]
			s.mu.Unlock()
			if ok {
				reply("cmd=get_result rc=0 msg=success value=" + v)
			} else {
				reply("cmd=get_result rc=-1 msg=key_not_found value=unknown")
			}
		case "barrier_in":
			s.mu.Lock()
			s.waiting++
			ch := s.release
			if s.waiting == s.n {
				for k, v := range s.pending {
					s.kv[k] = v
				}
				s.waiting = 0
				s.release = make(chan struct{})
				close(ch)
			}
			s.mu.Unlock()
			go func() {
				select {
				case <-ch:
					reply("cmd=barrier_out")
				case <-s.stop:
				}
			}()
		case "abort":
			s.mu.Lock()
			s.aborts = append(s.aborts, strings.TrimSpace(line))
			s.mu.Unlock()
		case "finalize":
			reply("cmd=finalize_ack")
		}
	}
}

// Under PMI, rank 0's secret reaches every rank through the key-value
// space, and a rank configured differently says so and aborts the job.
func TestConnectPMI(t *testing.T) {
	for _, mismatch := range []bool{false, true} {
		t.Run(fmt.Sprint("mismatch=", mismatch), func(t *testing.T) {
			const n = 3
			srv, fds := startMiniPMI(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			tokens := make([][]byte, n)
			errs := make([]error, n)
			stderr := make([]bytes.Buffer, n)
			for r := range n {
				wg.Go(func() {
					l, err := Detect(envOf(fmt.Sprint("PMI_FD=", fds[r]), fmt.Sprint("PMI_RANK=", r), "PMI_SIZE=3"))
					if err != nil {
						errs[r] = err
						return
					}
					cfg := "tcp"
					if mismatch && r == 2 {
						cfg = "shm"
					}
					rv, err := l.Connect(ctx, ConnectOptions{Version: "v1", Config: cfg, Stderr: &stderr[r]})
					if err != nil {
						errs[r] = err
						return
					}
					defer rv.Close()
					tokens[r] = rv.Token
					_, errs[r] = bootstrap.Allgather(ctx, rv.Store, "x", []byte{byte(r)})
				})
				if mismatch && r == 2 {
					// Rank 2 fails; the others would wait for it forever
					// in the allgather's fence: the launcher ends them.
					go func() {
						assert.Eventually(t, func() bool {
							srv.mu.Lock()
							defer srv.mu.Unlock()
							return len(srv.aborts) > 0
						}, 10*time.Second, time.Millisecond)
						cancel()
					}()
				}
			}
			wg.Wait()
			if !mismatch {
				for r := range n {
					require.NoError(t, errs[r], "rank %d", r)
					assert.Len(t, tokens[r], 32)
					assert.Equal(t, tokens[0], tokens[r], "every rank has rank 0's secret")
				}
				srv.mu.Lock()
				defer srv.mu.Unlock()
				assert.Empty(t, srv.aborts)
				return
			}
			require.Error(t, errs[2])
			assert.ErrorIs(t, errs[2], bootstrap.ErrMismatch)
			assert.Contains(t, errs[2].Error(), `rank 2 runs "v1 shm", rank 0 runs "v1 tcp"`)
			assert.Contains(t, stderr[2].String(), "rdmago: rank 2 of 3: ")
			assert.Contains(t, stderr[2].String(), "asking MPICH Hydra (mpiexec) to end the job")
			srv.mu.Lock()
			defer srv.mu.Unlock()
			// Rank 2's abort; a rank still in Connect when the test ends the job
			// (the launcher's part) aborts too.
			require.NotEmpty(t, srv.aborts)
			for _, a := range srv.aborts {
				assert.Equal(t, "cmd=abort exitcode=1", a)
			}
		})
	}
}
