// Package verbs is rdmago's provider-neutral model of RDMA verbs, after
// rdma-core's libibverbs and the RDMA Aware Networks Programming User Manual:
// devices, protection domains, memory regions with lkeys and rkeys,
// completion queues, and reliable-connected queue pairs with their
// RESET→INIT→RTR→RTS→ERR state machine, SEND/RECV, RDMA WRITE/READ and
// atomics, and ibv-style completion statuses.
//
//	dev, err := verbs.Open(ctx, "tcp", verbs.DeviceOptions{Token: secret})
//	if err != nil { ... }
//	defer dev.Close()
//	pd, _ := dev.AllocPD()
//	cq, _ := dev.CreateCQ(256)
//	mr, _ := pd.AllocMR(1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
//		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
//	// exchange qp.Address() with the peer out of band, then:
//	err = verbs.Connect(qp, peerAddr, verbs.DefaultConnectOptions())
//	err = qp.PostSend(verbs.SendWR{ID: 1, Opcode: verbs.OpRDMAWrite, Flags: verbs.SendSignaled,
//		SGL: []verbs.SGE{verbs.SGEOf(mr, 0, 4096)}, RemoteAddr: peerAddr0, RKey: peerRKey})
//	err = cq.Wait(ctx)
//	var wc [16]verbs.WC
//	n := cq.Poll(wc[:])
//
// Providers live in sub-packages (tcp, shm, ibv, and loop for tests) and
// register themselves by name; importing one makes Open know it. Every
// provider passes the conformance suite in verbs/verbstest.
//
// # Errors
//
// Mistakes caught when a request is posted (bad lkey, too many SGEs, inline
// too long, misaligned atomic, full queue, wrong state) are returned at once
// as a *Error wrapping a sentinel (ErrInvalidArgument, ErrQueueFull, ...).
// Everything that happens later is reported by a work completion's Status;
// an error always produces a completion, even for an unsignaled request, and
// moves the QP to ERR, after which every outstanding and later request
// completes with WR_FLUSH_ERR.
//
// # Ordering
//
// Requests on one QP execute in posting order and complete in posting
// order. A SEND or WRITE_WITH_IMM completing at the target implies every
// earlier WRITE on that QP is visible there; a READ posted after WRITEs
// returns what they wrote. Placement within one message is unordered.
package verbs
