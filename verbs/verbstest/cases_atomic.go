package verbstest

import (
	"context"
	"encoding/binary"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

var atomicCases = []tcase{
	{"FetchAddCmpSwap", testAtomicsBasic},
	{"ConcurrentFromSeveralQPs", testAtomicsConcurrent},
	{"UserMemory", testAtomicsUserMemory},
}

func skipNoAtomics(t *testing.T, s *suite) {
	t.Helper()
	skipUnless(t, s.devA.Caps().Atomics != verbs.AtomicNone && s.devB.Caps().Atomics != verbs.AtomicNone,
		"device has no atomics (Caps.Atomics = AtomicNone)")
}

// atomicWR builds an 8-byte atomic whose original value lands at local[loff].
func atomicWR(id uint64, op verbs.Opcode, local verbs.MR, loff int, remote region, roff int, cmpAdd, swap uint64) verbs.SendWR {
	return verbs.SendWR{ID: id, Opcode: op, Flags: verbs.SendSignaled, SGL: []verbs.SGE{verbs.SGEOf(local, loff, 8)},
		RemoteAddr: remote.Addr() + uint64(roff), RKey: remote.RKey(), CompareAdd: cmpAdd, Swap: swap}
}

// atomics runs atomics from one QP and decodes the values they return. The
// byte order of an atomic word is the device's business (verbs keeps it
// opaque), so the first two operations on a zero word learn it: FETCH_ADD 1
// returns zero, FETCH_ADD 0 then returns 1 in the device's order.
type atomics struct {
	t      *testing.T
	ctx    context.Context
	qp     verbs.QP
	scq    verbs.CQ
	local  verbs.MR
	remote region
	roff   int
	order  binary.ByteOrder
	id     uint64
}

func (a *atomics) do(op verbs.Opcode, cmpAdd, swap uint64) uint64 {
	a.t.Helper()
	a.id++
	require.NoError(a.t, a.qp.PostSend(atomicWR(a.id, op, a.local, 0, a.remote, a.roff, cmpAdd, swap)))
	requireWC(a.t, collect1(a.ctx, a.t, a.scq), a.id, verbs.WCOpcodeFor(op), a.qp.Num(), op.String())
	return a.order.Uint64(a.local.Bytes()[:8])
}

// calibrate learns the byte order on a zero word and leaves it holding 1.
func (a *atomics) calibrate() {
	a.t.Helper()
	a.order = binary.LittleEndian
	require.Zero(a.t, a.do(verbs.OpAtomicFetchAdd, 1, 0), "FETCH_ADD on a zeroed word returned non-zero")
	v := a.do(verbs.OpAtomicFetchAdd, 0, 0)
	switch {
	case v == 1:
	case binary.BigEndian.Uint64(a.local.Bytes()[:8]) == 1:
		a.order = binary.BigEndian
	default:
		a.t.Fatalf("FETCH_ADD 0 after FETCH_ADD 1 on a zero word returned % x", a.local.Bytes()[:8])
	}
}

func testAtomicsBasic(t *testing.T, s *suite) {
	skipNoAtomics(t, s)
	s.eachTopology(t, pairConfig{}, func(t *testing.T, p *pair) {
		require.True(t, p.b.mr.SupportsAtomics(), "provider memory on a device with atomics must support them")
		a := &atomics{t: t, ctx: s.ctx(t), qp: p.a.qp, scq: p.a.scq, local: p.a.mr, remote: p.b.mr, roff: 64}
		a.calibrate()
		require.EqualValues(t, 1, a.do(verbs.OpAtomicFetchAdd, 41, 0), "FETCH_ADD returns the old value")
		require.EqualValues(t, 42, a.do(verbs.OpAtomicCmpAndSwp, 41, 7), "CMP_AND_SWP that does not match returns the old value")
		require.EqualValues(t, 42, a.do(verbs.OpAtomicFetchAdd, 0, 0), "CMP_AND_SWP that does not match must not store")
		require.EqualValues(t, 42, a.do(verbs.OpAtomicCmpAndSwp, 42, 0xfedcba9876543210), "CMP_AND_SWP that matches returns the old value")
		require.EqualValues(t, uint64(0xfedcba9876543210), a.do(verbs.OpAtomicFetchAdd, 0x0123456789abcdf0, 0), "CMP_AND_SWP that matches stores the swap value")
		require.EqualValues(t, uint64(0), a.do(verbs.OpAtomicFetchAdd, 0, 0), "FETCH_ADD wraps around at 2^64")
		// Neighbouring words are untouched.
		require.Equal(t, make([]byte, 8), p.b.mr.Bytes()[56:64])
		require.Equal(t, make([]byte, 8), p.b.mr.Bytes()[72:80])
	})
}

// testAtomicsConcurrent: FETCH_ADDs from several QPs (and goroutines) on one
// word are atomic: the old values they return are all distinct.
func testAtomicsConcurrent(t *testing.T, s *suite) {
	skipNoAtomics(t, s)
	const nqp, per = 4, 32
	a, b := s.newHubs(t, nqp, pairConfig{cap: verbs.QPCap{MaxSendWR: per, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	ctx := s.ctx(t)
	cal := &atomics{t: t, ctx: ctx, qp: a.qps[0], scq: a.scq, local: a.mr, remote: b.mr, roff: 0}
	cal.calibrate() // the word now holds 1
	var wg sync.WaitGroup
	errs := make(chan error, nqp)
	for q := range nqp {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range per {
				slot := 8 * (1 + q*per + k)
				if err := a.qps[q].PostSend(atomicWR(uint64(slot), verbs.OpAtomicFetchAdd, a.mr, slot, b.mr, 0, 1, 0)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	seen := map[uint64]bool{}
	for _, wc := range collect(ctx, t, a.scq, nqp*per) {
		require.Equal(t, verbs.StatusSuccess, wc.Status, "%s", fmtWCs([]verbs.WC{wc}))
		require.Equal(t, verbs.WCFetchAdd, wc.Opcode)
		v := cal.order.Uint64(a.mr.Bytes()[wc.ID:])
		require.False(t, seen[v], "two FETCH_ADDs returned the same old value %d", v)
		require.True(t, v >= 1 && v <= nqp*per, "FETCH_ADD returned %d, outside 1..%d", v, nqp*per)
		seen[v] = true
	}
	cal.id = 1 << 20
	require.EqualValues(t, 1+nqp*per, cal.do(verbs.OpAtomicFetchAdd, 0, 0), "final value after %d concurrent FETCH_ADD 1", nqp*per)
}

func testAtomicsUserMemory(t *testing.T, s *suite) {
	skipNoAtomics(t, s)
	p := s.newPair(t, pairConfig{})
	buf := make([]byte, 4096)
	mr, err := p.b.pd.RegMR(buf, allAccess)
	require.NoError(t, err)
	t.Cleanup(func() { closeBounded(t, "MR.Close", s.opts.CaseTimeout, mr.Close) })
	require.Equal(t, verbs.MemUser, mr.Kind())
	require.Equal(t, s.devB.Caps().UserMemAtomics, mr.SupportsAtomics(), "MR.SupportsAtomics of user memory must match Caps.UserMemAtomics")
	skipUnless(t, mr.SupportsAtomics(), "user-registered memory does not support atomics on this provider (Caps.UserMemAtomics = false)")
	a := &atomics{t: t, ctx: s.ctx(t), qp: p.a.qp, scq: p.a.scq, local: p.a.mr, remote: mr, roff: 8}
	a.calibrate()
	require.EqualValues(t, 1, a.do(verbs.OpAtomicCmpAndSwp, 1, 99))
	require.EqualValues(t, 99, a.do(verbs.OpAtomicFetchAdd, 1, 0))
}
