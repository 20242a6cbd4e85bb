package verbstest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rdmago/rdmago/verbs"
)

// suite is the state shared by the cases of one Run: the options and two
// devices that most cases build their queue pairs on.
type suite struct {
	opts Options
	root string // t.Name() of Run's t, to name cases relative to it

	devA, devB verbs.Device
}

func (s *suite) name() string {
	if s.opts.Name != "" {
		return s.opts.Name
	}
	if s.devA != nil {
		return s.devA.Provider()
	}
	return "?"
}

// openShared opens the two devices most cases use; they live until Run ends.
func (s *suite) openShared(t *testing.T) {
	s.devA = s.openDevice(t)
	s.devB = s.openDevice(t)
	s.opts.Connect = clampConnect(s.opts.Connect, s.devA.Caps())
}

// clampConnect keeps the responder and initiator depths within what the
// device allows (a device with MaxRdAtom 0 cannot take 1).
func clampConnect(o verbs.ConnectOptions, c verbs.Caps) verbs.ConnectOptions {
	if int(o.MaxDestRdAtomic) > c.MaxRdAtom {
		o.MaxDestRdAtomic = uint8(c.MaxRdAtom)
	}
	if int(o.MaxQPRdAtomic) > c.MaxRdAtom {
		o.MaxQPRdAtomic = uint8(c.MaxRdAtom)
	}
	return o
}

// openDevice opens a device that is closed when t ends; Close must not hang.
func (s *suite) openDevice(t *testing.T) verbs.Device {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CaseTimeout)
	defer cancel()
	dev, err := s.opts.Open(ctx)
	require.NoError(t, err, "Options.Open")
	require.NotNil(t, dev, "Options.Open returned a nil device")
	t.Cleanup(func() { closeBounded(t, "Device.Close", s.opts.CaseTimeout, dev.Close) })
	return dev
}

// closeBounded runs a Close that must neither hang nor fail with anything
// but ErrClosed (already closed, e.g. by the case itself).
func closeBounded(t *testing.T, what string, limit time.Duration, fn func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("%s: %v", what, err)
		}
	case <-time.After(limit):
		t.Errorf("%s did not return within %v", what, limit)
	}
}

// ctx is a context bounding every wait of one case.
func (s *suite) ctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.CaseTimeout)
	t.Cleanup(cancel)
	return ctx
}

// endpoint is one side of a connection: a PD, a send and a receive CQ, one
// QP and one provider-allocated MR with every access right.
type endpoint struct {
	dev      verbs.Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	mr       verbs.MR
}

// pairConfig says how to build a connected pair; zero values mean defaults.
type pairConfig struct {
	sameDevice bool
	cap        verbs.QPCap // zero: 32 WRs each way, up to 4 SGEs, up to 64 bytes inline
	mrSize     int         // zero: 64 KiB
	mrAccess   verbs.Access
	connA      *verbs.ConnectOptions // nil: Options.Connect
	connB      *verbs.ConnectOptions
	sigAll     bool
	noConnect  bool // leave both QPs in RESET
	devA, devB verbs.Device
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func (s *suite) defaultCap(dev verbs.Device) verbs.QPCap {
	c := dev.Caps()
	return verbs.QPCap{
		MaxSendWR:  min(32, c.MaxQPWR),
		MaxRecvWR:  min(32, c.MaxQPWR),
		MaxSendSGE: min(4, c.MaxSGE),
		MaxRecvSGE: min(4, c.MaxSGE),
		MaxInline:  min(64, c.MaxInline),
	}
}

// newEndpoint builds an endpoint on dev whose objects are closed when t ends.
func (s *suite) newEndpoint(t *testing.T, dev verbs.Device, cfg pairConfig) *endpoint {
	t.Helper()
	e := &endpoint{dev: dev}
	var err error
	e.pd, err = dev.AllocPD()
	require.NoError(t, err, "AllocPD")
	t.Cleanup(func() { closeBounded(t, "PD.Close", s.opts.CaseTimeout, e.pd.Close) })
	cap := cfg.cap
	if cap == (verbs.QPCap{}) {
		cap = s.defaultCap(dev)
	}
	e.scq = s.newCQ(t, dev, cap.MaxSendWR*2)
	e.rcq = s.newCQ(t, dev, cap.MaxRecvWR*2)
	size, access := cfg.mrSize, cfg.mrAccess
	if size == 0 {
		size = 64 << 10
	}
	if access == 0 {
		access = allAccess
	}
	e.mr = s.allocMR(t, e.pd, size, access)
	e.qp = s.newQP(t, e.pd, verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: cap, SigAll: cfg.sigAll})
	return e
}

func (s *suite) newCQ(t *testing.T, dev verbs.Device, depth int) verbs.CQ {
	t.Helper()
	cq, err := dev.CreateCQ(depth)
	require.NoError(t, err, "CreateCQ(%d)", depth)
	t.Cleanup(func() { closeBounded(t, "CQ.Close", s.opts.CaseTimeout, cq.Close) })
	return cq
}

func (s *suite) allocMR(t *testing.T, pd verbs.PD, n int, access verbs.Access) verbs.MR {
	t.Helper()
	mr, err := pd.AllocMR(n, access)
	require.NoError(t, err, "AllocMR(%d, %v)", n, access)
	require.Len(t, mr.Bytes(), n, "AllocMR(%d).Bytes()", n)
	t.Cleanup(func() { closeBounded(t, "MR.Close", s.opts.CaseTimeout, mr.Close) })
	return mr
}

func (s *suite) newQP(t *testing.T, pd verbs.PD, attr verbs.QPInitAttr) verbs.QP {
	t.Helper()
	qp, err := pd.CreateQP(attr)
	require.NoError(t, err, "CreateQP(%+v)", attr.Cap)
	require.Equal(t, verbs.QPReset, qp.State(), "a new QP starts in RESET")
	got := qp.Cap()
	require.GreaterOrEqual(t, got.MaxSendWR, attr.Cap.MaxSendWR, "granted MaxSendWR")
	require.GreaterOrEqual(t, got.MaxRecvWR, attr.Cap.MaxRecvWR, "granted MaxRecvWR")
	require.GreaterOrEqual(t, got.MaxSendSGE, attr.Cap.MaxSendSGE, "granted MaxSendSGE")
	require.GreaterOrEqual(t, got.MaxRecvSGE, attr.Cap.MaxRecvSGE, "granted MaxRecvSGE")
	require.GreaterOrEqual(t, got.MaxInline, attr.Cap.MaxInline, "granted MaxInline")
	t.Cleanup(func() { closeBounded(t, "QP.Close", s.opts.CaseTimeout, qp.Close) })
	return qp
}

// pair is two connected endpoints: a is the requester in most cases.
type pair struct {
	a, b *endpoint
}

func (s *suite) newPair(t *testing.T, cfg pairConfig) *pair {
	t.Helper()
	da, db := cfg.devA, cfg.devB
	if da == nil {
		da = s.devA
	}
	if db == nil {
		db = s.devB
		if cfg.sameDevice {
			db = da
		}
	}
	p := &pair{a: s.newEndpoint(t, da, cfg), b: s.newEndpoint(t, db, cfg)}
	if !cfg.noConnect {
		ca, cb := s.opts.Connect, s.opts.Connect
		if cfg.connA != nil {
			ca = clampConnect(*cfg.connA, da.Caps())
		}
		if cfg.connB != nil {
			cb = clampConnect(*cfg.connB, db.Caps())
		}
		s.connect(t, p.a.qp, p.b.qp, ca, cb)
	}
	return p
}

// connect connects two QPs, both sides at once (a provider may wait for its
// peer while it moves to RTR or RTS).
func (s *suite) connect(t *testing.T, a, b verbs.QP, ca, cb verbs.ConnectOptions) {
	t.Helper()
	var wg sync.WaitGroup
	var ea, eb error
	addrA, addrB := a.Address(), b.Address()
	wg.Add(2)
	go func() { defer wg.Done(); ea = verbs.Connect(a, addrB, ca) }()
	go func() { defer wg.Done(); eb = verbs.Connect(b, addrA, cb) }()
	if !waitGroupTimeout(&wg, s.opts.CaseTimeout) {
		t.Fatalf("verbs.Connect did not return within %v", s.opts.CaseTimeout)
	}
	require.NoError(t, ea, "Connect QP %#x to %#x", a.Num(), b.Num())
	require.NoError(t, eb, "Connect QP %#x to %#x", b.Num(), a.Num())
	require.Equal(t, verbs.QPRTS, a.State())
	require.Equal(t, verbs.QPRTS, b.State())
}

func waitGroupTimeout(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}

// collect returns exactly n completions from cq, waiting with ctx; it fails
// the test, listing what arrived, if they do not all come.
func collect(ctx context.Context, t *testing.T, cq verbs.CQ, n int) []verbs.WC {
	t.Helper()
	got := make([]verbs.WC, 0, n)
	buf := make([]verbs.WC, 16)
	for len(got) < n {
		k := cq.Poll(buf[:min(len(buf), n-len(got))])
		got = append(got, buf[:k]...)
		if len(got) == n {
			break
		}
		if k > 0 {
			continue
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("waiting for %d completions, got %d (%s): CQ.Wait: %v", n, len(got), fmtWCs(got), err)
		}
	}
	return got
}

// collect1 returns one completion.
func collect1(ctx context.Context, t *testing.T, cq verbs.CQ) verbs.WC {
	t.Helper()
	return collect(ctx, t, cq, 1)[0]
}

// requireEmpty fails if cq holds a completion now.
func requireEmpty(t *testing.T, cq verbs.CQ, why string) {
	t.Helper()
	var wc [4]verbs.WC
	if n := cq.Poll(wc[:]); n > 0 {
		t.Fatalf("%s: unexpected completions %s", why, fmtWCs(wc[:n]))
	}
}

func fmtWCs(wcs []verbs.WC) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, w := range wcs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{id %d %v", w.ID, w.Status)
		if w.Status == verbs.StatusSuccess {
			fmt.Fprintf(&b, " %v len %d", w.Opcode, w.ByteLen)
			if w.Flags&verbs.WCWithImm != 0 {
				fmt.Fprintf(&b, " imm %#x", w.Imm)
			}
		}
		fmt.Fprintf(&b, " qp %#x}", w.QPNum)
	}
	b.WriteByte(']')
	return b.String()
}

// requireWC checks a successful completion's fields.
func requireWC(t *testing.T, wc verbs.WC, id uint64, op verbs.WCOpcode, qpNum uint32, what string) {
	t.Helper()
	require.Equal(t, verbs.StatusSuccess, wc.Status, "%s: status of %s", what, fmtWCs([]verbs.WC{wc}))
	require.Equal(t, id, wc.ID, "%s: WC.ID", what)
	require.Equal(t, op, wc.Opcode, "%s: WC.Opcode", what)
	require.Equal(t, qpNum, wc.QPNum, "%s: WC.QPNum", what)
}

// requireStatus checks a completion's ID and status, allowing any of the
// listed statuses (documented variants).
func requireStatus(t *testing.T, wc verbs.WC, id uint64, what string, ok ...verbs.Status) {
	t.Helper()
	require.Equal(t, id, wc.ID, "%s: WC.ID of %s", what, fmtWCs([]verbs.WC{wc}))
	require.Contains(t, ok, wc.Status, "%s: status of %s", what, fmtWCs([]verbs.WC{wc}))
	if wc.Status != verbs.StatusSuccess {
		var se *verbs.StatusError
		require.ErrorAs(t, wc.Err(), &se)
		require.ErrorIs(t, wc.Err(), wc.Status)
	}
}

// waitState polls qp.State until it is want or ctx ends: a QP moves to ERR
// when its provider notices the error, which may lag the completion the
// other side sees.
func waitState(ctx context.Context, t *testing.T, qp verbs.QP, want verbs.QPState, what string) {
	t.Helper()
	for qp.State() != want {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: QP %#x is in %v, want %v", what, qp.Num(), qp.State(), want)
		case <-time.After(time.Millisecond):
		}
	}
}

// requirePostErr checks a post-time error: a *verbs.Error with the given
// index wrapping want.
func requirePostErr(t *testing.T, err error, index int, want error, what string) {
	t.Helper()
	require.Error(t, err, "%s: post succeeded", what)
	var ve *verbs.Error
	require.ErrorAs(t, err, &ve, "%s: %v is not a *verbs.Error", what, err)
	require.ErrorIs(t, err, want, "%s", what)
	require.Equal(t, index, ve.Index, "%s: *verbs.Error.Index of %v", what, err)
}

// pattern fills b with bytes derived from seed and the offset, so misplaced
// or stale data is caught.
func pattern(b []byte, seed uint64) {
	x := seed*0x9e3779b97f4a7c15 + 1
	var blk [4096]byte
	for i := 0; i < len(blk); i += 8 {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		binary.LittleEndian.PutUint64(blk[i:], x)
	}
	for off := 0; off < len(b); off += len(blk) {
		n := copy(b[off:], blk[:])
		if n >= 8 {
			// Mark each block with its offset so shifted copies differ.
			binary.LittleEndian.PutUint64(b[off:], uint64(off)^seed)
		}
	}
}

func patterned(n int, seed uint64) []byte {
	b := make([]byte, n)
	pattern(b, seed)
	return b
}

// requireBytes compares without dumping megabytes on failure.
func requireBytes(t *testing.T, want, got []byte, what string) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	if len(want) != len(got) {
		t.Fatalf("%s: length %d, want %d", what, len(got), len(want))
	}
	for i := range want {
		if want[i] != got[i] {
			end := min(i+16, len(want))
			t.Fatalf("%s: first difference at byte %d of %d: got % x, want % x", what, i, len(want), got[i:end], want[i:end])
		}
	}
}

// skipUnless skips with a reason when a capability is missing.
func skipUnless(t *testing.T, ok bool, format string, args ...any) {
	t.Helper()
	if !ok {
		t.Skipf(format, args...)
	}
}
