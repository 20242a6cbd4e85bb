//go:build linux && cgo && rdma

package ibv

// Go twins of the flat C descriptors in ibv_cgo.go; init there checks that
// the layouts agree. The Go side fills them in C memory (or passes a Go
// value without pointers for the duration of one call), and a short C loop
// turns them into libibverbs structures.

type sendDesc struct {
	wrID, remoteAddr, compareAdd, swap  uint64
	rkey, sgeOff, numSGE, opcode, flags uint32
	imm                                 [4]byte // big-endian, as ibv_send_wr.imm_data
}

type recvDesc struct {
	wrID           uint64
	sgeOff, numSGE uint32
}

// sgeDesc is struct ibv_sge.
type sgeDesc struct {
	addr   uint64
	length uint32
	lkey   uint32
}

type wcDesc struct {
	wrID                                                      uint64
	status, opcode, vendorErr, byteLen, qpNum, srcQP, wcFlags uint32
	imm                                                       [4]byte
}

type qpAttrDesc struct {
	state, access, pkeyIndex, port, pathMTU, destQPN, rqPSN, sqPSN uint32
	dgid                                                           [16]byte
	dlid                                                           uint16
	minRNRTimer, maxDestRdAtomic, maxRdAtomic, timeout, retryCnt, rnrRetry,
	isGlobal, sgidIndex, hopLimit, pad uint8
}

type capDesc struct {
	maxSendWR, maxRecvWR, maxSendSGE, maxRecvSGE, maxInline uint32
}

type devAttr struct {
	maxMRSize, nodeGUID                                          uint64
	maxQP, maxQPWR, maxSGE, maxCQE, maxQPRdAtom, maxQPInitRdAtom uint32
	atomicCap, vendorID, physPortCnt                             uint32
}

type portAttr struct {
	maxMsgSz, gidTblLen, lid                                      uint32
	state, maxMTU, activeMTU, linkLayer, activeWidth, activeSpeed uint8
	pad                                                           [2]uint8
}

type gidDesc struct {
	gid        [16]byte
	index, typ uint32
}

const portActive = 4 // IBV_PORT_ACTIVE
