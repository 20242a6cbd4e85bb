package verbs

// SGE is one scatter/gather element: Length bytes at virtual address Addr
// inside the memory region whose local key is LKey. Addresses are virtual
// addresses as in ibv_sge; MR.Addr gives a region's base.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// SendWR is a send-queue work request (ibv_send_wr).
//
// Imm is the 32-bit immediate value for the *_WITH_IMM opcodes, in host
// order: providers carry it big-endian on the wire, as IBTA does, and the
// receiver's WC.Imm holds the same value.
//
// With SendInline, Inline is the payload, copied at post time (so the caller
// may reuse it as soon as PostSend returns), no lkey is checked, SGL must be
// empty and len(Inline) must not exceed the QP's MaxInline. Inline is valid
// for SEND and RDMA WRITE (with or without immediate) only.
//
// For RDMA opcodes RemoteAddr and RKey name the target memory. For atomics
// SGL is one 8-byte element that receives the original value, RemoteAddr is
// 8-byte aligned, CompareAdd is the compare value (CAS) or the addend (FAA),
// and Swap is the value CAS stores when the comparison holds.
type SendWR struct {
	ID         uint64
	Opcode     Opcode
	Flags      SendFlags
	SGL        []SGE
	Inline     []byte
	Imm        uint32
	RemoteAddr uint64
	RKey       uint32
	CompareAdd uint64
	Swap       uint64
}

// Len is the total payload length of the request.
func (wr *SendWR) Len() uint64 {
	if wr.Flags&SendInline != 0 {
		return uint64(len(wr.Inline))
	}
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Length)
	}
	return n
}

// RecvWR is a receive-queue work request (ibv_recv_wr). An RDMA
// WRITE_WITH_IMM consumes one too; it may have no SGEs.
type RecvWR struct {
	ID  uint64
	SGL []SGE
}

// Len is the total buffer length of the request.
func (wr *RecvWR) Len() uint64 {
	var n uint64
	for _, s := range wr.SGL {
		n += uint64(s.Length)
	}
	return n
}

// WC is a work completion (ibv_wc). When Status is not StatusSuccess only
// ID, Status, QPNum and VendorErr are meaningful: track requests by ID.
type WC struct {
	ID        uint64
	Status    Status
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32
	Imm       uint32 // valid when Flags has WCWithImm; host order
	Flags     WCFlags
	QPNum     uint32
	SrcQP     uint32
}

// Err is nil for a successful completion and a *StatusError otherwise.
func (wc *WC) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return &StatusError{Status: wc.Status, WRID: wc.ID, QPNum: wc.QPNum, VendorErr: wc.VendorErr}
}

// QPCap sizes a queue pair. A provider may grant more than asked; QP.Cap
// reports what was granted.
type QPCap struct {
	MaxSendWR  int
	MaxRecvWR  int
	MaxSendSGE int
	MaxRecvSGE int
	MaxInline  int
}

// QPInitAttr creates an RC queue pair (ibv_qp_init_attr).
type QPInitAttr struct {
	SendCQ CQ
	RecvCQ CQ
	Cap    QPCap
	// SigAll makes every send request signaled (sq_sig_all).
	SigAll bool
}

// QPAttr holds the attributes of a Modify call; the AttrMask passed with it
// says which fields count (ibv_qp_attr).
//
// Remote is the peer queue pair's address as its QP.Address returned it. It
// stands for the address vector, the destination QP number and the receive
// PSN together (AttrAV, AttrDestQPN and AttrRQPSN): the address carries all
// three, so a Modify to RTR sets those three bits and passes Remote.
type QPAttr struct {
	State           QPState
	AccessFlags     Access // inbound remote operations the QP accepts
	PKeyIndex       uint16
	Port            uint8
	PathMTU         MTU
	Remote          []byte
	MinRNRTimer     uint8 // IBTA code 0..31, see RNRTimerDuration
	MaxDestRdAtomic uint8 // responder resources for inbound READ / atomics
	SQPSN           uint32
	MaxQPRdAtomic   uint8 // outstanding READ / atomics this QP may issue
	Timeout         uint8 // IBTA code: 0 = infinite, else 4.096 µs << Timeout
	RetryCnt        uint8 // 0..7
	RNRRetry        uint8 // 0..7; 7 = retry forever
}
