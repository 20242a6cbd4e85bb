package verbs

import (
	"fmt"
	"time"
)

// The RC transition table of ibv_modify_qp(3): for each (from, to) pair, the
// attribute bits a Modify must set and the ones it may set. Providers call
// CheckModify before they change anything, so that a bad Modify leaves the
// QP exactly as it was, and every provider refuses the same things.
type transition struct{ required, optional AttrMask }

var rcTransitions = map[[2]QPState]transition{
	{QPReset, QPInit}: {required: AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{QPInit, QPInit}:  {optional: AttrPKeyIndex | AttrPort | AttrAccessFlags},
	{QPInit, QPRTR}: {
		required: AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer,
		optional: AttrAccessFlags | AttrPKeyIndex,
	},
	{QPRTR, QPRTS}: {
		required: AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic,
		optional: AttrAccessFlags | AttrMinRNRTimer,
	},
	{QPRTS, QPRTS}: {optional: AttrAccessFlags | AttrMinRNRTimer},
}

const remoteAccess = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic

// CheckModify validates a Modify of a QP in state cur against the RC
// transition table and the attribute ranges, and returns the state the QP
// moves to. caps bounds MaxDestRdAtomic and MaxQPRdAtomic. Any state may move
// to RESET or ERR with AttrState alone. Remote, when AttrAV is set, must be a
// well-formed address of provider; the provider checks its payload itself.
func CheckModify(provider string, cur QPState, attr *QPAttr, mask AttrMask, caps Caps) (QPState, error) {
	if attr == nil {
		return cur, fmt.Errorf("%w: nil QPAttr", ErrInvalidArgument)
	}
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
	}
	if next > QPErr {
		return cur, fmt.Errorf("%w: unknown target state %d", ErrInvalidArgument, next)
	}
	if mask&AttrState != 0 && (next == QPReset || next == QPErr) {
		if mask != AttrState {
			return cur, fmt.Errorf("%w: %v→%v takes AttrState only (mask %#x)", ErrInvalidArgument, cur, next, uint32(mask))
		}
		return next, nil
	}
	tr, ok := rcTransitions[[2]QPState{cur, next}]
	if !ok {
		return cur, fmt.Errorf("%w: no RC transition %v→%v", ErrInvalidState, cur, next)
	}
	if cur == next {
		tr.optional |= AttrState
	}
	if missing := tr.required &^ mask; missing != 0 {
		return cur, fmt.Errorf("%w: %v→%v needs attributes %s", ErrInvalidArgument, cur, next, missing)
	}
	if extra := mask &^ (tr.required | tr.optional); extra != 0 {
		return cur, fmt.Errorf("%w: %v→%v does not take attributes %s", ErrInvalidArgument, cur, next, extra)
	}
	if mask&AttrAccessFlags != 0 && attr.AccessFlags&^(remoteAccess|AccessLocalWrite) != 0 {
		return cur, fmt.Errorf("%w: QP access flags %v", ErrInvalidArgument, attr.AccessFlags)
	}
	if mask&AttrPort != 0 && attr.Port == 0 {
		return cur, fmt.Errorf("%w: port 0 (ports count from 1)", ErrInvalidArgument)
	}
	if mask&AttrPathMTU != 0 && attr.PathMTU.Bytes() == 0 {
		return cur, fmt.Errorf("%w: path MTU code %d", ErrInvalidArgument, attr.PathMTU)
	}
	if mask&AttrAV != 0 {
		if _, err := DecodeAddressFor(provider, attr.Remote); err != nil {
			return cur, err
		}
	}
	if mask&AttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return cur, fmt.Errorf("%w: min RNR timer code %d > 31", ErrInvalidArgument, attr.MinRNRTimer)
	}
	if mask&AttrTimeout != 0 && attr.Timeout > 31 {
		return cur, fmt.Errorf("%w: timeout code %d > 31", ErrInvalidArgument, attr.Timeout)
	}
	if mask&AttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return cur, fmt.Errorf("%w: retry count %d > 7", ErrInvalidArgument, attr.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return cur, fmt.Errorf("%w: RNR retry %d > 7", ErrInvalidArgument, attr.RNRRetry)
	}
	if mask&AttrSQPSN != 0 && attr.SQPSN > 0xffffff {
		return cur, fmt.Errorf("%w: SQ PSN %#x exceeds 24 bits", ErrInvalidArgument, attr.SQPSN)
	}
	if mask&AttrMaxDestRdAtomic != 0 && int(attr.MaxDestRdAtomic) > caps.MaxRdAtom {
		return cur, fmt.Errorf("%w: max dest rd atomic %d > device limit %d", ErrInvalidArgument, attr.MaxDestRdAtomic, caps.MaxRdAtom)
	}
	if mask&AttrMaxQPRdAtomic != 0 && int(attr.MaxQPRdAtomic) > caps.MaxRdAtom {
		return cur, fmt.Errorf("%w: max rd atomic %d > device limit %d", ErrInvalidArgument, attr.MaxQPRdAtomic, caps.MaxRdAtom)
	}
	return next, nil
}

var maskNames = []struct {
	bit  AttrMask
	name string
}{
	{AttrState, "State"}, {AttrAccessFlags, "AccessFlags"}, {AttrPKeyIndex, "PKeyIndex"}, {AttrPort, "Port"},
	{AttrAV, "AV"}, {AttrPathMTU, "PathMTU"}, {AttrTimeout, "Timeout"}, {AttrRetryCnt, "RetryCnt"},
	{AttrRNRRetry, "RNRRetry"}, {AttrRQPSN, "RQPSN"}, {AttrMaxQPRdAtomic, "MaxQPRdAtomic"},
	{AttrMinRNRTimer, "MinRNRTimer"}, {AttrSQPSN, "SQPSN"}, {AttrMaxDestRdAtomic, "MaxDestRdAtomic"},
	{AttrDestQPN, "DestQPN"},
}

func (m AttrMask) String() string {
	s := ""
	for _, n := range maskNames {
		if m&n.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += n.name
			m &^= n.bit
		}
	}
	if m != 0 {
		if s != "" {
			s += "|"
		}
		s += fmt.Sprintf("%#x", uint32(m))
	}
	if s == "" {
		return "none"
	}
	return s
}

// TimeoutDuration is the local ACK timeout an IBTA timeout code stands for:
// 4.096 µs << code, or 0 (wait forever) for code 0.
func TimeoutDuration(code uint8) time.Duration {
	if code == 0 {
		return 0
	}
	if code > 31 {
		code = 31
	}
	return time.Duration(4096<<code) * time.Nanosecond
}

// rnrTimerMicros is the IBTA min_rnr_timer table in microseconds; code 0 is 655.36 ms.
var rnrTimerMicros = [32]int64{
	655360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920,
	2560, 3840, 5120, 7680, 10240, 15360, 20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
}

// RNRTimerDuration is the delay an IBTA min_rnr_timer code asks a requester to wait
// before it retries after a receiver-not-ready NAK.
func RNRTimerDuration(code uint8) time.Duration {
	return time.Duration(rnrTimerMicros[code&31]) * time.Microsecond
}

// ConnectOptions are the attributes Connect passes through INIT, RTR and RTS.
type ConnectOptions struct {
	Access          Access // inbound remote operations accepted
	PathMTU         MTU
	MinRNRTimer     uint8
	MaxDestRdAtomic uint8
	MaxQPRdAtomic   uint8
	Timeout         uint8
	RetryCnt        uint8
	RNRRetry        uint8
}

// DefaultConnectOptions accepts every remote operation, uses a 1024-byte MTU
// (what RoCE on a 1500-byte link allows), a 0.64 ms RNR timer with infinite
// RNR retry, and a 67 ms ACK timeout retried 7 times, so a silent peer fails
// work with RETRY_EXC_ERR after about half a second.
func DefaultConnectOptions() ConnectOptions {
	return ConnectOptions{
		Access:          remoteAccess,
		PathMTU:         MTU1024,
		MinRNRTimer:     12,
		MaxDestRdAtomic: 1,
		MaxQPRdAtomic:   1,
		Timeout:         14,
		RetryCnt:        7,
		RNRRetry:        7,
	}
}

// Connect moves qp from RESET (or INIT, if receives were posted there)
// through INIT and RTR to RTS, connected to the queue pair whose address is
// remote. Both sides call it, each with the other's address.
func Connect(qp QP, remote []byte, o ConnectOptions) error {
	steps := []struct {
		attr QPAttr
		mask AttrMask
	}{
		{QPAttr{State: QPInit, Port: 1, AccessFlags: o.Access}, AttrState | AttrPKeyIndex | AttrPort | AttrAccessFlags},
		{QPAttr{State: QPRTR, Remote: remote, PathMTU: o.PathMTU, MaxDestRdAtomic: o.MaxDestRdAtomic, MinRNRTimer: o.MinRNRTimer},
			AttrState | AttrAV | AttrPathMTU | AttrDestQPN | AttrRQPSN | AttrMaxDestRdAtomic | AttrMinRNRTimer},
		{QPAttr{State: QPRTS, SQPSN: qp.PSN(), Timeout: o.Timeout, RetryCnt: o.RetryCnt, RNRRetry: o.RNRRetry, MaxQPRdAtomic: o.MaxQPRdAtomic},
			AttrState | AttrSQPSN | AttrTimeout | AttrRetryCnt | AttrRNRRetry | AttrMaxQPRdAtomic},
	}
	for i := range steps {
		if steps[i].attr.State <= qp.State() && qp.State() <= QPRTS {
			continue
		}
		if err := qp.Modify(&steps[i].attr, steps[i].mask); err != nil {
			return err
		}
	}
	return nil
}

// SGEOf is the scatter/gather element for n bytes at offset off of mr.
func SGEOf(mr MR, off, n int) SGE {
	return SGE{Addr: mr.Addr() + uint64(off), Length: uint32(n), LKey: mr.LKey()}
}
