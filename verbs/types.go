package verbs

import "fmt"

// Access is a memory region's or a queue pair's access flags. The values are
// those of ibv_access_flags, so the ibv provider passes them through.
type Access uint32

const (
	AccessLocalWrite   Access = 1 << 0 // the local NIC may write (RECV, READ and atomic results)
	AccessRemoteWrite  Access = 1 << 1 // peers may RDMA WRITE into it
	AccessRemoteRead   Access = 1 << 2 // peers may RDMA READ from it
	AccessRemoteAtomic Access = 1 << 3 // peers may run atomics on it
)

// Validate reports whether a is a legal combination for a memory region:
// remote write or atomic access without local write is refused, as rdma-core does.
func (a Access) Validate() error {
	if a&^(AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic) != 0 {
		return fmt.Errorf("%w: unknown access bits %#x", ErrInvalidArgument, uint32(a))
	}
	if a&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && a&AccessLocalWrite == 0 {
		return fmt.Errorf("%w: access %v: remote write or atomic requires LocalWrite", ErrInvalidArgument, a)
	}
	return nil
}

func (a Access) String() string {
	if a == 0 {
		return "none"
	}
	s := ""
	for _, f := range []struct {
		bit  Access
		name string
	}{{AccessLocalWrite, "LocalWrite"}, {AccessRemoteWrite, "RemoteWrite"}, {AccessRemoteRead, "RemoteRead"}, {AccessRemoteAtomic, "RemoteAtomic"}} {
		if a&f.bit != 0 {
			if s != "" {
				s += "|"
			}
			s += f.name
		}
	}
	if rest := a &^ (AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic); rest != 0 {
		s += fmt.Sprintf("|%#x", uint32(rest))
	}
	return s
}

// Opcode is a send work request's operation. Values match ibv_wr_opcode.
type Opcode uint8

const (
	OpRDMAWrite        Opcode = 0
	OpRDMAWriteWithImm Opcode = 1
	OpSend             Opcode = 2
	OpSendWithImm      Opcode = 3
	OpRDMARead         Opcode = 4
	OpAtomicCmpAndSwp  Opcode = 5
	OpAtomicFetchAdd   Opcode = 6
)

var opcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ", "ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD"}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return fmt.Sprintf("Opcode(%d)", uint8(o))
}

// Valid reports whether o is one of the seven RC opcodes.
func (o Opcode) Valid() bool { return o <= OpAtomicFetchAdd }

// IsAtomic reports whether o is an 8-byte atomic.
func (o Opcode) IsAtomic() bool { return o == OpAtomicCmpAndSwp || o == OpAtomicFetchAdd }

// HasImm reports whether o carries immediate data.
func (o Opcode) HasImm() bool { return o == OpRDMAWriteWithImm || o == OpSendWithImm }

// IsRDMA reports whether o targets a remote address and rkey (writes, reads, atomics).
func (o Opcode) IsRDMA() bool { return o != OpSend && o != OpSendWithImm }

// ConsumesRecv reports whether o consumes a receive work request at the target.
func (o Opcode) ConsumesRecv() bool {
	return o == OpSend || o == OpSendWithImm || o == OpRDMAWriteWithImm
}

// WCOpcode is the operation a work completion reports. Values match ibv_wc_opcode.
type WCOpcode uint8

const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
	// WCReadServed is a responder's report that it has handed the whole
	// response to a READ posted with SendReportServed to its transport
	// (Caps.ReadServed): ID is the READ's tag, ByteLen its length. Not an
	// ibv_wc_opcode value.
	WCReadServed WCOpcode = 192
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	case WCReadServed:
		return "READ_SERVED"
	}
	return fmt.Sprintf("WCOpcode(%d)", uint8(o))
}

// WCOpcodeFor is the completion opcode the requester sees for a send opcode.
func WCOpcodeFor(o Opcode) WCOpcode {
	switch o {
	case OpRDMAWrite, OpRDMAWriteWithImm:
		return WCRDMAWrite
	case OpRDMARead:
		return WCRDMARead
	case OpAtomicCmpAndSwp:
		return WCCompSwap
	case OpAtomicFetchAdd:
		return WCFetchAdd
	}
	return WCSend
}

// Status is a work completion's status. Names and values follow ibv_wc_status.
type Status uint8

const (
	StatusSuccess        Status = 0
	StatusLocLenErr      Status = 1
	StatusLocQPOpErr     Status = 2
	StatusLocProtErr     Status = 4
	StatusWRFlushErr     Status = 5
	StatusBadRespErr     Status = 7
	StatusLocAccessErr   Status = 8
	StatusRemInvReqErr   Status = 9
	StatusRemAccessErr   Status = 10
	StatusRemOpErr       Status = 11
	StatusRetryExcErr    Status = 12
	StatusRNRRetryExcErr Status = 13
	StatusFatalErr       Status = 19
	StatusRespTimeoutErr Status = 20
	StatusGeneralErr     Status = 21
)

var statusNames = map[Status]string{
	StatusSuccess:        "SUCCESS",
	StatusLocLenErr:      "LOC_LEN_ERR",
	StatusLocQPOpErr:     "LOC_QP_OP_ERR",
	StatusLocProtErr:     "LOC_PROT_ERR",
	StatusWRFlushErr:     "WR_FLUSH_ERR",
	StatusBadRespErr:     "BAD_RESP_ERR",
	StatusLocAccessErr:   "LOC_ACCESS_ERR",
	StatusRemInvReqErr:   "REM_INV_REQ_ERR",
	StatusRemAccessErr:   "REM_ACCESS_ERR",
	StatusRemOpErr:       "REM_OP_ERR",
	StatusRetryExcErr:    "RETRY_EXC_ERR",
	StatusRNRRetryExcErr: "RNR_RETRY_EXC_ERR",
	StatusFatalErr:       "FATAL_ERR",
	StatusRespTimeoutErr: "RESP_TIMEOUT_ERR",
	StatusGeneralErr:     "GENERAL_ERR",
}

func (s Status) String() string {
	if n, ok := statusNames[s]; ok {
		return n
	}
	return fmt.Sprintf("Status(%d)", uint8(s))
}

// SendFlags modify a send work request. Values match ibv_send_flags.
type SendFlags uint8

const (
	SendFence     SendFlags = 1 << 0 // wait for earlier READs and atomics on this QP first
	SendSignaled  SendFlags = 1 << 1 // produce a completion on success too
	SendSolicited SendFlags = 1 << 2 // set the solicited-event bit
	SendInline    SendFlags = 1 << 3 // payload is SendWR.Inline, copied at post time
	// SendReportServed, on an RDMA READ to a device whose Caps.ReadServed
	// holds, asks the responder's queue pair to report its response written
	// (see Caps.ReadServed); CompareAdd is the tag it reports. Not an
	// ibv_send_flags value: a software provider's extension.
	SendReportServed SendFlags = 1 << 6
)

// WCFlags describe a work completion. Values match ibv_wc_flags.
type WCFlags uint8

const (
	WCWithImm WCFlags = 1 << 1 // WC.Imm is valid
)

// QPState is a queue pair's state. Values match ibv_qp_state.
type QPState uint8

const (
	QPReset QPState = 0
	QPInit  QPState = 1
	QPRTR   QPState = 2
	QPRTS   QPState = 3
	QPSQD   QPState = 4
	QPSQE   QPState = 5
	QPErr   QPState = 6
)

func (s QPState) String() string {
	switch s {
	case QPReset:
		return "RESET"
	case QPInit:
		return "INIT"
	case QPRTR:
		return "RTR"
	case QPRTS:
		return "RTS"
	case QPSQD:
		return "SQD"
	case QPSQE:
		return "SQE"
	case QPErr:
		return "ERR"
	}
	return fmt.Sprintf("QPState(%d)", uint8(s))
}

// AttrMask says which fields of a QPAttr a Modify call sets. Bit values match
// ibv_qp_attr_mask.
type AttrMask uint32

const (
	AttrState           AttrMask = 1 << 0
	AttrAccessFlags     AttrMask = 1 << 3
	AttrPKeyIndex       AttrMask = 1 << 4
	AttrPort            AttrMask = 1 << 5
	AttrAV              AttrMask = 1 << 7
	AttrPathMTU         AttrMask = 1 << 8
	AttrTimeout         AttrMask = 1 << 9
	AttrRetryCnt        AttrMask = 1 << 10
	AttrRNRRetry        AttrMask = 1 << 11
	AttrRQPSN           AttrMask = 1 << 12
	AttrMaxQPRdAtomic   AttrMask = 1 << 13
	AttrMinRNRTimer     AttrMask = 1 << 15
	AttrSQPSN           AttrMask = 1 << 16
	AttrMaxDestRdAtomic AttrMask = 1 << 17
	AttrDestQPN         AttrMask = 1 << 20
)

// MTU is a path MTU code as in ibv_mtu: 1=256 ... 5=4096 bytes.
type MTU uint8

const (
	MTU256  MTU = 1
	MTU512  MTU = 2
	MTU1024 MTU = 3
	MTU2048 MTU = 4
	MTU4096 MTU = 5
)

// Bytes is the MTU in bytes, or 0 for an invalid code.
func (m MTU) Bytes() int {
	if m < MTU256 || m > MTU4096 {
		return 0
	}
	return 128 << m
}

// AtomicCap says how a device's atomics relate to other memory accesses, as
// ibv_atomic_cap does.
type AtomicCap uint8

const (
	AtomicNone AtomicCap = 0 // no atomics
	AtomicHCA  AtomicCap = 1 // atomic only against other atomics through the same device
	AtomicGlob AtomicCap = 2 // atomic against every access, CPU stores included
)

// MemKind says who allocated a memory region's memory.
type MemKind uint8

const (
	// MemProvider memory was allocated by the provider (off the Go heap) and
	// supports every operation, atomics included.
	MemProvider MemKind = iota + 1
	// MemUser memory is an ordinary Go slice the caller registered. It stays
	// pinned and alive while registered; MR.SupportsAtomics says whether
	// remote atomics may target it.
	MemUser
)

func (k MemKind) String() string {
	switch k {
	case MemProvider:
		return "provider"
	case MemUser:
		return "user"
	}
	return fmt.Sprintf("MemKind(%d)", uint8(k))
}
