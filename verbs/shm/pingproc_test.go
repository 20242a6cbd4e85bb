//go:build linux

package shm

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/rdmago/rdmago/verbs"
)

// BenchmarkPingPongProcesses is BenchmarkPingPong between two processes
// (this one and a re-executed child): an 8-byte WRITE_WITH_IMM answered by
// one, both sides busy-polling, beside the bare flag ping-pong on a memfd
// both processes map. Half round trip, mean and median batch of 256.
func BenchmarkPingPongProcesses(b *testing.B) {
	b.Run("write-imm/bytes=8", func(b *testing.B) { benchPingProcesses(b, false) })
	// A SEND of 32 bytes (an 8-byte p2p eager message with its header)
	// into a posted receive buffer: the p2p layer's eager path.
	b.Run("send/bytes=32", func(b *testing.B) { benchPingProcesses(b, true) })
	b.Run("flag/bytes=8", func(b *testing.B) {
		fd, err := memfd("rdmago-shm-bench", 4096)
		require.NoError(b, err)
		mem, err := mapShared(fd, 4096)
		require.NoError(b, err)
		defer unmap(mem)
		f := os.NewFile(uintptr(fd), "flag")
		defer f.Close()
		ping, pong := word64(mem, 0), word64(mem, 64)
		c := startChildFiles(b, "flag", f)
		c.expect("READY")
		lat := make([]time.Duration, 0, 1<<14)
		b.ReportAllocs()
		b.ResetTimer()
		start, t0 := time.Now(), time.Now()
		var i uint64
		for b.Loop() {
			i++
			atomic.StoreUint64(ping, i)
			for atomic.LoadUint64(pong) < i {
			}
			if i%256 == 0 && len(lat) < cap(lat) {
				now := time.Now()
				lat = append(lat, now.Sub(t0))
				t0 = now
			}
		}
		el := time.Since(start)
		b.StopTimer()
		atomic.StoreUint64(ping, ^uint64(0))
		require.NoError(b, c.wait(10*time.Second))
		reportHalfRTT(b, el, int(i), lat)
	})
}

// benchPingProcesses is the ping-pong with a child process: WRITE_WITH_IMM
// of 8 bytes, or SEND of 32 bytes into posted buffers.
func benchPingProcesses(b *testing.B, send bool) {
	e := newBenchEnd(b, send)
	mode := "pingpong"
	if send {
		mode = "pingsend"
	}
	c := startChild(b, mode, nil, nil, "")
	f := c.expect("ADDR")
	peer, _ := hex.DecodeString(f[1])
	c.send("PEER %s %d %d", hex.EncodeToString(e.qp.Address()), e.mr.Addr(), e.mr.RKey())
	require.NoError(b, verbs.Connect(e.qp, peer, verbs.DefaultConnectOptions()))
	c.expect("READY")
	paddr, pkey := atoi64(b, f[2]), uint32(atoi64(b, f[3]))
	wrs, rwrs := pingWRs(e, send, paddr, pkey)
	var wc [1]verbs.WC
	lat := make([]time.Duration, 0, 1<<14)
	b.ReportAllocs()
	b.ResetTimer()
	start, t0 := time.Now(), time.Now()
	n := 0
	for b.Loop() {
		if err := e.qp.PostSend(wrs...); err != nil {
			b.Fatal(err)
		}
		for e.rcq.Poll(wc[:]) == 0 {
		}
		if wc[0].Status != verbs.StatusSuccess {
			b.Fatal(wc[0].Err())
		}
		if err := e.qp.PostRecv(rwrs...); err != nil {
			b.Fatal(err)
		}
		n++
		if n%256 == 0 && len(lat) < cap(lat) {
			now := time.Now()
			lat = append(lat, now.Sub(t0))
			t0 = now
		}
	}
	el := time.Since(start)
	b.StopTimer()
	wrs[0].Imm = ringStop
	wrs[0].Opcode = verbs.OpRDMAWriteWithImm
	wrs[0].SGL = wrs[0].SGL[:1]
	wrs[0].SGL[0].Length = 8
	wrs[0].RemoteAddr, wrs[0].RKey = paddr+64, pkey
	require.NoError(b, e.qp.PostSend(wrs...))
	require.NoError(b, c.wait(10*time.Second))
	reportHalfRTT(b, el, n, lat)
}

// pingWRs is one side's request and receive of the ping-pong. Requests are
// unsignaled: only the receive CQ is polled.
func pingWRs(e *benchEnd, send bool, paddr uint64, pkey uint32) ([]verbs.SendWR, []verbs.RecvWR) {
	if send {
		return []verbs.SendWR{{Opcode: verbs.OpSend, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 32)}}},
			[]verbs.RecvWR{{SGL: []verbs.SGE{verbs.SGEOf(e.mr, 1024, 64)}}}
	}
	return []verbs.SendWR{{Opcode: verbs.OpRDMAWriteWithImm, SGL: []verbs.SGE{verbs.SGEOf(e.mr, 0, 8)}, RemoteAddr: paddr + 64, RKey: pkey}},
		[]verbs.RecvWR{{}}
}

func reportHalfRTT(b *testing.B, el time.Duration, n int, lat []time.Duration) {
	b.ReportMetric(float64(el.Nanoseconds())/float64(2*n), "ns/halfrtt")
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds())/512, "ns/halfrtt-med")
	}
}

func atoi64(b *testing.B, s string) uint64 {
	var v uint64
	_, err := fmt.Sscan(s, &v)
	require.NoError(b, err)
	return v
}

type benchEnd struct {
	dev *Device
	rcq verbs.CQ
	qp  verbs.QP
	mr  verbs.MR
}

// newBenchEnd is one side of the process ping-pong: 64 receives posted
// (with a 64-byte buffer each for SENDs).
func newBenchEnd(tb testing.TB, send bool) *benchEnd {
	d, err := Open(context.Background(), Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
	require.NoError(tb, err)
	tb.Cleanup(func() { d.Close() })
	e, err := setupPingEnd(d, send)
	require.NoError(tb, err)
	return e
}

func setupPingEnd(d *Device, send bool) (*benchEnd, error) {
	e := &benchEnd{dev: d}
	pd, _ := d.AllocPD()
	scq, _ := d.CreateCQ(256)
	e.rcq, _ = d.CreateCQ(256)
	var err error
	if e.qp, err = pd.CreateQP(verbs.QPInitAttr{SendCQ: scq, RecvCQ: e.rcq, Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, err
	}
	if e.mr, err = pd.AllocMR(4096, allAccess); err != nil {
		return nil, err
	}
	if err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: allAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return nil, err
	}
	_, rwrs := pingWRs(e, send, 0, 0)
	for range 64 {
		if err := e.qp.PostRecv(rwrs...); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// runPingChild answers WRITE_WITH_IMMs (or SENDs) until the stop value.
func runPingChild(readLine func() ([]string, error), send bool) error {
	d, err := Open(context.Background(), Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
	if err != nil {
		return err
	}
	defer d.Close()
	e, err := setupPingEnd(d, send)
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s %d %d\n", hex.EncodeToString(e.qp.Address()), e.mr.Addr(), e.mr.RKey())
	f, err := readLine()
	if err != nil || len(f) != 4 || f[0] != "PEER" {
		return fmt.Errorf("expected PEER, got %v (%v)", f, err)
	}
	peer, _ := hex.DecodeString(f[1])
	var paddr, pkey uint64
	fmt.Sscan(f[2], &paddr)
	fmt.Sscan(f[3], &pkey)
	if err := verbs.Connect(e.qp, peer, verbs.DefaultConnectOptions()); err != nil {
		return err
	}
	wrs, rwrs := pingWRs(e, send, paddr, uint32(pkey))
	fmt.Println("READY")
	var wc [1]verbs.WC
	deadline := time.Now().Add(10 * time.Minute)
	for spins := 0; ; spins++ {
		if e.rcq.Poll(wc[:]) == 0 {
			if spins&(1<<20-1) == 0 && time.Now().After(deadline) {
				return fmt.Errorf("ping child: no stop after 10 minutes")
			}
			continue
		}
		if wc[0].Status != verbs.StatusSuccess {
			return wc[0].Err()
		}
		if wc[0].Imm == ringStop {
			return nil
		}
		if err := e.qp.PostSend(wrs...); err != nil {
			return err
		}
		if err := e.qp.PostRecv(rwrs...); err != nil {
			return err
		}
	}
}

// runFlagChild answers the bare flag ping-pong on the memfd at fd 3.
func runFlagChild() error {
	mem, err := unix.Mmap(3, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return err
	}
	ping, pong := word64(mem, 0), word64(mem, 64)
	fmt.Println("READY")
	for i := uint64(1); ; i++ {
		for atomic.LoadUint64(ping) < i {
		}
		if atomic.LoadUint64(ping) == ^uint64(0) {
			return nil
		}
		atomic.StoreUint64(pong, i)
	}
}

// startChildFiles starts a helper with extra descriptors (from fd 3).
func startChildFiles(tb testing.TB, mode string, files ...*os.File) *child {
	tb.Helper()
	bin, err := os.Executable()
	require.NoError(tb, err)
	cmd := exec.Command(bin, "-test.run=^TestHelperProcess$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.ExtraFiles = files
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return runChildCmd(tb, cmd)
}
