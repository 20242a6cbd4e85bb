// Package verbstest is the conformance suite every verbs provider passes, in
// the spirit of golang.org/x/net/nettest: one function a provider's tests
// call with a way to open its devices.
//
//	func TestConformance(t *testing.T) {
//		verbstest.Run(t, verbstest.Options{
//			Open: func(ctx context.Context) (verbs.Device, error) {
//				return verbs.Open(ctx, "tcp", verbs.DeviceOptions{})
//			},
//			TwoProcess: true, // the provider works across processes
//		})
//	}
//
// Run runs every case as a subtest of t: every opcode with its completion
// fields and immediate data, scatter/gather, zero-length and 64 MiB messages,
// inline and unsignaled requests, the RC ordering rules, FENCE, RNR, every
// completion status a provider can produce with the QP moving to ERR and
// later work flushing, post-time errors with the right *verbs.Error Index,
// the QP state machine, memory-region access rules, 64 queue pairs on one
// device, concurrency (run it with -race), CQ.Wait, teardown with
// outstanding work, and peer loss. Cases that need a capability the device
// lacks (atomics, inline, enough SGEs, Disconnector) skip with the reason.
// Where real hardware and Linux's rxe are documented to differ (a too-small
// receive completes at the responder with LOC_LEN_ERR on hardware and
// REM_INV_REQ_ERR on rxe), the suite accepts each documented variant and
// nothing else. The reference is shared/reference/verbs-semantics.md.
//
// # The contract with a provider
//
// Options.Open must return a new, independent device each time it is
// called; the suite opens several (two for cross-device pairs, more for
// teardown cases) and also connects queue pairs within one device. Devices
// opened by separate Open calls must be able to connect to each other with
// verbs.Connect given each other's QP.Address. Closing an object twice, or
// after its device was closed, returns nil or an error wrapping
// verbs.ErrClosed (the suite's cleanups rely on it).
//
// Every wait is bounded by a context deadline (Options.CaseTimeout per
// case), so a broken provider fails instead of hanging. Connections use
// test timers (Options.Connect, default ShortConnectOptions: ACK timeout
// code 16 ≈ 268 ms with 3 retries, RNR timer code 1 = 10 µs; the peer-loss
// cases use code 12 ≈ 17 ms), so error cases finish in milliseconds; cases
// assert on statuses and error kinds, never on durations. A provider must
// not take a live peer for a dead one under these timers, however long a
// request takes to execute (a 64 MiB WRITE included): real RC acknowledges
// per packet. The whole suite takes about a second on an
// in-process provider.
//
// # Two-process mode
//
// With Options.TwoProcess set, the cross-process cases (under
// "TwoProcess/") re-execute the test binary as the peer: the child runs with
// -test.run selecting exactly the test that called Run and with the
// environment variable RDMAGO_VERBSTEST_PEER naming it. When Run sees that
// variable it does not run the suite; it becomes the peer: it opens its own
// device with the same Options.Open, and serves commands from the parent
// over two pipes (file descriptors 3 and 4; stdout and stderr stay free for
// the test framework). So a provider needs no TestMain: the same test
// function, called in the child, is the peer's entry point. Options.Open
// must therefore not depend on state set up by another test.
//
// The cases: WRITE, READ, SEND with immediate and atomics across processes;
// a waiter blocked in CQ.Wait woken by the other process (both directions);
// and the peer killed with SIGKILL, after which our outstanding and new work
// fails with RETRY_EXC_ERR (then WR_FLUSH_ERR), never hangs. The suite kills
// only the child it started, by PID, and always reaps it; on Linux the child
// also dies with its parent (PR_SET_PDEATHSIG).
//
// # Cases
//
// Names are relative to the test that called Run; Options.Skip uses them.
//
//	Ops           Send SendWithImm RDMAWrite RDMAWriteWithImm RDMARead ScatterGather
//	              ZeroLength Large Inline Unsignaled SigAll (each op on two devices
//	              and within one: .../TwoDevices, .../SameDevice)
//	Ordering      ExecutionOrder CompletionOrder WriteVisibleAtSend ReadAfterWrite Fence
//	              FenceAfterAtomic
//	RNR           RetryExceeded LateRecvSucceeds
//	Errors        RecvTooSmall BadRKey OutOfRange MRWithoutRemoteAccess RemoteMRFromOtherPD
//	              DeregisteredRemoteMR QPAccessFlags NoResponderResources
//	              UnsignaledErrorCompletes ReadIntoMRWithoutLocalWrite
//	Atomics       FetchAddCmpSwap ConcurrentFromSeveralQPs UserMemory
//	PostErrors    InvalidSendRequests TooManyRecvSGEs BadLKey IndexAndPartialPost
//	              SendQueueFull RecvQueueFull WrongState MessageTooLarge
//	StateMachine  LegalPath AnyToErrOrReset MissingAttribute ExtraAttribute
//	              IllegalTransition BadValues ErrFlushesOutstanding ReceiveInRTR
//	MemoryRegions AccessValidation ProviderMemory UserMemory DeregisteredLocalKey PDInUse
//	Scale         ManyQPs
//	Concurrency   PostersAndPollersOneCQ ConcurrentPostsOneQP
//	CQ            PollEmpty WaitHonoursContext WaitWakesOnCompletion
//	              WaitReturnsWhenNonEmpty WaitAfterClose
//	Teardown      QPCloseFlushes DeviceCloseWithOutstandingWork PeerQPClosed PeerDisconnect
//	TwoProcess    Ops Atomics WaiterWokenByPeer PeerKilled
//
// # Skipping
//
// Options.Skip maps a case's name relative to Run (for example
// "Errors/RecvTooSmall") to the reason this provider cannot run it, for
// documented limits of real hardware, not for bugs. Such cases are skipped
// with that reason, so the limitation shows in go test -v output.
package verbstest
