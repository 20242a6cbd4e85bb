package ibv

import "github.com/rdmago/rdmago/verbs"

// statusOf maps an ibv_wc_status to the status the software providers
// report. The values verbs defines are ibv's own numbers and pass through;
// the rest name things an RC QP without memory windows, RD or tag matching
// cannot produce, and are reported as GENERAL_ERR (VendorErr keeps the
// device's detail).
func statusOf(s uint32) verbs.Status {
	if s > 255 {
		return verbs.StatusGeneralErr
	}
	switch st := verbs.Status(s); st {
	case verbs.StatusSuccess, verbs.StatusLocLenErr, verbs.StatusLocQPOpErr, verbs.StatusLocProtErr,
		verbs.StatusWRFlushErr, verbs.StatusBadRespErr, verbs.StatusLocAccessErr, verbs.StatusRemInvReqErr,
		verbs.StatusRemAccessErr, verbs.StatusRemOpErr, verbs.StatusRetryExcErr, verbs.StatusRNRRetryExcErr,
		verbs.StatusFatalErr, verbs.StatusRespTimeoutErr, verbs.StatusGeneralErr:
		return st
	}
	return verbs.StatusGeneralErr
}

// bandwidth estimates a port's data rate in bytes per second from its
// active width and speed codes (ibv_port_attr), 0 when unknown.
func bandwidth(width, speed uint8) float64 {
	lanes := map[uint8]float64{1: 1, 2: 4, 4: 8, 8: 12, 16: 2}[width]
	gbps := map[uint8]float64{1: 2.5, 2: 5, 4: 10, 8: 10, 16: 14, 32: 25, 64: 50, 128: 100}[speed]
	return lanes * gbps * 1e9 / 8
}
