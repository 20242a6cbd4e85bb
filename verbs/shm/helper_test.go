//go:build linux

package shm

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// The cross-process tests re-execute this test binary with
// RDMAGO_SHM_CHILD naming what the child does (TestHelperProcess), and
// talk to it over its stdin and stdout, one line at a time.
const childEnv = "RDMAGO_SHM_CHILD"

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

var testToken = []byte("shm-test-token")

// child is a running helper process.
type child struct {
	t     testing.TB
	cmd   *exec.Cmd
	in    io.WriteCloser
	out   *bufio.Scanner
	exit  error
	ended chan struct{}
}

// wait returns the child's exit status once it has ended, or fails after d.
func (c *child) wait(d time.Duration) error {
	c.t.Helper()
	select {
	case <-c.ended:
		return c.exit
	case <-time.After(d):
		c.t.Fatalf("child did not exit within %v", d)
	}
	return nil
}

// within returns the error that arrives on errc, or fails the test with
// msg when none does within 5 s.
func within(t *testing.T, errc <-chan error, msg string) error {
	t.Helper()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatal(msg)
		return nil
	}
}

func startChild(t testing.TB, mode string, env []string, attr *syscall.SysProcAttr, bin string) *child {
	t.Helper()
	if bin == "" {
		var err error
		bin, err = os.Executable()
		require.NoError(t, err)
	}
	cmd := exec.Command(bin, "-test.run=^TestHelperProcess$", "-test.v=false")
	cmd.Env = append(append(os.Environ(), childEnv+"="+mode), env...)
	cmd.Stderr = os.Stderr
	if attr == nil {
		attr = &syscall.SysProcAttr{}
	}
	attr.Pdeathsig = syscall.SIGKILL
	cmd.SysProcAttr = attr
	return runChildCmd(t, cmd)
}

// runChildCmd starts cmd with line-based stdin and stdout.
func runChildCmd(t testing.TB, cmd *exec.Cmd) *child {
	t.Helper()
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	outp, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	c := &child{t: t, cmd: cmd, in: in, out: bufio.NewScanner(outp), ended: make(chan struct{})}
	c.out.Buffer(make([]byte, 64<<10), 64<<10)
	go func() { c.exit = cmd.Wait(); close(c.ended) }()
	t.Cleanup(func() {
		in.Close()
		select {
		case <-c.ended:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-c.ended
		}
	})
	return c
}

// expect reads the child's next line, which must start with word.
func (c *child) expect(word string) []string {
	c.t.Helper()
	lines := make(chan []string, 1)
	go func() {
		for c.out.Scan() {
			f := strings.Fields(c.out.Text())
			if len(f) > 0 && f[0] == word {
				lines <- f
				return
			}
		}
		lines <- nil
	}()
	select {
	case f := <-lines:
		require.NotNil(c.t, f, "child exited before printing %s", word)
		return f
	case <-time.After(20 * time.Second):
		c.t.Fatalf("child did not print %s within 20 s", word)
	}
	return nil
}

func (c *child) send(format string, args ...any) {
	c.t.Helper()
	_, err := fmt.Fprintf(c.in, format+"\n", args...)
	require.NoError(c.t, err)
}

// TestHelperProcess is the child's entry point; it does nothing in a
// normal test run.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(childEnv)
	if mode == "" {
		t.Skip("helper process for the cross-process tests")
	}
	err := runChild(mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shm helper:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runChild(mode string) error {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 64<<10), 64<<10)
	readLine := func() ([]string, error) {
		if !in.Scan() {
			return nil, io.EOF
		}
		return strings.Fields(in.Text()), nil
	}
	switch mode {
	case "rawdial":
		// Dial a device's socket as whoever we run as, and report whether
		// the server said hello or hung up.
		c, err := net.Dial("unix", "@"+os.Getenv("RDMAGO_SHM_SOCK"))
		if err != nil {
			fmt.Println("DIALFAIL", err)
			return nil
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		var b [1]byte
		if _, err := c.Read(b[:]); err != nil {
			fmt.Println("REFUSED")
		} else {
			fmt.Println("HELLO")
		}
		return nil
	case "peer":
		policy := UserMemAuto
		if os.Getenv("RDMAGO_SHM_USERMEM") == "copy" {
			policy = UserMemCopy
		}
		ctx := context.Background()
		d, err := Open(ctx, Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}, UserMem: policy})
		if err != nil {
			return err
		}
		defer d.Close()
		pd, _ := d.AllocPD()
		scq, _ := d.CreateCQ(64)
		rcq, _ := d.CreateCQ(64)
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: scq, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2}})
		if err != nil {
			return err
		}
		user := make([]byte, 64<<10)
		for i := range user {
			user[i] = byte(i*7 + 3)
		}
		umr, err := pd.RegMR(user, allAccess)
		if err != nil {
			return err
		}
		if err := qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: allAccess},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
			return err
		}
		// The receive lands in the second half of the user region.
		if err := qp.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(umr, 32<<10, 32<<10)}}); err != nil {
			return err
		}
		fmt.Printf("ADDR %s %d %d %d\n", hex.EncodeToString(qp.Address()), umr.Addr(), umr.RKey(), os.Getpid())
		f, err := readLine()
		if err != nil || len(f) != 2 || f[0] != "PEER" {
			return fmt.Errorf("expected PEER line, got %v (%v)", f, err)
		}
		peer, err := hex.DecodeString(f[1])
		if err != nil {
			return err
		}
		if err := verbs.Connect(qp, peer, verbs.DefaultConnectOptions()); err != nil {
			return err
		}
		fmt.Printf("READY %v\n", qp.(*QP).UserMemPath())
		// Echo: the SEND the parent makes comes back, from our Go memory.
		wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		var wc [1]verbs.WC
		for rcq.Poll(wc[:]) == 0 {
			if err := rcq.Wait(wctx); err != nil {
				return err
			}
		}
		if wc[0].Status != verbs.StatusSuccess {
			return wc[0].Err()
		}
		if err := qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(umr, 32<<10, int(wc[0].ByteLen))}}); err != nil {
			return err
		}
		for scq.Poll(wc[:]) == 0 {
			if err := scq.Wait(wctx); err != nil {
				return err
			}
		}
		if wc[0].Status != verbs.StatusSuccess {
			return wc[0].Err()
		}
		fmt.Println("ECHOED")
		readLine() // until the parent says so (or closes stdin)
		umr.Close()
		return nil
	case "ring":
		return runRingChild(readLine)
	case "pingpong", "pingsend":
		return runPingChild(readLine, mode == "pingsend")
	case "flag":
		return runFlagChild()
	case "hostid":
		h, err := HostID()
		if err != nil {
			return err
		}
		d, err := Open(context.Background(), Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
		if err != nil {
			return err
		}
		defer d.Close()
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(4)
		qp, err := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1}})
		if err != nil {
			return err
		}
		fmt.Printf("HOST %s %s\n", hex.EncodeToString([]byte(h)), hex.EncodeToString(qp.Address()))
		readLine()
		return nil
	}
	return fmt.Errorf("unknown helper mode %q", mode)
}

func atoi(t *testing.T, s string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(s, 10, 64)
	require.NoError(t, err)
	return v
}
