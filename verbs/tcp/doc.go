// Package tcp is the verbs provider every machine has: software RC over
// TCP, between processes and hosts. It runs the same RC engine as the loop
// provider (verbs/internal/softrc); a target's progress goroutine executes
// RDMA WRITE, READ and atomics against its own memory-region table without
// the target application, and a WRITE's payload is read from the socket
// straight into the registered memory.
//
//	dev, err := tcp.Open(ctx, tcp.Options{Listen: "0.0.0.0:0", Advertise: myIP, Token: secret})
//	if err != nil { ... }
//	defer dev.Close()
//	// PDs, CQs, QPs as with any verbs.Device; exchange QP.Address() out of
//	// band, then verbs.Connect(qp, peerAddr, verbs.DefaultConnectOptions()).
//
// or verbs.Open(ctx, "tcp", verbs.DeviceOptions{...}) after importing it.
//
// Each connected QP pair has one TCP connection (TCP_NODELAY), dialed in the
// background by the end whose advertised address and QP number sort first,
// so Modify never blocks; posted work waits for the connection and fails
// with RETRY_EXC_ERR if it is not up within ConnectTimeout. Both ends prove
// knowledge of the job token by a mutual HMAC-SHA256 challenge-response
// before any frame is acted on; a client that cannot is dropped and logged
// while the device keeps serving the others. The handshake and frame format
// are in docs/wire-tcp.md; a malformed frame closes its connection with an
// error, which fails that QP's work with RETRY_EXC_ERR.
package tcp
