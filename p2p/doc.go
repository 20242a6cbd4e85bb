// Package p2p carries messages between the ranks of a job on top of the
// verbs model: point-to-point sends and receives with MPI matching, and
// one-sided windows (writes with notifications for the collectives, reads,
// per-window signals and 64-bit atomics, on all ranks or a group).
//
//	ep, err := p2p.New(ctx, store, p2p.Options{Provider: "tcp"}) // store: a bootstrap.Store
//	if err != nil { ... }
//	defer ep.Close()
//	if ep.Rank() == 0 {
//		err = ep.Send(ctx, 1, 42, []byte("hello"))
//	} else if ep.Rank() == 1 {
//		buf := make([]byte, 64)
//		st, err := ep.Recv(ctx, p2p.AnySource, p2p.AnyTag, buf)
//		fmt.Printf("%d bytes from rank %d, tag %d\n", st.Count, st.Source, st.Tag)
//	}
//
// (Example in example_test.go runs it over the in-process loop provider.)
//
// # Connections and protocols
//
// New creates one reliable-connected queue pair per peer on the verbs
// provider chosen for it (Options.Provider, or auto), exchanges the
// addresses through the rendezvous store and connects them all. Messages
// of up to Options.EagerLimit bytes go eagerly: copied into a pre-posted
// receive buffer of the peer with SEND, under credit-based flow control
// (peer.go explains the credits), so a sender can never overrun a receiver.
// Larger messages use the rendezvous protocol: the sender registers its
// buffer (through an LRU registration cache that keeps its memory alive)
// and sends an RTS; the receiver, once a receive matches, RDMA READs the
// data straight into its own buffer and answers FIN. No copy is made. Over
// shm, messages of up to 4144 bytes skip the queue pair: the sender writes
// them into a ring in the receiver's memory (ring.go; Options.RingLines).
// The frame formats are in docs/wire-p2p.md.
//
// # Matching
//
// A receive matches on (context, source, tag) with AnySource and AnyTag
// wildcards. Messages between one pair of ranks with the same context and
// tag never overtake each other; messages that arrive before their receive
// wait in the unexpected queue. A message larger than the receive buffer
// fails the receive with ErrTruncated (a *TruncatedError stating both
// sizes). Probe and Iprobe report source, tag and size without receiving;
// Mprobe and Improbe claim the message so that only Message.Recv can take
// it, which makes probe-then-receive safe between goroutines.
//
// Contexts keep libraries apart: Endpoint's own methods use context 0;
// Endpoint.Channel(id) gives the same methods on context id, and messages
// never match across contexts. The communicator layer gives each
// communicator its own ids (for example 2k for user point-to-point and
// 2k+1 for the collectives of communicator k), so collectives on a Dup'ed
// communicator never match user messages. User tags are 0..MaxTag; ids
// from FirstReservedContext up belong to this package.
//
// # Requests and progress
//
// Isend and Irecv return a *Request with Wait, Test and Cancel; WaitAll and
// WaitAny wait for several. Every blocking call takes a context: when it
// ends, whatever has not matched yet is canceled and the error wraps a
// *DeadlineError naming the ranks that had not arrived (and matches
// context.DeadlineExceeded or context.Canceled). A request that cannot be
// canceled any more (a receive whose data is moving, a rendezvous send
// whose receiver has not answered the cancel, a window operation already
// posted) is not waited for, since that may take the peer's progress: the
// call returns at once, its error says the request is still in progress,
// and its buffer stays in use until the request completes (Done, or a
// later Wait on a non-blocking request).
//
// The goroutine that waits drives progress itself: it polls the completion
// queues (spinning, then yielding, then blocking, by internal/shmsync's
// Policy, the wait policy of every waiter in the module), so on the
// blocking hot path the completion is handled by the goroutine that wants
// it, without a hand-off. A background goroutine per device progresses non-blocking
// requests while the program computes. See progress.go.
//
// # Concurrency
//
// Every method of Endpoint, Channel, Request, Message and Window is safe
// for concurrent use: point-to-point operations may run from many
// goroutines at once. Two goroutines receiving with overlapping patterns
// get messages in the order their receives were posted.
//
// # Failure
//
// Failure is endpoint-wide, as in MPI's ULFM revoke: when a rank sees a
// link fail (an error completion, a liveness timeout of
// Options.LivenessTimeout, a malformed frame), it fails every pending and
// later operation with a *PeerLostError naming the lost rank and sends a
// REVOKE to every other rank, which does the same (and forwards it once).
// errors.Is(err, ErrPeerLost) holds on every rank, also on those that never
// talked to the lost one (there ErrRevoked holds too). A rank that calls
// Close says goodbye first, so its peers do not take it for lost; their
// receives that can only match it then fail with ErrClosed.
//
// # Errors
//
// Every error is a *Error{Op, Rank, Peer, Tag, Err}; causes match the
// sentinels (ErrPeerLost, ErrRevoked, ErrTruncated, ErrClosed,
// ErrInvalidRank, ErrInvalidTag, ErrInvalidArgument, ErrCanceled,
// ErrProtocol) with errors.Is. Bad input (a rank out of range, a negative
// tag, use after Close) is an error, never a panic.
package p2p
