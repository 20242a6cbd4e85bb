// Package softrc is the software RC engine the loop and tcp providers share,
// so that both behave identically: the verbs object model (device, PD, MR
// table with random lkeys and rkeys, CQ, QP state machine), post-time
// checks, the requester (posting order, FENCE, max_rd_atomic, RNR back-off
// and go-back), the responder (rxe's check order: sequence, opcode against
// the QP's access flags, responder resources and receive, length, rkey; then
// direct placement into the registered region) and the completer (in-order
// completions, unsignaled slot accounting, flush on ERR, RETRY_EXC_ERR on a
// lost link or a silent peer).
//
// A provider supplies a Transport that connects queue pairs and a Link per
// connected QP; the Link pulls requests with QP.NextRequest, delivers them
// to the peer's QP.HandleRequest, and feeds the answers to QP.HandleResponse:
//
//	dev := softrc.NewDevice(softrc.Config{Provider: "tcp", Caps: softrc.DefaultCaps()}, transport)
//	// on the link's writer:   for q.NextRequest(&r) { write(r.Header, r.Data); r.Done() }
//	// on the link's reader:   q.HandleRequest(&h, payload, &resp) / q.HandleResponse(&h, payload)
//
// A Link that is also a Driver lets CQ.Wait read and handle the link's
// frames on the waiting goroutine when the CQ's completions come from that
// one link (see Driver), saving the hand-off from the link's goroutine.
//
// The wire vocabulary (FrameOp, Header, NAK syndromes) follows IBTA names so
// that behaviour maps 1:1 to rxe; the byte layout is each transport's own
// (docs/wire-tcp.md for tcp).
package softrc
