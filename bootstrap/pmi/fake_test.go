package pmi

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// fakeServer is a PMI server for N ranks in the manner of the real ones:
// "hydra" (PMI-1, rc last, absent key rc=-1), "slurm" (PMI-1, rc first,
// absent key rc=1 without a value) and "v2" (PMI-2 framing, as Slurm's
// plugin). As with Hydra, a put becomes visible to others only when the
// barrier completes.
type fakeServer struct {
	style string
	size  int
	// valMax is what get_maxes reports (1024 unless set).
	valMax int

	mu        sync.Mutex
	kv        map[string]string
	pending   map[string]string
	inBarrier int
	barrierCh chan struct{}
	stop      chan struct{} // closed at cleanup: barriers give up
	received  []string      // every request, as text
	aborts    []string
	finalized int
	// reply, when set, replaces the answer to a command (tests of
	// malformed replies); an empty string sends nothing, "CLOSE" hangs up.
	reply map[string]string
}

func newFake(style string, size int) *fakeServer {
	return &fakeServer{style: style, size: size, valMax: 1024, kv: map[string]string{}, pending: map[string]string{}, barrierCh: make(chan struct{}), stop: make(chan struct{})}
}

// conns returns size client ends, each served by the fake until closed.
func (s *fakeServer) conns(t testing.TB) []net.Conn {
	out := make([]net.Conn, s.size)
	var wg sync.WaitGroup
	for r := range s.size {
		a, b := socketPair(t)
		out[r] = a
		wg.Go(func() { s.serve(b) })
	}
	t.Cleanup(func() {
		close(s.stop)
		for _, c := range out {
			c.Close()
		}
		wg.Wait()
	})
	return out
}

// socketPair is a connected pair of Unix stream sockets: unlike net.Pipe,
// the kernel buffers writes, as with a real launcher's socket.
func socketPair(t testing.TB) (net.Conn, net.Conn) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "socketpair")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[i] = c
	}
	return out[0], out[1]
}

func (s *fakeServer) Received() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Join(s.received, "\n")
}

func (s *fakeServer) serve(conn net.Conn) {
	defer conn.Close()
	br := bufio.NewReader(conn)
	framed := false
	var wmu sync.Mutex
	for {
		var req msg
		if framed {
			var head [6]byte
			if _, err := io.ReadFull(br, head[:]); err != nil {
				return
			}
			var n int
			fmt.Sscanf(strings.TrimSpace(string(head[:])), "%d", &n)
			body := make([]byte, n)
			if _, err := io.ReadFull(br, body); err != nil {
				return
			}
			m, err := parse2(string(body))
			if err != nil {
				return
			}
			req = m
		} else {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			m, err := parse1(strings.TrimSuffix(line, "\n"))
			if err != nil {
				return
			}
			req = m
		}
		s.mu.Lock()
		s.received = append(s.received, req.String())
		custom, hasCustom := s.reply[req.cmd]
		s.mu.Unlock()
		var out string
		if hasCustom {
			if custom == "CLOSE" { // hang up instead of answering
				return
			}
			out = custom
		} else {
			out = s.answer(req)
		}
		if req.cmd == "init" && req.fields["pmi_version"] == "2" {
			framed = true
		}
		if out == "" {
			continue
		}
		if req.cmd == "barrier_in" || req.cmd == "kvs-fence" {
			// Wait for the barrier without blocking the reading side, as
			// a real server does (an abort may come meanwhile).
			go func() {
				s.barrier()
				wmu.Lock()
				io.WriteString(conn, out)
				wmu.Unlock()
			}()
			continue
		}
		wmu.Lock()
		_, err := io.WriteString(conn, out)
		wmu.Unlock()
		if err != nil {
			return
		}
	}
}

func (s *fakeServer) barrier() {
	s.mu.Lock()
	s.inBarrier++
	ch := s.barrierCh
	if s.inBarrier == s.size {
		for k, v := range s.pending {
			s.kv[k] = v
		}
		s.pending = map[string]string{}
		s.inBarrier = 0
		s.barrierCh = make(chan struct{})
		close(ch)
	}
	s.mu.Unlock()
	select {
	case <-ch:
	case <-s.stop:
	}
}

func (s *fakeServer) answer(req msg) string {
	f := req.fields
	one := func(cmd string, rcFirst bool, kv ...string) string {
		if s.style == "slurm" && rcFirst {
			kv = append([]string{"rc", "0"}, kv...)
		}
		return format1(cmd, kv...)
	}
	if s.style == "v2" && req.cmd != "init" {
		switch req.cmd {
		case "fullinit":
			return format2("fullinit-response", "rc", "0", "pmi-version", "2", "pmi-subversion", "0", "rank", f["pmirank"], "size", fmt.Sprint(s.size), "appnum", "-1")
		case "kvs-put":
			s.mu.Lock()
			s.pending[f["key"]] = f["value"]
			s.mu.Unlock()
			return format2("kvs-put-response", "rc", "0")
		case "kvs-fence": // serve waits for the barrier
			return format2("kvs-fence-response", "rc", "0")
		case "kvs-get":
			s.mu.Lock()
			v, ok := s.kv[f["key"]]
			s.mu.Unlock()
			if !ok {
				return format2("kvs-get-response", "rc", "0", "found", "FALSE")
			}
			return format2("kvs-get-response", "rc", "0", "found", "TRUE", "value", v)
		case "abort":
			s.mu.Lock()
			s.aborts = append(s.aborts, req.String())
			s.mu.Unlock()
			return ""
		case "finalize":
			s.mu.Lock()
			s.finalized++
			s.mu.Unlock()
			return format2("finalize-response", "rc", "0")
		}
		return format2(req.cmd+"-response", "rc", "-1", "errmsg", "unknown")
	}
	switch req.cmd {
	case "init":
		if f["pmi_version"] == "2" {
			return "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"
		}
		if s.style == "slurm" {
			return "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n"
		}
		return "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n"
	case "get_maxes":
		return one("maxes", true, "kvsname_max", "256", "keylen_max", "64", "vallen_max", fmt.Sprint(s.valMax))
	case "get_my_kvsname":
		return one("my_kvsname", true, "kvsname", "kvs_4242_0")
	case "put":
		if f["kvsname"] != "kvs_4242_0" {
			return format1("put_result", "rc", "-1", "msg", "kvs_"+f["kvsname"]+"_not_found")
		}
		s.mu.Lock()
		s.pending[f["key"]] = f["value"]
		s.mu.Unlock()
		if s.style == "slurm" {
			return format1("put_result", "rc", "0")
		}
		return format1("put_result", "rc", "0", "msg", "success")
	case "barrier_in": // serve waits for the barrier
		return one("barrier_out", true)
	case "get":
		s.mu.Lock()
		v, ok := s.kv[f["key"]]
		s.mu.Unlock()
		switch {
		case ok && s.style == "slurm":
			return format1("get_result", "rc", "0", "value", v)
		case ok:
			return format1("get_result", "rc", "0", "msg", "success", "value", v)
		case s.style == "slurm":
			return format1("get_result", "rc", "1")
		default:
			return format1("get_result", "rc", "-1", "msg", "key_"+f["key"]+"_not_found", "value", "unknown")
		}
	case "abort":
		s.mu.Lock()
		s.aborts = append(s.aborts, req.String())
		s.mu.Unlock()
		return ""
	case "finalize":
		s.mu.Lock()
		s.finalized++
		s.mu.Unlock()
		return one("finalize_ack", true)
	}
	return format1(req.cmd+"_result", "rc", "-1", "msg", "unknown_command")
}
