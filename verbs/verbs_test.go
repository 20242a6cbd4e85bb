package verbs

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAccessValidate(t *testing.T) {
	for _, tc := range []struct {
		a  Access
		ok bool
	}{
		{0, true},
		{AccessLocalWrite, true},
		{AccessRemoteRead, true},
		{AccessLocalWrite | AccessRemoteWrite, true},
		{AccessLocalWrite | AccessRemoteAtomic, true},
		{AccessRemoteWrite, false},
		{AccessRemoteAtomic | AccessRemoteRead, false},
		{1 << 7, false},
	} {
		err := tc.a.Validate()
		if tc.ok {
			assert.NoError(t, err, "%v", tc.a)
		} else {
			assert.ErrorIs(t, err, ErrInvalidArgument, "%v", tc.a)
		}
	}
	assert.Equal(t, "LocalWrite|RemoteRead", (AccessLocalWrite | AccessRemoteRead).String())
}

func TestAddressRoundTrip(t *testing.T) {
	a := QPAddress{Provider: "tcp", QPNum: 0x1234, PSN: 0xabcdef, Payload: []byte("127.0.0.1:4000")}
	b, err := a.Encode()
	require.NoError(t, err)
	got, err := DecodeAddressFor("tcp", b)
	require.NoError(t, err)
	assert.Equal(t, a, got)

	_, err = DecodeAddressFor("shm", b)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.Contains(t, err.Error(), `"tcp"`)

	for i := 0; i < len(b); i++ {
		_, err := DecodeAddress(b[:i])
		assert.ErrorIs(t, err, ErrInvalidArgument, "truncated at %d", i)
	}
	_, err = QPAddress{Provider: "x", Payload: make([]byte, MaxAddressLen)}.Encode()
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

func FuzzDecodeAddress(f *testing.F) {
	b, _ := QPAddress{Provider: "tcp", QPNum: 7, PSN: 9, Payload: []byte{1, 2, 3}}.Encode()
	f.Add(b)
	f.Add([]byte("QA\x01"))
	f.Fuzz(func(t *testing.T, in []byte) {
		a, err := DecodeAddress(in)
		if err != nil {
			return
		}
		out, err := a.Encode()
		if err != nil {
			t.Fatalf("decoded %+v but cannot re-encode: %v", a, err)
		}
		if string(out) != string(in) {
			t.Fatalf("round trip changed %x to %x", in, out)
		}
	})
}

func TestCheckModify(t *testing.T) {
	caps := Caps{MaxRdAtom: 16}
	remote, err := QPAddress{Provider: "p", QPNum: 1}.Encode()
	require.NoError(t, err)
	initMask := AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags
	rtrMask := AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer
	rtsMask := AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic
	good := QPAttr{Port: 1, PathMTU: MTU1024, Remote: remote, MaxDestRdAtomic: 1, MaxQPRdAtomic: 1, Timeout: 14, RetryCnt: 7, RNRRetry: 7}
	with := func(s QPState, f func(*QPAttr)) *QPAttr {
		a := good
		a.State = s
		if f != nil {
			f(&a)
		}
		return &a
	}
	for _, tc := range []struct {
		name string
		cur  QPState
		attr *QPAttr
		mask AttrMask
		want QPState
		err  error
	}{
		{"reset→init", QPReset, with(QPInit, nil), initMask, QPInit, nil},
		{"reset→init missing port", QPReset, with(QPInit, nil), initMask &^ AttrPort, QPReset, ErrInvalidArgument},
		{"reset→init port 0", QPReset, with(QPInit, func(a *QPAttr) { a.Port = 0 }), initMask, QPReset, ErrInvalidArgument},
		{"reset→init extra attr", QPReset, with(QPInit, nil), initMask | AttrSQPSN, QPReset, ErrInvalidArgument},
		{"reset→rtr", QPReset, with(QPRTR, nil), rtrMask, QPReset, ErrInvalidState},
		{"init→rtr", QPInit, with(QPRTR, nil), rtrMask, QPRTR, nil},
		{"init→rtr foreign address", QPInit, with(QPRTR, func(a *QPAttr) { a.Remote = []byte("junk") }), rtrMask, QPInit, ErrInvalidArgument},
		{"init→rtr bad mtu", QPInit, with(QPRTR, func(a *QPAttr) { a.PathMTU = 9 }), rtrMask, QPInit, ErrInvalidArgument},
		{"init→rtr rd atomic over limit", QPInit, with(QPRTR, func(a *QPAttr) { a.MaxDestRdAtomic = 17 }), rtrMask, QPInit, ErrInvalidArgument},
		{"init→rts", QPInit, with(QPRTS, nil), rtsMask, QPInit, ErrInvalidState},
		{"rtr→rts", QPRTR, with(QPRTS, nil), rtsMask, QPRTS, nil},
		{"rtr→rts retry 8", QPRTR, with(QPRTS, func(a *QPAttr) { a.RetryCnt = 8 }), rtsMask, QPRTR, ErrInvalidArgument},
		{"rtr→rts psn over 24 bits", QPRTR, with(QPRTS, func(a *QPAttr) { a.SQPSN = 1 << 24 }), rtsMask, QPRTR, ErrInvalidArgument},
		{"rts→rts rnr timer", QPRTS, with(QPRTS, nil), AttrMinRNRTimer, QPRTS, nil},
		{"rts→err", QPRTS, with(QPErr, nil), AttrState, QPErr, nil},
		{"err→reset", QPErr, with(QPReset, nil), AttrState, QPReset, nil},
		{"err→rts", QPErr, with(QPRTS, nil), rtsMask, QPErr, ErrInvalidState},
		{"to err with extras", QPInit, with(QPErr, nil), AttrState | AttrPort, QPInit, ErrInvalidArgument},
		{"unknown state", QPInit, with(42, nil), AttrState, QPInit, ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckModify("p", tc.cur, tc.attr, tc.mask, caps)
			assert.Equal(t, tc.want, got)
			if tc.err == nil {
				assert.NoError(t, err)
			} else {
				assert.ErrorIs(t, err, tc.err)
			}
		})
	}
}

func TestValidateSendWR(t *testing.T) {
	qc := QPCap{MaxSendSGE: 2, MaxInline: 64}
	dc := Caps{MaxMsgSize: 1 << 20}
	sge := SGE{Addr: 0x1000, Length: 8, LKey: 1}
	for _, tc := range []struct {
		name string
		wr   SendWR
		ok   bool
	}{
		{"send", SendWR{Opcode: OpSend, SGL: []SGE{sge}}, true},
		{"unknown opcode", SendWR{Opcode: 99}, false},
		{"too many sges", SendWR{Opcode: OpSend, SGL: []SGE{sge, sge, sge}}, false},
		{"inline ok", SendWR{Opcode: OpRDMAWrite, Flags: SendInline, Inline: make([]byte, 64)}, true},
		{"inline too long", SendWR{Opcode: OpSend, Flags: SendInline, Inline: make([]byte, 65)}, false},
		{"inline read", SendWR{Opcode: OpRDMARead, Flags: SendInline}, false},
		{"inline with sgl", SendWR{Opcode: OpSend, Flags: SendInline, SGL: []SGE{sge}}, false},
		{"inline data without flag", SendWR{Opcode: OpSend, Inline: []byte{1}}, false},
		{"atomic", SendWR{Opcode: OpAtomicFetchAdd, SGL: []SGE{sge}, RemoteAddr: 8}, true},
		{"atomic misaligned", SendWR{Opcode: OpAtomicCmpAndSwp, SGL: []SGE{sge}, RemoteAddr: 4}, false},
		{"atomic short", SendWR{Opcode: OpAtomicFetchAdd, SGL: []SGE{{Length: 4}}}, false},
		{"too large", SendWR{Opcode: OpRDMAWrite, SGL: []SGE{{Length: 1 << 20}, {Length: 1}}}, false},
		{"bad flags", SendWR{Opcode: OpSend, Flags: 1 << 6}, false},
	} {
		err := ValidateSendWR(&tc.wr, qc, dc)
		if tc.ok {
			assert.NoError(t, err, tc.name)
		} else {
			assert.ErrorIs(t, err, ErrInvalidArgument, tc.name)
		}
	}
}

func TestStatusError(t *testing.T) {
	wc := WC{ID: 3, Status: StatusRetryExcErr, QPNum: 9}
	err := wc.Err()
	require.Error(t, err)
	assert.True(t, errors.Is(err, StatusRetryExcErr))
	assert.False(t, errors.Is(err, StatusWRFlushErr))
	assert.Contains(t, err.Error(), "RETRY_EXC_ERR")
	var se *StatusError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, uint64(3), se.WRID)
	assert.NoError(t, (&WC{}).Err())
}

func TestTimers(t *testing.T) {
	assert.Equal(t, int64(0), int64(TimeoutDuration(0)))
	assert.Equal(t, int64(4096*2), TimeoutDuration(1).Nanoseconds())
	assert.Equal(t, int64(640), RNRTimerDuration(12).Microseconds())
	assert.Equal(t, int64(655360), RNRTimerDuration(0).Microseconds())
}

func TestMTUBytes(t *testing.T) {
	assert.Equal(t, 256, MTU256.Bytes())
	assert.Equal(t, 4096, MTU4096.Bytes())
	assert.Equal(t, 0, MTU(0).Bytes())
	assert.Equal(t, 0, MTU(6).Bytes())
}
