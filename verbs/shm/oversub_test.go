//go:build linux

package shm

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// ringRank is one rank of the oversubscription ring: a QP to the next rank
// and one from the previous, each with its own receive CQ, so a rank waits
// only for its predecessor.
type ringRank struct {
	dev        *Device
	pd         verbs.PD
	scq        verbs.CQ
	rcq        verbs.CQ
	next, prev verbs.QP
	mr         verbs.MR
	nextMR     [2]uint64 // addr, rkey of the next rank's MR
	wrs        []verbs.SendWR
	rwrs       []verbs.RecvWR
}

const ringStop = 0xffffffff

func newRingRank() (*ringRank, error) {
	d, err := Open(context.Background(), Options{DeviceOptions: verbs.DeviceOptions{Token: testToken}})
	if err != nil {
		return nil, err
	}
	r := &ringRank{dev: d}
	r.pd, _ = d.AllocPD()
	r.scq, _ = d.CreateCQ(64)
	r.rcq, _ = d.CreateCQ(64)
	mk := func(rcq verbs.CQ) (verbs.QP, error) {
		return r.pd.CreateQP(verbs.QPInitAttr{SendCQ: r.scq, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	if r.next, err = mk(r.scq); err != nil {
		return nil, err
	}
	if r.prev, err = mk(r.rcq); err != nil {
		return nil, err
	}
	if r.mr, err = r.pd.AllocMR(4096, allAccess); err != nil {
		return nil, err
	}
	r.rwrs = []verbs.RecvWR{{}}
	return r, nil
}

// hello is what a rank tells the others: its two QP addresses and its MR.
func (r *ringRank) hello() string {
	return fmt.Sprintf("%s %s %d %d", hex.EncodeToString(r.next.Address()), hex.EncodeToString(r.prev.Address()), r.mr.Addr(), r.mr.RKey())
}

// connect links next to the following rank's prev, and prev to the
// preceding rank's next (both given as hello fields).
func (r *ringRank) connect(prevHello, nextHello []string) error {
	nextPrev, _ := hex.DecodeString(nextHello[1])
	prevNext, _ := hex.DecodeString(prevHello[0])
	var mrAddr, mrKey uint64
	fmt.Sscan(nextHello[2], &mrAddr)
	fmt.Sscan(nextHello[3], &mrKey)
	r.nextMR = [2]uint64{mrAddr, mrKey}
	if err := r.prev.Modify(&verbs.QPAttr{State: verbs.QPInit, Port: 1, AccessFlags: allAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		return err
	}
	for i := 0; i < 8; i++ {
		if err := r.prev.PostRecv(verbs.RecvWR{}); err != nil {
			return err
		}
	}
	errc := make(chan error, 2)
	go func() { errc <- verbs.Connect(r.next, nextPrev, verbs.DefaultConnectOptions()) }()
	go func() { errc <- verbs.Connect(r.prev, prevNext, verbs.DefaultConnectOptions()) }()
	for i := 0; i < 2; i++ {
		if err := <-errc; err != nil {
			return err
		}
	}
	r.wrs = []verbs.SendWR{{Opcode: verbs.OpRDMAWriteWithImm, SGL: []verbs.SGE{verbs.SGEOf(r.mr, 0, 8)}, RemoteAddr: r.nextMR[0], RKey: uint32(r.nextMR[1])}}
	return nil
}

// pass sends the token on.
func (r *ringRank) pass(imm uint32) error {
	r.wrs[0].Imm = imm
	return r.next.PostSend(r.wrs...)
}

// await blocks (spin, yield, futex) until the predecessor's token arrives.
func (r *ringRank) await(ctx context.Context) (uint32, error) {
	var wc [1]verbs.WC
	for r.rcq.Poll(wc[:]) == 0 {
		if err := r.rcq.Wait(ctx); err != nil {
			return 0, err
		}
	}
	if wc[0].Status != verbs.StatusSuccess {
		return 0, wc[0].Err()
	}
	return wc[0].Imm, r.prev.PostRecv(r.rwrs...)
}

// forward is a non-leading rank: pass every token on until the stop token.
func (r *ringRank) forward(ctx context.Context) error {
	for {
		imm, err := r.await(ctx)
		if err != nil {
			return err
		}
		if err := r.pass(imm); err != nil {
			return err
		}
		if imm == ringStop {
			return nil
		}
	}
}

func runRingChild(readLine func() ([]string, error)) error {
	r, err := newRingRank()
	if err != nil {
		return err
	}
	defer r.dev.Close()
	fmt.Println("HELLO", r.hello())
	prev, err := readLine()
	if err != nil || len(prev) != 5 || prev[0] != "PREV" {
		return fmt.Errorf("expected PREV, got %v (%v)", prev, err)
	}
	next, err := readLine()
	if err != nil || len(next) != 5 || next[0] != "NEXT" {
		return fmt.Errorf("expected NEXT, got %v (%v)", next, err)
	}
	if err := r.connect(prev[1:], next[1:]); err != nil {
		return err
	}
	fmt.Println("READY")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	return r.forward(ctx)
}

// BenchmarkOversubscribed passes a token around a ring of 8 ranks on this
// machine's cores (2 on the CI box), each rank waiting in CQ.Wait (spin,
// then sched_yield, then futex), as 8 processes and as 8 goroutines; the
// same ring of 2 ranks (not oversubscribed) is the baseline. With
// more ranks than cores, progress needs the waiters to give their core
// away, which is what the yield and futex phases do; the report is the
// time per hop. Reported, not asserted.
func BenchmarkOversubscribed(b *testing.B) {
	for _, n := range []int{2, 8} {
		benchRing(b, n)
	}
}

func benchRing(b *testing.B, n int) {
	b.Run(fmt.Sprintf("ranks=%d/processes", n), func(b *testing.B) {
		lead, err := newRingRank()
		require.NoError(b, err)
		defer lead.dev.Close()
		hellos := [][]string{strings.Fields(lead.hello())}
		kids := make([]*child, n-1)
		for i := range kids {
			kids[i] = startChild(b, "ring", nil, nil, "")
			hellos = append(hellos, kids[i].expect("HELLO")[1:])
		}
		for i, k := range kids {
			rank := i + 1
			k.send("PREV %s", strings.Join(hellos[rank-1], " "))
			k.send("NEXT %s", strings.Join(hellos[(rank+1)%n], " "))
		}
		require.NoError(b, lead.connect(hellos[n-1], hellos[1]))
		for _, k := range kids {
			k.expect("READY")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		laps := 0
		for b.Loop() {
			require.NoError(b, lead.pass(1))
			_, err := lead.await(ctx)
			require.NoError(b, err)
			laps++
		}
		el := time.Since(start)
		b.StopTimer()
		require.NoError(b, lead.pass(ringStop))
		lead.await(ctx)
		for _, k := range kids {
			require.NoError(b, k.wait(30*time.Second), "ring child")
		}
		b.ReportMetric(float64(el.Nanoseconds())/float64(laps*n), "ns/hop")
	})
	b.Run(fmt.Sprintf("ranks=%d/goroutines", n), func(b *testing.B) {
		ranks := make([]*ringRank, n)
		hellos := make([][]string, n)
		for i := range ranks {
			r, err := newRingRank()
			require.NoError(b, err)
			defer r.dev.Close()
			ranks[i], hellos[i] = r, strings.Fields(r.hello())
		}
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, r := range ranks {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = r.connect(hellos[(i+n-1)%n], hellos[(i+1)%n]) }()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(b, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		for _, r := range ranks[1:] {
			wg.Add(1)
			go func() { defer wg.Done(); r.forward(ctx) }()
		}
		lead := ranks[0]
		b.ReportAllocs()
		b.ResetTimer()
		start := time.Now()
		laps := 0
		for b.Loop() {
			require.NoError(b, lead.pass(1))
			_, err := lead.await(ctx)
			require.NoError(b, err)
			laps++
		}
		el := time.Since(start)
		b.StopTimer()
		require.NoError(b, lead.pass(ringStop))
		lead.await(ctx)
		wg.Wait()
		b.ReportMetric(float64(el.Nanoseconds())/float64(laps*n), "ns/hop")
	})
}
