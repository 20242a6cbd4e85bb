//go:build linux

package shm

// The shared-memory layout. Each device owns one memfd, mapped by itself and
// by every device that connects a queue pair to it:
//
//	0        header (4 KiB): magic, version, pid, device id, table offsets
//	cqOff    maxCQ doorbells of 64 bytes: {seq u32 (futex word), waiters u32,
//	         parked u32 (sleepers on the CQ's parking socket, park.go),
//	         woken u32 (a wake-up datagram is on its way)}
//	mrOff    maxMR memory-region descriptors of 64 bytes (below)
//	heapOff  the heap: queue-pair segments and provider memory regions,
//	         page-granular, sparse (pages exist once touched)
//
// An MR descriptor is {key u32, access u32, pd u32, kind u32, addr u64,
// len u64, off u64}. key is the region's current rkey (= lkey) or 0 when
// the slot is free; the owner writes the other fields before it stores key
// and clears key before it reuses the slot, so a reader that sees the same
// key before and after reading the fields has a consistent descriptor.
//
// A queue-pair segment (allocated from the heap) is:
//
//	0    header line, written by the owner: qpn, state, access flags, pd,
//	     max dest rd atomic, recv CQ doorbell index, RQ depth, RQ SGEs,
//	     descriptor size, min RNR timer, magic, and (48) the smallest
//	     receive ever posted, in bytes (0: unknown), which only shrinks
//	64   rqHead u64: receive requests posted (owner stores, release)
//	128  rqClaim u64: receive requests taken by the peer's sender (CAS);
//	     bit 63 closes the queue (the QP went to ERR)
//	192  remoteErr u32: set by the peer when its request put this QP in ERR
//	256  RQ descriptors, depth × descSize: {nsge u32, _, wrID u64,
//	     sge[nsge]{addr u64, len u32, lkey u32}}, written by the owner
//	     and read by the peer's sender for a SEND only
//	...  RQ completions (64-byte aligned), depth × 64 bytes: {seq u32,
//	     byteLen u32, imm u32, status u8, opcode u8, flags u8, inline u8,
//	     data [48]byte}
//
// The owner fills a descriptor, then publishes rqHead. The sender claims
// the entry, moves the data, fills the completion's fields and stores seq =
// index+1 last: that store is the completion (release after the data), and
// the owner's poll loads it (acquire) before it reads anything else. The
// completions sit apart from the descriptors so that a WRITE_WITH_IMM
// touches only lines the owner merely reads: one cache-line transfer per
// message on the critical path, as in a bare flag ping-pong.
//
// A SEND of up to rcInlineMax bytes leaves its data in the completion's own
// line (inline = 1) instead of the receive's buffer, and the owner copies
// it there when it polls the completion: the sender then writes one line
// of the owner's memory instead of two (the buffer's and the completion's),
// and the owner reads the data from the line it had to fetch anyway. The
// sender must know that the data fits (an IB SEND too large for its
// receive fails on both sides): when it is no larger than the smallest
// receive the owner ever posted (header, stored before the head that
// publishes the receive), it does; otherwise it reads the receive's
// descriptor, a line the owner wrote when it posted.
const (
	segMagic   = 0x4d48534f4741_4452 // "RDAGOSHM", roughly
	segVersion = 3                   // 2: 64-byte completions with inline data; 3: parked count

	hdrMagic     = 0
	hdrVersion   = 8
	hdrPID       = 12
	hdrDevID     = 16
	hdrSize      = 24
	hdrCQOff     = 32
	hdrMaxCQ     = 40
	hdrMROff     = 48
	hdrMaxMR     = 56
	devHeaderLen = 4096

	maxCQ   = 1024
	maxMR   = 16384
	dbSize  = 64
	mrdSize = 64

	cqOff   = devHeaderLen
	mrOff   = cqOff + maxCQ*dbSize
	heapOff = 2 << 20

	// MR descriptor fields.
	mrdKey    = 0
	mrdAccess = 4
	mrdPD     = 8
	mrdKind   = 12
	mrdAddr   = 16
	mrdLen    = 24
	mrdOff    = 32

	// QP segment fields.
	qsQPN       = 0
	qsState     = 4
	qsAccess    = 8
	qsPD        = 12
	qsMaxDestRd = 16
	qsRecvCQ    = 20
	qsDepth     = 24
	qsNSGE      = 28
	qsEntrySize = 32
	qsMinRNR    = 36
	qsMagic     = 40
	qsMinRecv   = 48
	qsHead      = 64
	qsClaim     = 128
	qsRemoteErr = 192
	qsEntries   = 256

	claimClosed = uint64(1) << 63

	// RQ descriptor fields.
	rdNSGE  = 0
	rdWRID  = 8
	rdSGEs  = 16
	sgeSize = 16

	// RQ completion fields.
	rcSeq     = 0
	rcByteLen = 4
	rcImm     = 8
	rcStatus  = 12
	rcOpcode  = 13
	rcFlags   = 14
	rcInline  = 15 // 1: the data is at rcData, for the owner to copy out
	rcData    = 16
	rcSize    = 64

	// rcInlineMax is the largest SEND whose data travels in its completion.
	rcInlineMax = rcSize - rcData
)

// Memory-region kinds in descriptors.
const (
	kindProvider = 1
	kindUser     = 2
)

func descSizeFor(nsge int) int { return rdSGEs + sgeSize*nsge }

// cqeOffset is where the completions start in a segment.
func cqeOffset(depth, dsz uint64) uint64 { return (qsEntries + depth*dsz + 63) &^ 63 }

// segSize is the bytes a QP segment with this ring needs.
func segSize(depth, dsz uint64) uint64 { return cqeOffset(depth, dsz) + depth*rcSize }

func roundPage(n uint64) uint64 { return (n + 4095) &^ 4095 }
