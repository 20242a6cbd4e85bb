// Package loop is the in-process verbs provider: devices in one process
// reach each other through a process-wide table, and a request is executed
// by the peer's responder directly in the requester's goroutine, with one
// copy from the source buffer into the target region. It runs the same
// software RC engine as the tcp provider (verbs/internal/softrc), so both
// behave identically: same checks, same statuses, same ordering. It is the
// fast reference for unit tests and in-process multi-rank harnesses.
//
//	a, _ := loop.Open(ctx, loop.Options{})
//	b, _ := loop.Open(ctx, loop.Options{})
//	// ... PDs, CQs, QPs on each ...
//	_ = verbs.Connect(qa, qb.Address(), verbs.DefaultConnectOptions())
//	_ = verbs.Connect(qb, qa.Address(), verbs.DefaultConnectOptions())
//
// or, by name: verbs.Open(ctx, "loop", verbs.DeviceOptions{}) after
// importing the package. A QP's address payload is the 8-byte device id.
package loop
