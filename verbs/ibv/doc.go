// Package ibv is the verbs provider for real RDMA hardware: InfiniBand and
// RoCE NICs (and Linux's Soft-RoCE, rdma_rxe) through rdma-core's
// libibverbs, via cgo.
//
//	import _ "github.com/rdmago/rdmago/verbs/ibv" // go build -tags rdma
//
//	dev, err := verbs.Open(ctx, "ibv", verbs.DeviceOptions{Name: "mlx5_0"}) // or "rxe0:1", "mlx5_0:1:3"
//	if errors.Is(err, verbs.ErrUnavailable) { ... } // no tag, no device, no active port
//	defer dev.Close()
//
// or, with explicit port and GID selection:
//
//	dev, err := ibv.Open(ctx, verbs.DeviceOptions{Name: "rxe0"}, ibv.Options{Port: 1, GID: ibv.GIDIndex(1)})
//
// The real provider is built only with the rdma build tag on linux with cgo;
// otherwise a stub registers the same name and its Open fails with
// verbs.ErrUnavailable, so the default build needs neither a C toolchain
// nor rdma-core.
//
// # Selection
//
// A device is bound to one port and one source GID at Open. The port is
// the first active one unless given; the GID is found by querying the
// port's GID table (ibv_query_gid_table): on RoCE the RoCE v2 entry of an
// IPv4 address, else a global IPv6 one; on InfiniBand the port GID. No GID
// index is ever assumed. QPAttr.Port 1 means the bound port.
//
// # How verbs map onto libibverbs
//
// Everything the software providers check at post time is checked here
// too, in Go and before the device sees the request (verbs.ValidateSendWR,
// lkeys against the regions this provider registered, queue depth), so
// post-time errors are identical across providers. Requests are built as
// chains in C memory and posted with one cgo call per batch of up to 32;
// completions are polled in batches of 64. Immediate data is converted
// from network order. Queue pairs use a GRH on RoCE (and on InfiniBand when
// the peer has no LID), and the path MTU is clamped to both ports' active
// MTU. The QP address payload is documented on Endpoint.
//
// CQ.Wait parks the goroutine in Go's netpoller on the completion
// channel's non-blocking fd; no goroutine ever blocks inside C.
//
// AllocMR memory comes from mmap, off the Go heap. RegMR pins the caller's
// slice with runtime.Pinner until MR.Close. Both count against the
// locked-memory limit (ulimit -l) unless the process has CAP_IPC_LOCK.
//
// QP.Close moves the QP to ERR, waits until the device has completed
// everything outstanding with WR_FLUSH_ERR (those completions stay in the
// CQ for the caller), and destroys it.
//
// verbs.Disconnector is not implemented: real RC has no faithful way to
// simulate the loss of a link.
package ibv
