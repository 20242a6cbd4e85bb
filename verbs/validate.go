package verbs

import "fmt"

// ValidateSendWR makes the post-time checks every provider shares (those
// rdma-core's providers make before a request reaches the wire): a known
// opcode, no more SGEs than the QP was granted, inline only for SEND and
// WRITE and within MaxInline, atomics with one 8-byte SGE and an 8-byte
// aligned remote address, and a message no larger than the device allows.
// Key checks are the provider's, since only it knows its regions.
func ValidateSendWR(wr *SendWR, qc QPCap, dc Caps) error {
	if !wr.Opcode.Valid() {
		return fmt.Errorf("%w: unknown opcode %d", ErrInvalidArgument, wr.Opcode)
	}
	if wr.Flags&^(SendFence|SendSignaled|SendSolicited|SendInline|SendReportServed) != 0 {
		return fmt.Errorf("%w: unknown send flags %#x", ErrInvalidArgument, uint8(wr.Flags))
	}
	if wr.Flags&SendReportServed != 0 {
		if wr.Opcode != OpRDMARead {
			return fmt.Errorf("%w: SendReportServed on %v (only RDMA_READ)", ErrInvalidArgument, wr.Opcode)
		}
		if !dc.ReadServed {
			return fmt.Errorf("%w: SendReportServed on a device without Caps.ReadServed", ErrInvalidArgument)
		}
	}
	if wr.Flags&SendInline != 0 {
		switch wr.Opcode {
		case OpSend, OpSendWithImm, OpRDMAWrite, OpRDMAWriteWithImm:
		default:
			return fmt.Errorf("%w: inline is not allowed with %v", ErrInvalidArgument, wr.Opcode)
		}
		if len(wr.SGL) != 0 {
			return fmt.Errorf("%w: inline request with %d SGEs (the payload goes in SendWR.Inline)", ErrInvalidArgument, len(wr.SGL))
		}
		if len(wr.Inline) > qc.MaxInline {
			return fmt.Errorf("%w: %d bytes inline exceed the QP's max inline %d", ErrInvalidArgument, len(wr.Inline), qc.MaxInline)
		}
	} else if len(wr.Inline) != 0 {
		return fmt.Errorf("%w: Inline data without the SendInline flag", ErrInvalidArgument)
	}
	if len(wr.SGL) > qc.MaxSendSGE {
		return fmt.Errorf("%w: %d SGEs exceed the QP's max %d", ErrInvalidArgument, len(wr.SGL), qc.MaxSendSGE)
	}
	if wr.Opcode.IsAtomic() {
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return fmt.Errorf("%w: %v needs exactly one 8-byte SGE", ErrInvalidArgument, wr.Opcode)
		}
		if wr.RemoteAddr&7 != 0 {
			return fmt.Errorf("%w: %v remote address %#x is not 8-byte aligned", ErrInvalidArgument, wr.Opcode, wr.RemoteAddr)
		}
	}
	if n := wr.Len(); n > dc.MaxMsgSize {
		return fmt.Errorf("%w: message of %d bytes exceeds the device's max %d", ErrInvalidArgument, n, dc.MaxMsgSize)
	}
	return nil
}

// ValidateRecvWR checks a receive request's SGE count.
func ValidateRecvWR(wr *RecvWR, qc QPCap) error {
	if len(wr.SGL) > qc.MaxRecvSGE {
		return fmt.Errorf("%w: %d SGEs exceed the QP's max receive SGEs %d", ErrInvalidArgument, len(wr.SGL), qc.MaxRecvSGE)
	}
	return nil
}
