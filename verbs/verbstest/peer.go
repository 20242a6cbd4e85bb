package verbstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rdmago/rdmago/internal/testbin"
	"github.com/rdmago/rdmago/verbs"
)

// The two-process protocol: the parent writes one JSON peerReq per line to
// the child's file descriptor 3 and reads one peerResp per line from its
// descriptor 4 ("waitRecv" answers twice: armed, then the completion). The
// peer owns one device, PD, send and receive CQ, QP and a 1 MiB MR with
// every access right.

type peerReq struct {
	Op      string
	Remote  []byte               `json:",omitempty"`
	Connect verbs.ConnectOptions `json:",omitempty"`
	ID      uint64               `json:",omitempty"`
	Off     int                  `json:",omitempty"`
	Len     int                  `json:",omitempty"`
	Seed    uint64               `json:",omitempty"`
	Imm     uint32               `json:",omitempty"`
	WithImm bool                 `json:",omitempty"`
}

type peerResp struct {
	Err     string   `json:",omitempty"`
	Addr    []byte   `json:",omitempty"` // QP address
	MRAddr  uint64   `json:",omitempty"`
	RKey    uint32   `json:",omitempty"`
	MRLen   int      `json:",omitempty"`
	Atomics bool     `json:",omitempty"`
	PID     int      `json:",omitempty"`
	Data    []byte   `json:",omitempty"`
	WC      verbs.WC `json:",omitempty"`
	Armed   bool     `json:",omitempty"`
}

const peerMRSize = 1 << 20

// runPeer is Run in the re-executed child: it serves the parent until told
// to exit or until the parent goes away.
func runPeer(t *testing.T, opts Options) {
	in, out := os.NewFile(3, "verbstest-requests"), os.NewFile(4, "verbstest-replies")
	if in == nil || out == nil {
		t.Fatalf("verbstest peer: %s is set but file descriptors 3 and 4 are missing", peerEnv)
	}
	defer in.Close()
	defer out.Close()
	p := &peer{opts: opts}
	defer p.close()
	dec, enc := json.NewDecoder(in), json.NewEncoder(out)
	for {
		var req peerReq
		if err := dec.Decode(&req); err != nil {
			if !errors.Is(err, io.EOF) {
				t.Logf("verbstest peer: reading a request: %v", err)
			}
			return
		}
		if req.Op == "exit" {
			_ = enc.Encode(peerResp{})
			return
		}
		resp, err := p.serve(req, enc)
		if err != nil {
			resp.Err = fmt.Sprintf("peer %s: %v", req.Op, err)
		}
		if err := enc.Encode(resp); err != nil {
			t.Logf("verbstest peer: writing a reply: %v", err)
			return
		}
	}
}

type peer struct {
	opts     Options
	dev      verbs.Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	mr       verbs.MR
}

func (p *peer) close() {
	for _, c := range []interface{ Close() error }{p.qp, p.mr, p.scq, p.rcq, p.pd, p.dev} {
		if c != nil {
			_ = c.Close()
		}
	}
}

func (p *peer) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), p.opts.CaseTimeout)
}

func (p *peer) serve(req peerReq, enc *json.Encoder) (peerResp, error) {
	ctx, cancel := p.ctx()
	defer cancel()
	if req.Op != "hello" && p.qp == nil {
		return peerResp{}, errors.New("no hello yet")
	}
	inRange := func() error {
		if req.Off < 0 || req.Len < 0 || req.Off+req.Len > peerMRSize {
			return fmt.Errorf("range [%d, %d) outside the %d-byte MR", req.Off, req.Off+req.Len, peerMRSize)
		}
		return nil
	}
	switch req.Op {
	case "hello":
		var err error
		if p.dev, err = p.opts.Open(ctx); err != nil {
			return peerResp{}, err
		}
		if p.pd, err = p.dev.AllocPD(); err != nil {
			return peerResp{}, err
		}
		if p.scq, err = p.dev.CreateCQ(64); err != nil {
			return peerResp{}, err
		}
		if p.rcq, err = p.dev.CreateCQ(64); err != nil {
			return peerResp{}, err
		}
		if p.mr, err = p.pd.AllocMR(peerMRSize, allAccess); err != nil {
			return peerResp{}, err
		}
		if p.qp, err = p.pd.CreateQP(verbs.QPInitAttr{SendCQ: p.scq, RecvCQ: p.rcq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
			return peerResp{}, err
		}
		return peerResp{Addr: p.qp.Address(), MRAddr: p.mr.Addr(), RKey: p.mr.RKey(), MRLen: p.mr.Len(),
			Atomics: p.mr.SupportsAtomics(), PID: os.Getpid()}, nil
	case "connect":
		return peerResp{}, verbs.Connect(p.qp, req.Remote, req.Connect)
	case "fill":
		if err := inRange(); err != nil {
			return peerResp{}, err
		}
		pattern(p.mr.Bytes()[req.Off:req.Off+req.Len], req.Seed)
		return peerResp{}, nil
	case "read":
		if err := inRange(); err != nil {
			return peerResp{}, err
		}
		return peerResp{Data: append([]byte(nil), p.mr.Bytes()[req.Off:req.Off+req.Len]...)}, nil
	case "postRecv":
		if err := inRange(); err != nil {
			return peerResp{}, err
		}
		return peerResp{}, p.qp.PostRecv(verbs.RecvWR{ID: req.ID, SGL: []verbs.SGE{verbs.SGEOf(p.mr, req.Off, req.Len)}})
	case "waitRecv":
		// Tell the parent we are about to block, then block.
		if err := enc.Encode(peerResp{Armed: true}); err != nil {
			return peerResp{}, err
		}
		wc, err := waitOne(ctx, p.rcq)
		return peerResp{WC: wc}, err
	case "send":
		if err := inRange(); err != nil {
			return peerResp{}, err
		}
		wr := verbs.SendWR{ID: req.ID, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(p.mr, req.Off, req.Len)}}
		if req.WithImm {
			wr.Opcode, wr.Imm = verbs.OpSendWithImm, req.Imm
		}
		if err := p.qp.PostSend(wr); err != nil {
			return peerResp{}, err
		}
		wc, err := waitOne(ctx, p.scq)
		return peerResp{WC: wc}, err
	}
	return peerResp{}, fmt.Errorf("unknown request %q", req.Op)
}

// waitOne returns the next completion of cq.
func waitOne(ctx context.Context, cq verbs.CQ) (verbs.WC, error) {
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		if err := cq.Wait(ctx); err != nil {
			return verbs.WC{}, err
		}
	}
	return wc[0], nil
}

// peerProc is the parent's handle on a peer process.
type peerProc struct {
	t      *testing.T
	cmd    *exec.Cmd
	enc    *json.Encoder
	dec    *json.Decoder
	toPeer *os.File
	output *testbin.Buffer
	reaped chan struct{}
	err    error // from cmd.Wait, valid once reaped is closed
	hello  peerResp
}

// peerRunPattern is a -test.run pattern selecting exactly the test named name.
func peerRunPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	return strings.Join(parts, "/")
}

// startPeer re-executes the test binary as a peer and says hello. The peer
// is told to exit, or killed and reaped, when t ends.
func (s *suite) startPeer(t *testing.T) *peerProc {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("finding the test binary: %v", err)
	}
	toPeerR, toPeerW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	fromPeerR, fromPeerW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &peerProc{t: t, output: &testbin.Buffer{}, reaped: make(chan struct{}), toPeer: toPeerW}
	p.cmd = exec.Command(exe, "-test.run="+peerRunPattern(s.root), "-test.count=1",
		fmt.Sprintf("-test.timeout=%v", 3*s.opts.CaseTimeout))
	p.cmd.Env = append(os.Environ(), peerEnv+"="+s.root)
	p.cmd.ExtraFiles = []*os.File{toPeerR, fromPeerW}
	p.cmd.Stdout, p.cmd.Stderr = p.output, p.output
	setPeerSysProcAttr(p.cmd)
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting the peer process %s: %v", exe, err)
	}
	toPeerR.Close()
	fromPeerW.Close()
	go func() {
		p.err = p.cmd.Wait()
		fromPeerR.Close()
		close(p.reaped)
	}()
	p.enc, p.dec = json.NewEncoder(toPeerW), json.NewDecoder(fromPeerR)
	t.Cleanup(p.stop)
	p.hello = p.call(s.ctx(t), peerReq{Op: "hello"})
	if p.hello.PID != p.cmd.Process.Pid {
		t.Fatalf("peer says it is pid %d, we started %d", p.hello.PID, p.cmd.Process.Pid)
	}
	return p
}

// stop asks the peer to exit and reaps it, killing it if it does not go.
func (p *peerProc) stop() {
	select {
	case <-p.reaped:
		return
	default:
	}
	_ = p.enc.Encode(peerReq{Op: "exit"})
	p.toPeer.Close()
	select {
	case <-p.reaped:
		if p.err != nil {
			p.t.Errorf("peer process %d exited with %v; its output:\n%s", p.cmd.Process.Pid, p.err, p.output)
		}
	case <-time.After(10 * time.Second):
		p.t.Errorf("peer process %d did not exit; killing it. Its output:\n%s", p.cmd.Process.Pid, p.output)
		p.kill()
	}
}

// kill sends SIGKILL to the peer we started (by PID) and reaps it.
func (p *peerProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.reaped
}

// call sends one request and reads one reply, bounded by ctx. A reply
// carrying an error fails the test.
func (p *peerProc) call(ctx context.Context, req peerReq) peerResp {
	p.t.Helper()
	if err := p.enc.Encode(req); err != nil {
		p.t.Fatalf("sending %q to the peer: %v; its output:\n%s", req.Op, err, p.output)
	}
	resp := p.reply(ctx, req.Op)
	if resp.Err != "" {
		p.t.Fatalf("%s", resp.Err)
	}
	return resp
}

// reply reads one reply, bounded by ctx; on timeout the peer is killed.
func (p *peerProc) reply(ctx context.Context, op string) peerResp {
	p.t.Helper()
	type result struct {
		resp peerResp
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		r.err = p.dec.Decode(&r.resp)
		ch <- r
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			p.t.Fatalf("reading the peer's reply to %q: %v; its output:\n%s", op, r.err, p.output)
		}
		return r.resp
	case <-ctx.Done():
		p.kill()
		p.t.Fatalf("the peer did not answer %q: %v; its output:\n%s", op, ctx.Err(), p.output)
	}
	return peerResp{}
}

// remote is the peer's MR as a region for RDMA requests.
func (p *peerProc) remote() region { return remoteMR{addr: p.hello.MRAddr, rkey: p.hello.RKey} }
