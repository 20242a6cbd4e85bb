// Package shm is the shared-memory verbs provider: reliable-connected queue
// pairs between ranks on one host (one kernel, one network namespace), as
// processes or as goroutines of one process.
//
//	dev, err := shm.Open(ctx, shm.Options{DeviceOptions: verbs.DeviceOptions{Token: secret}})
//	if err != nil { ... }
//	defer dev.Close()
//	pd, _ := dev.AllocPD()
//	cq, _ := dev.CreateCQ(256)
//	mr, _ := pd.AllocMR(1<<20, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
//	qp, _ := pd.CreateQP(verbs.QPInitAttr{SendCQ: cq, RecvCQ: cq,
//		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 1, MaxRecvSGE: 1}})
//	// exchange qp.Address() with the peer out of band, then:
//	err = verbs.Connect(qp, peerAddr, verbs.DefaultConnectOptions())
//
// Importing the package also registers it as verbs provider "shm", so
// verbs.Open(ctx, "shm", opts) works too.
//
// # How it works
//
// Each device owns one memfd: a header, CQ doorbells, a table of
// memory-region descriptors and a sparse heap holding every
// provider-allocated MR and every queue pair's receive ring. A queue pair
// moving to RTR dials its peer device's abstract Unix socket (no file;
// per network namespace), both sides check SO_PEERCRED (same uid, the
// advertised pid) and prove knowledge of the job token (HMAC challenges),
// and the peer's memfd arrives by SCM_RIGHTS and is mapped. From then on
// the initiator does everything itself, in PostSend: it checks the rkey,
// range, PD and access in the peer's descriptor table, copies into or out
// of the peer's mapped memory, runs atomics as CPU atomics on the mapped
// word, and for SEND and WRITE_WITH_IMM takes the peer's posted receive
// from its ring, places the data and publishes the receive completion with
// a release store after the data. The target's CPU does nothing; its poll
// finds the completion in its own ring. Memory the caller registered
// (RegMR of a Go slice) is reached directly by a peer in the same process,
// by cross-memory attach (process_vm_readv/writev) from another process
// where the kernel permits, and otherwise through the owner's device (the
// copy path); QP.UserMemPath says which a connection uses.
//
// CQ.Wait spins for Options.SpinDuration, then yields the core with
// sched_yield for Options.YieldDuration, then sleeps on a futex in the CQ's
// doorbell, which producers ring only when someone sleeps. WaitSleep (the
// background waiter's) parks on the CQ's datagram socket in Go's network
// poller instead, so that a GOMAXPROCS=1 process keeps its only P while
// it sleeps (see park.go). The control
// socket stays open for the life of a connection: its end of file is how a
// dead peer (even one killed by SIGKILL) is noticed within milliseconds;
// outstanding work then fails with RETRY_EXC_ERR and the rest is flushed.
//
// # Same host
//
// HostID is the kernel boot id plus the network-namespace inode. A queue
// pair refuses to connect to an address whose host id differs
// (ErrNotSameHost, wrapping verbs.ErrInvalidArgument); Options.HostID
// overrides the identity a device claims. The p2p layer compares host ids
// (AddressHostID on a peer's address) to choose shm for a peer.
//
// docs/shm.md has the full design, the cleanup guarantees and the numbers.
package shm
