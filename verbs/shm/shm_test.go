//go:build linux

package shm

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// end is one side of a test connection.
type end struct {
	dev      *Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       *QP
	mr       verbs.MR // provider memory, 64 KiB
	umr      verbs.MR // registered Go memory, 64 KiB
	ubuf     []byte
}

func newEnd(t *testing.T, o Options) *end {
	t.Helper()
	if o.Token == nil {
		o.Token = testToken
	}
	d, err := Open(context.Background(), o)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	e := &end{dev: d}
	e.pd, err = d.AllocPD()
	require.NoError(t, err)
	e.scq, err = d.CreateCQ(64)
	require.NoError(t, err)
	e.rcq, err = d.CreateCQ(64)
	require.NoError(t, err)
	qp, err := e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
	require.NoError(t, err)
	e.qp = qp.(*QP)
	e.mr, err = e.pd.AllocMR(64<<10, allAccess)
	require.NoError(t, err)
	e.ubuf = make([]byte, 64<<10)
	e.umr, err = e.pd.RegMR(e.ubuf, allAccess)
	require.NoError(t, err)
	return e
}

func connectPair(t *testing.T, a, b *end) {
	t.Helper()
	var wg sync.WaitGroup
	var ea, eb error
	wg.Add(2)
	go func() { defer wg.Done(); ea = verbs.Connect(a.qp, b.qp.Address(), verbs.DefaultConnectOptions()) }()
	go func() { defer wg.Done(); eb = verbs.Connect(b.qp, a.qp.Address(), verbs.DefaultConnectOptions()) }()
	wg.Wait()
	require.NoError(t, ea)
	require.NoError(t, eb)
}

func waitWC(t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var wc [1]verbs.WC
	for cq.Poll(wc[:]) == 0 {
		require.NoError(t, cq.Wait(ctx), "waiting for a completion")
	}
	return wc[0]
}

func okWC(t *testing.T, cq verbs.CQ, id uint64) verbs.WC {
	t.Helper()
	wc := waitWC(t, cq)
	require.Equal(t, verbs.StatusSuccess, wc.Status, "completion %d: %v", wc.ID, wc.Status)
	require.Equal(t, id, wc.ID)
	return wc
}

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13) ^ seed
	}
	return b
}

// shmFiles lists the rdmago files in /dev/shm, to show that nothing is
// left behind there. (Other programs on a shared machine come and go there,
// Open MPI's vader segments for one, so only our prefix is compared; the
// provider never creates any file, so none may appear.)
func shmFiles(t *testing.T) []string {
	t.Helper()
	ents, err := os.ReadDir("/dev/shm")
	if err != nil {
		return nil
	}
	var n []string
	for _, e := range ents {
		if strings.Contains(strings.ToLower(e.Name()), "rdmago") {
			n = append(n, e.Name())
		}
	}
	sort.Strings(n)
	return n
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	return len(ents)
}

// TestUserMemoryAcrossProcesses moves data into and out of another
// process's registered Go memory, by cross-memory attach (what auto picks
// when the kernel permits) and by the copy path: RDMA READ and WRITE from
// here, and a SEND echoed by the child from its Go memory into ours.
func TestUserMemoryAcrossProcesses(t *testing.T) {
	for _, policy := range []UserMemPath{UserMemAuto, UserMemCopy} {
		t.Run(policy.String(), func(t *testing.T) {
			before := shmFiles(t)
			e := newEnd(t, Options{UserMem: policy})
			env := []string{}
			if policy == UserMemCopy {
				env = append(env, "RDMAGO_SHM_USERMEM=copy")
			}
			c := startChild(t, "peer", env, nil, "")
			f := c.expect("ADDR")
			peerAddr, err := hex.DecodeString(f[1])
			require.NoError(t, err)
			uaddr, ukey := atoi(t, f[2]), uint32(atoi(t, f[3]))
			c.send("PEER %s", hex.EncodeToString(e.qp.Address()))
			require.NoError(t, verbs.Connect(e.qp, peerAddr, verbs.DefaultConnectOptions()))
			childPath := c.expect("READY")[1]
			ours := e.qp.UserMemPath()
			if policy == UserMemCopy {
				require.Equal(t, UserMemCopy, ours)
				require.Equal(t, "copy", childPath)
			} else {
				require.Contains(t, []UserMemPath{UserMemCMA, UserMemCopy}, ours)
				t.Logf("auto picked %v here and %s in the child", ours, childPath)
			}

			// READ the child's pattern out of its Go memory.
			require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{verbs.SGEOf(e.umr, 0, 4096)}, RemoteAddr: uaddr, RKey: ukey}))
			okWC(t, e.scq, 1)
			for i := 0; i < 4096; i++ {
				if e.ubuf[i] != byte(i*7+3) {
					t.Fatalf("byte %d read from the child's Go memory is %#x, want %#x", i, e.ubuf[i], byte(i*7+3))
				}
			}
			// WRITE into it (two SGEs, provider and Go memory), READ it back.
			src := pattern(3000, 0x5a)
			copy(e.mr.Bytes(), src[:1000])
			copy(e.ubuf[10000:], src[1000:])
			require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpRDMAWrite,
				SGL:        []verbs.SGE{verbs.SGEOf(e.mr, 0, 1000), verbs.SGEOf(e.umr, 10000, 2000)},
				RemoteAddr: uaddr + 8192, RKey: ukey},
				verbs.SendWR{ID: 3, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{verbs.SGEOf(e.mr, 20000, 3000)}, RemoteAddr: uaddr + 8192, RKey: ukey}))
			okWC(t, e.scq, 3)
			require.Equal(t, src, e.mr.Bytes()[20000:23000], "data written to the child's Go memory and read back")

			// SEND into the child's Go memory; it echoes it into ours.
			require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 9, SGL: []verbs.SGE{verbs.SGEOf(e.umr, 40000, 20000)}}))
			msg := pattern(5000, 0x33)
			copy(e.ubuf[30000:], msg)
			require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 4, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{verbs.SGEOf(e.umr, 30000, 5000)}}))
			okWC(t, e.scq, 4)
			wc := okWC(t, e.rcq, 9)
			require.EqualValues(t, 5000, wc.ByteLen)
			require.Equal(t, msg, e.ubuf[40000:45000], "the child's echo, written into our Go memory")
			c.expect("ECHOED")
			c.send("EXIT")
			require.NoError(t, c.wait(10*time.Second), "child exit")
			require.Equal(t, before, shmFiles(t), "/dev/shm changed")
		})
	}
}

// TestPeerKilled: a peer process killed with SIGKILL is noticed through
// its socket; our work fails with RETRY_EXC_ERR, later work too (then
// flushes), receives flush, and the QP ends in ERR. Nothing is left in
// /dev/shm.
func TestPeerKilled(t *testing.T) {
	before := shmFiles(t)
	e := newEnd(t, Options{})
	c := startChild(t, "peer", nil, nil, "")
	f := c.expect("ADDR")
	peerAddr, _ := hex.DecodeString(f[1])
	c.send("PEER %s", hex.EncodeToString(e.qp.Address()))
	require.NoError(t, verbs.Connect(e.qp, peerAddr, verbs.DefaultConnectOptions()))
	c.expect("READY")
	require.NoError(t, e.qp.PostRecv(verbs.RecvWR{ID: 70}))
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	c.wait(10 * time.Second)
	// A WRITE into memory we have mapped would still "work"; the link's end
	// of file is what must stop it.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for e.qp.State() != verbs.QPErr {
		select {
		case <-ctx.Done():
			t.Fatal("QP did not notice the dead peer within 10 s")
		case <-time.After(time.Millisecond):
		}
	}
	require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 71, Opcode: verbs.OpSend}))
	require.NoError(t, e.qp.PostSend(verbs.SendWR{ID: 72, Opcode: verbs.OpSend}))
	wc := waitWC(t, e.scq)
	require.Equal(t, uint64(71), wc.ID)
	require.Equal(t, verbs.StatusRetryExcErr, wc.Status)
	require.ErrorIs(t, wc.Err(), verbs.StatusRetryExcErr)
	wc = waitWC(t, e.scq)
	require.Equal(t, uint64(72), wc.ID)
	require.Equal(t, verbs.StatusWRFlushErr, wc.Status)
	wc = waitWC(t, e.rcq)
	require.Equal(t, uint64(70), wc.ID)
	require.Equal(t, verbs.StatusWRFlushErr, wc.Status)
	require.Equal(t, before, shmFiles(t), "/dev/shm changed")
}

// TestAuthentication: a device with another job token cannot connect (both
// sides check), and a process of another user is hung up on before it
// learns anything.
func TestAuthentication(t *testing.T) {
	t.Run("WrongToken", func(t *testing.T) {
		a := newEnd(t, Options{})
		b := newEnd(t, Options{DeviceOptions: verbs.DeviceOptions{Token: []byte("another job")}})
		err := verbs.Connect(b.qp, a.qp.Address(), verbs.DefaultConnectOptions())
		require.ErrorIs(t, err, verbs.ErrAuth)
		require.Equal(t, verbs.QPInit, b.qp.State(), "a failed Modify to RTR changes nothing")
		err = verbs.Connect(a.qp, b.qp.Address(), verbs.DefaultConnectOptions())
		require.ErrorIs(t, err, verbs.ErrAuth)
		// The refusing device still serves its own job.
		c := newEnd(t, Options{})
		connectPair(t, a, c)
		require.NoError(t, c.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(c.mr, 0, 8)}, RemoteAddr: a.mr.Addr(), RKey: a.mr.RKey()}))
		okWC(t, c.scq, 1)
	})
	t.Run("OtherUser", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root to run the child as another user")
		}
		a := newEnd(t, Options{})
		// Same user first: the server says hello, so the refusal below is the uid check.
		same := startChild(t, "rawdial", []string{"RDMAGO_SHM_SOCK=" + a.dev.sockName}, nil, "")
		require.Equal(t, "HELLO", same.expect("HELLO")[0])
		// The test binary must be executable by nobody.
		exe, err := os.Executable()
		require.NoError(t, err)
		dir, err := os.MkdirTemp("", "shmtest")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		require.NoError(t, os.Chmod(dir, 0o755))
		bin := dir + "/shm.test"
		data, err := os.ReadFile(exe)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(bin, data, 0o755))
		other := startChild(t, "rawdial", []string{"RDMAGO_SHM_SOCK=" + a.dev.sockName},
			&syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}, bin)
		require.Equal(t, "REFUSED", other.expect("REFUSED")[0])
	})
}

// TestSameHost: the identity is boot id plus network namespace; another
// identity is refused with ErrNotSameHost, whether set by Options.HostID or
// real (a child in its own network namespace).
func TestSameHost(t *testing.T) {
	h, err := HostID()
	require.NoError(t, err)
	require.Contains(t, h, "netns:")
	a := newEnd(t, Options{})
	got, err := AddressHostID(a.qp.Address())
	require.NoError(t, err)
	require.Equal(t, h, got)
	t.Run("Override", func(t *testing.T) {
		b := newEnd(t, Options{HostID: "pretend-host-b"})
		require.Equal(t, "pretend-host-b", b.dev.HostID())
		err := verbs.Connect(b.qp, a.qp.Address(), verbs.DefaultConnectOptions())
		require.ErrorIs(t, err, ErrNotSameHost)
		require.ErrorIs(t, err, verbs.ErrInvalidArgument)
		require.Equal(t, verbs.QPInit, b.qp.State())
	})
	t.Run("NetworkNamespace", func(t *testing.T) {
		if os.Getuid() != 0 {
			t.Skip("needs root for a network namespace")
		}
		c := startChild(t, "hostid", nil, &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}, "")
		f := c.expect("HOST")
		other, _ := hex.DecodeString(f[1])
		addr, _ := hex.DecodeString(f[2])
		require.NotEqual(t, h, string(other), "a child in a new network namespace has another host id")
		require.Equal(t, strings.Split(h, "/")[0], strings.Split(string(other), "/")[0], "same kernel boot id")
		ah, err := AddressHostID(addr)
		require.NoError(t, err)
		require.Equal(t, string(other), ah)
		err = verbs.Connect(a.qp, addr, verbs.DefaultConnectOptions())
		require.ErrorIs(t, err, ErrNotSameHost)
		c.send("EXIT")
	})
}

// TestIdleWaitUsesNoCPU: a rank blocked in CQ.Wait for a second costs
// (almost) no CPU: it spins for microseconds, then sleeps on the futex.
func TestIdleWaitUsesNoCPU(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	connectPair(t, a, b)
	require.NoError(t, a.qp.PostRecv(verbs.RecvWR{ID: 1}))
	cpu := func() time.Duration {
		var ru unix.Rusage
		require.NoError(t, unix.Getrusage(unix.RUSAGE_SELF, &ru))
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	runtime.GC()
	start, c0 := time.Now(), cpu()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	err := a.rcq.Wait(ctx)
	wall, used := time.Since(start), cpu()-c0
	require.ErrorIs(t, err, context.DeadlineExceeded)
	t.Logf("idle wait: %v wall, %v CPU", wall, used)
	// Loose: a spinning waiter would use about a full second.
	require.Less(t, used, 250*time.Millisecond, "CPU time of an idle second")
	// And it still wakes when something arrives.
	go func() {
		awaitAsleep(a.rcq) // okWC's Wait sleeps (or it finds the completion regardless)
		b.qp.PostSend(verbs.SendWR{ID: 2, Opcode: verbs.OpSend})
	}()
	okWC(t, a.rcq, 1)
}

// TestWaitCancelAndClose: Wait returns ctx's error when it ends, and
// ErrClosed when the CQ is closed under it.
func TestWaitCancelAndClose(t *testing.T) {
	e := newEnd(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.rcq.Wait(ctx) }()
	require.True(t, awaitAsleep(e.rcq), "Wait never went to sleep")
	cancel()
	require.ErrorIs(t, within(t, errc, "Wait ignored cancellation"), context.Canceled)
	cq, err := e.dev.CreateCQ(4)
	require.NoError(t, err)
	go func() { errc <- cq.Wait(context.Background()) }()
	require.True(t, awaitAsleep(cq), "Wait never went to sleep")
	require.NoError(t, cq.Close())
	require.ErrorIs(t, within(t, errc, "Close did not wake Wait"), verbs.ErrClosed)
}

// TestUserMemPathsInProcess forces each path between two devices of one
// process: direct (auto), cross-memory attach to our own pid, and the copy
// path through the owner's device.
func TestUserMemPathsInProcess(t *testing.T) {
	for _, tc := range []struct {
		policy UserMemPath
		want   UserMemPath
	}{{UserMemAuto, UserMemDirect}, {UserMemCMA, UserMemCMA}, {UserMemCopy, UserMemCopy}} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			a, b := newEnd(t, Options{UserMem: tc.policy}), newEnd(t, Options{UserMem: tc.policy})
			connectPair(t, a, b)
			require.Equal(t, tc.want, a.qp.UserMemPath())
			src := pattern(40000, 7)
			copy(a.ubuf, src)
			// 40000 bytes > the copy path's chunk? No: chunks are 1 MiB; use
			// a large one below as well.
			require.NoError(t, a.qp.PostSend(
				verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, SGL: []verbs.SGE{verbs.SGEOf(a.umr, 0, 40000)}, RemoteAddr: b.umr.Addr() + 100, RKey: b.umr.RKey()},
				verbs.SendWR{ID: 2, Opcode: verbs.OpRDMARead, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 40000)}, RemoteAddr: b.umr.Addr() + 100, RKey: b.umr.RKey()}))
			okWC(t, a.scq, 2)
			require.Equal(t, src, a.mr.Bytes()[:40000])
			require.Equal(t, src, b.ubuf[100:40100])
			// Out of range on registered memory is still REM_ACCESS_ERR.
			require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 3, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{verbs.SGEOf(a.umr, 0, 64)}, RemoteAddr: b.umr.Addr() + 64<<10 - 8, RKey: b.umr.RKey()}))
			wc := waitWC(t, a.scq)
			require.Equal(t, verbs.StatusRemAccessErr, wc.Status)
		})
	}
	t.Run("copy/large", func(t *testing.T) {
		a, b := newEnd(t, Options{UserMem: UserMemCopy}), newEnd(t, Options{UserMem: UserMemCopy})
		connectPair(t, a, b)
		big := pattern(3<<20+5, 9)
		bm, err := b.pd.RegMR(make([]byte, len(big)), allAccess)
		require.NoError(t, err)
		am, err := a.pd.RegMR(big, allAccess)
		require.NoError(t, err)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(am, 0, len(big))}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
		okWC(t, a.scq, 1)
		require.True(t, bytes.Equal(big, bm.Bytes()), "3 MiB through the copy path")
	})
}

// TestGoroutineRanks runs ranks as goroutines of one process (the
// in-process harness's use): a ring where each rank SENDs from its Go
// memory to the next and WRITE_WITH_IMMs into the next's Go memory.
func TestGoroutineRanks(t *testing.T) {
	const n, rounds = 5, 30
	type rank struct {
		dev    *Device
		pd     verbs.PD
		cq     verbs.CQ
		next   *QP // to rank+1
		prev   *QP // from rank-1
		buf    []byte
		mr     verbs.MR
		nextMR verbs.MR
	}
	ranks := make([]*rank, n)
	for i := range ranks {
		d, err := Open(context.Background(), Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
		require.NoError(t, err)
		t.Cleanup(func() { d.Close() })
		r := &rank{dev: d, buf: make([]byte, 8192)}
		r.pd, _ = d.AllocPD()
		r.cq, _ = d.CreateCQ(256)
		mk := func() *QP {
			qp, err := r.pd.CreateQP(verbs.QPInitAttr{SendCQ: r.cq, RecvCQ: r.cq, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
			require.NoError(t, err)
			return qp.(*QP)
		}
		r.next, r.prev = mk(), mk()
		r.mr, err = r.pd.RegMR(r.buf, allAccess)
		require.NoError(t, err)
		ranks[i] = r
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i, r := range ranks {
		nx := ranks[(i+1)%n]
		r.nextMR = nx.mr
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs <- verbs.Connect(r.next, nx.prev.Address(), verbs.DefaultConnectOptions())
		}()
		go func() {
			defer wg.Done()
			errs <- verbs.Connect(nx.prev, r.next.Address(), verbs.DefaultConnectOptions())
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, UserMemDirect, ranks[0].next.UserMemPath())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fails := make(chan error, n)
	for i, r := range ranks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fails <- func() error {
				var wc [4]verbs.WC
				for round := 0; round < rounds; round++ {
					want := byte(i + round)
					// Receive from prev into buf[0:1024]; prev's WRITE_WITH_IMM lands at buf[4096:].
					if err := r.prev.PostRecv(verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(r.mr, 0, 1024)}}, verbs.RecvWR{ID: 2}); err != nil {
						return err
					}
					for j := 2048; j < 3072; j++ {
						r.buf[j] = want
					}
					if err := r.next.PostSend(
						verbs.SendWR{ID: 3, Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(r.mr, 2048, 1024)}},
						verbs.SendWR{ID: 4, Opcode: verbs.OpRDMAWriteWithImm, Flags: verbs.SendSignaled, Imm: uint32(round),
							SGL: []verbs.SGE{verbs.SGEOf(r.mr, 2048, 512)}, RemoteAddr: r.nextMR.Addr() + 4096, RKey: r.nextMR.RKey()}); err != nil {
						return err
					}
					got := 0
					for got < 3 {
						k := r.cq.Poll(wc[:])
						for _, w := range wc[:k] {
							if w.Status != verbs.StatusSuccess {
								return w.Err()
							}
							if w.Opcode == verbs.WCRecvRDMAWithImm && w.Imm != uint32(round) {
								return fmt.Errorf("rank %d round %d: imm %d", i, round, w.Imm)
							}
						}
						got += k
						if k == 0 {
							if err := r.cq.Wait(ctx); err != nil {
								return fmt.Errorf("rank %d round %d: %w", i, round, err)
							}
						}
					}
					from := byte((i+n-1)%n + round)
					for j := 0; j < 1024; j++ {
						if r.buf[j] != from {
							return fmt.Errorf("rank %d round %d: received byte %d = %d, want %d", i, round, j, r.buf[j], from)
						}
					}
					for j := 4096; j < 4096+512; j++ {
						if r.buf[j] != from {
							return fmt.Errorf("rank %d round %d: written byte %d = %d, want %d", i, round, j, r.buf[j], from)
						}
					}
					// Everybody must finish reading before the next round overwrites.
					if err := ringBarrier(ctx, r.next, r.prev, r.cq, n); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	wg.Wait()
	close(fails)
	for err := range fails {
		require.NoError(t, err)
	}
}

// ringBarrier: n-1 zero-length SENDs around the ring, each sent after the
// previous one arrived, so the last arrival proves every rank has entered.
// Every rank sends exactly n-1 per round and the receives are consumed in
// order, so barrier messages never take a data round's receives.
func ringBarrier(ctx context.Context, next, prev *QP, cq verbs.CQ, n int) error {
	for pass := 0; pass < n-1; pass++ {
		if err := prev.PostRecv(verbs.RecvWR{ID: 100}); err != nil {
			return err
		}
	}
	var wc [4]verbs.WC
	for pass := 0; pass < n-1; pass++ {
		if err := next.PostSend(verbs.SendWR{ID: 101, Opcode: verbs.OpSend}); err != nil {
			return err
		}
		for {
			k := cq.Poll(wc[:1])
			if k == 1 {
				if wc[0].Status != verbs.StatusSuccess {
					return wc[0].Err()
				}
				if wc[0].ID == 100 {
					break
				}
				continue
			}
			if err := cq.Wait(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// TestNoLeftovers: devices opened, connected and closed leave no file,
// descriptor, mapping or goroutine behind.
func TestNoLeftovers(t *testing.T) {
	shm0, fds0, g0 := shmFiles(t), openFDs(t), runtime.NumGoroutine()
	maps0 := countMaps(t)
	for i := 0; i < 3; i++ {
		ctx := context.Background()
		a, err := Open(ctx, Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
		require.NoError(t, err)
		b, err := Open(ctx, Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
		require.NoError(t, err)
		ea, eb := &end{dev: a}, &end{dev: b}
		for _, e := range []*end{ea, eb} {
			e.pd, _ = e.dev.AllocPD()
			e.scq, _ = e.dev.CreateCQ(8)
			qp, err := e.pd.CreateQP(verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.scq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4}})
			require.NoError(t, err)
			e.qp = qp.(*QP)
			e.mr, _ = e.pd.AllocMR(1<<20, allAccess)
		}
		connectPair(t, ea, eb)
		require.NoError(t, ea.qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(ea.mr, 0, 1<<20)}, RemoteAddr: eb.mr.Addr(), RKey: eb.mr.RKey()}))
		okWC(t, ea.scq, 1)
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		require.ErrorIs(t, a.Close(), verbs.ErrClosed)
	}
	require.Equal(t, shm0, shmFiles(t), "/dev/shm")
	require.Equal(t, fds0, openFDs(t), "open descriptors")
	require.Equal(t, maps0, countMaps(t), "memfd mappings")
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > g0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), g0, "goroutines")
}

// countMaps counts this process's mappings of rdmago memfds.
func countMaps(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return strings.Count(string(b), "memfd:rdmago-shm")
}

// TestBadAddress: malformed and foreign addresses fail Modify cleanly.
func TestBadAddress(t *testing.T) {
	e := newEnd(t, Options{})
	good := e.qp.Address()
	for name, addr := range map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)-3],
		"tcp":       mustEncode(t, verbs.QPAddress{Provider: "tcp", QPNum: 1, Payload: []byte{1, 2}}),
		"payload":   mustEncode(t, verbs.QPAddress{Provider: "shm", QPNum: 1, Payload: []byte{1, 200, 3}}),
	} {
		err := verbs.Connect(e.qp, addr, verbs.DefaultConnectOptions())
		require.ErrorIs(t, err, verbs.ErrInvalidArgument, name)
		var ve *verbs.Error
		require.True(t, errors.As(err, &ve), name)
	}
	require.Equal(t, verbs.QPInit, e.qp.State())
}

func mustEncode(t *testing.T, a verbs.QPAddress) []byte {
	b, err := a.Encode()
	require.NoError(t, err)
	return b
}

// TestResetReconnect: after ERR→RESET a queue pair is reconnected and used
// again; its receive ring starts clean (no completion from before the reset
// is mistaken for a new one).
func TestResetReconnect(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	connectPair(t, a, b)
	for i := uint64(1); i <= 3; i++ {
		require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: i}))
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: i, Opcode: verbs.OpSend}))
		okWC(t, b.rcq, i)
	}
	for _, e := range []*end{a, b} {
		require.NoError(t, e.qp.Modify(&verbs.QPAttr{State: verbs.QPErr}, verbs.AttrState))
		require.NoError(t, e.qp.Modify(&verbs.QPAttr{State: verbs.QPReset}, verbs.AttrState))
	}
	var wc [4]verbs.WC
	for _, e := range []*end{a, b} {
		for e.rcq.Poll(wc[:]) > 0 || e.scq.Poll(wc[:]) > 0 {
		}
	}
	connectPair(t, a, b)
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 10}))
	require.Zero(t, b.rcq.Poll(wc[:]), "a receive completed before anything was sent: %+v", wc[0])
	copy(a.mr.Bytes(), "after reset")
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 11, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 64)}}))
	require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: 20, Opcode: verbs.OpSend},
		verbs.SendWR{ID: 21, Opcode: verbs.OpSend, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, 11)}}))
	okWC(t, b.rcq, 10)
	w := okWC(t, b.rcq, 11)
	require.EqualValues(t, 11, w.ByteLen)
	require.Equal(t, "after reset", string(b.mr.Bytes()[:11]))
	okWC(t, a.scq, 21)
}

// TestCloseWithStalledClient: a client that dials and then says nothing
// does not hold up Device.Close (the handshake deadline is 10 s).
func TestCloseWithStalledClient(t *testing.T) {
	d, err := Open(context.Background(), Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
	require.NoError(t, err)
	c, err := net.Dial("unix", "@"+d.sockName)
	require.NoError(t, err)
	defer c.Close()
	var hello [64]byte
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err = c.Read(hello[:])
	require.NoError(t, err, "the server greets first")
	done := make(chan error, 1)
	go func() { done <- d.Close() }()
	require.NoError(t, within(t, done, "Device.Close waited for a stalled handshake"))
}

// TestPostRecvBatchStopsAtBadOne: a PostRecv batch whose third receive
// names no memory region posts the two before it (they take the next two
// SENDs, in order) and reports the bad one, which takes nothing: the
// batch is published with one store of the head, so the error path must
// publish what went before it.
func TestPostRecvBatchStopsAtBadOne(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	connectPair(t, a, b)
	err := b.qp.PostRecv(
		verbs.RecvWR{ID: 1, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 0, 256)}},
		verbs.RecvWR{ID: 2, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 256, 256)}},
		verbs.RecvWR{ID: 3, SGL: []verbs.SGE{{Addr: 0, Length: 8, LKey: 0xdead}}})
	require.ErrorIs(t, err, verbs.ErrBadKey)
	require.ErrorContains(t, err, "0xdead")
	send := func(id uint64, data []byte) {
		copy(a.mr.Bytes()[:len(data)], data)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: id, Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, len(data))}}))
		okWC(t, a.scq, id)
	}
	one, two, three := pattern(200, 1), pattern(100, 2), pattern(50, 3)
	send(11, one)
	send(12, two)
	require.Equal(t, 200, int(okWC(t, b.rcq, 1).ByteLen))
	require.Equal(t, one, b.mr.Bytes()[:200])
	require.Equal(t, 100, int(okWC(t, b.rcq, 2).ByteLen))
	require.Equal(t, two, b.mr.Bytes()[256:356])
	// Nothing else was posted: the next SEND takes the next receive posted.
	require.NoError(t, b.qp.PostRecv(verbs.RecvWR{ID: 4, SGL: []verbs.SGE{verbs.SGEOf(b.mr, 1024, 256)}}))
	send(13, three)
	require.Equal(t, 50, int(okWC(t, b.rcq, 4).ByteLen))
	require.Equal(t, three, b.mr.Bytes()[1024:1074])
}

// TestRepostedDescriptorNotRewritten: receives reposted in the order they
// complete, whose number divides the receive queue's depth, find their
// descriptors in place after the first trip round the ring, and PostRecv
// leaves those lines alone; a receive that differs (another buffer) is
// written, and its SEND lands in the new buffer.
func TestRepostedDescriptorNotRewritten(t *testing.T) {
	a, b := newEnd(t, Options{}), newEnd(t, Options{})
	connectPair(t, a, b)
	const slots, depth = 8, 16 // newEnd's MaxRecvWR
	wr := func(slot int, off int) verbs.RecvWR {
		return verbs.RecvWR{ID: uint64(100 + slot), SGL: []verbs.SGE{verbs.SGEOf(b.mr, off, 256)}}
	}
	for s := range slots {
		require.NoError(t, b.qp.PostRecv(wr(s, s*256)))
	}
	send := func(k int, off int) {
		data := pattern(64+k, byte(k))
		copy(a.mr.Bytes(), data)
		require.NoError(t, a.qp.PostSend(verbs.SendWR{ID: uint64(k), Opcode: verbs.OpSend, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{verbs.SGEOf(a.mr, 0, len(data))}}))
		okWC(t, a.scq, uint64(k))
		wc := okWC(t, b.rcq, uint64(100+k%slots))
		require.Equal(t, len(data), int(wc.ByteLen))
		require.Equal(t, data, b.mr.Bytes()[off:off+len(data)], "message %d", k)
	}
	const msgs = 5 * depth
	for k := range msgs {
		send(k, k%slots*256)
		require.NoError(t, b.qp.PostRecv(wr(k%slots, k%slots*256)))
	}
	b.qp.recvMu.Lock()
	writes := b.qp.descWrites
	b.qp.recvMu.Unlock()
	require.Equal(t, uint64(depth), writes, "descriptors written for %d receives", slots+msgs)

	// The next receive to complete is slot msgs%slots; repost it with
	// another buffer before its SEND comes.
	k := msgs
	s := k % slots
	for i := range slots { // complete the receives ahead of it in the ring
		send(k+i, (k+i)%slots*256)
		if (k+i)%slots != s {
			require.NoError(t, b.qp.PostRecv(wr((k+i)%slots, (k+i)%slots*256)))
		} else {
			require.NoError(t, b.qp.PostRecv(wr(s, 8192)))
		}
	}
	send(k+slots, 8192)
	b.qp.recvMu.Lock()
	require.Equal(t, uint64(depth+1), b.qp.descWrites, "the changed receive was written, the others were not")
	b.qp.recvMu.Unlock()
}
