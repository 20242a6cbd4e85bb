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
//
// Connections that stay within this machine's kernel (to a loopback
// address or their own address, or to a peer device whose QP address
// names this kernel: another network namespace or container) run reno
// congestion control (Options.LocalCongestion), whatever the system's
// default: BBR, which some systems default to, sizes its window from the
// round trip it measures, microseconds there, and takes the reordering of
// segments two CPUs hand the kernel at once for loss; it kept a 1 MiB READ
// response waiting for ACKs halfway. With reno, latency at 1-4 MiB took
// 0.6 of the time over loopback and 0.3 between network namespaces, and
// bw and bibw from 512 KiB went 1.5-4.7 times as fast. Connections start
// with it (the listener has it, and a dialer sets it before it connects
// when the peer's address tells): a switch away from BBR leaves its pacing
// on, which between network namespaces (1500-byte segments) made 8-16 KiB
// ping-pongs 1.4-1.7 times as slow. Connections to other machines keep the
// system's default unless Options.Congestion names another.
//
// # Threading
//
// A goroutine hand-off (one goroutine making another runnable) costs a
// futex wake-up and a trip through the scheduler: 20-25 µs on a busy
// 2-core machine, more than a frame's own work. So the hot path of a
// message has none, and an 8-byte round trip runs the same system calls
// as a raw TCP ping-pong:
//
//   - Sending: PostSend writes its frames itself when no other goroutine is
//     writing to the connection (a try-lock) and the payload is at most
//     4 MiB, with one non-blocking write (writev, or write for a few
//     small pieces); small WRITEs that ask for no ACK, one after another,
//     go as one WRITE_RUN frame. A completion that lets queued requests go (the next
//     READ of a window, once an earlier one's response is in) has the
//     reading side write them the same way, and a request that may not go
//     yet (a READ beyond the peer's outstanding-READ limit) is no work for
//     anyone until then. What the socket does not take at once, larger
//     requests, and posts that find a write in progress are left to the
//     link's writer goroutine, which owns the queue then; the requester
//     hands out requests in posting order to whoever holds the write lock,
//     so order per QP is kept whoever writes.
//   - Receiving: a goroutine in CQ.Wait whose CQ gets completions from one
//     connected QP only (a CQ per QP, or per peer) reads that QP's socket
//     itself: it handles frames on its own goroutine until its completion
//     is there, so the frame that completes it wakes it straight from the
//     network poller. Otherwise the link's reader goroutine reads, pushes
//     the completion and wakes the waiter directly (one hand-off; the
//     engine adds no goroutine or channel of its own in between).
//   - Responses (READ responses, atomic results, NAKs) are written by
//     whoever handled the request, non-blocking as above, once no further
//     whole frame is buffered: the answers to requests that arrived
//     together (a READ in pieces) leave in one write. The reading side
//     never blocks on a write, so two ends busy writing large messages to
//     each other cannot deadlock. A plain ACK is held back until this side
//     sends its next frame (a ping-pong's ACKs ride on its data), is about
//     to block on the socket, or at the latest PollGrace later, so that a
//     waiter does not pay a write before it gets its completion. While
//     frames stream in (the next one is arriving already), a polling
//     waiter holds up to 16 ACKs instead of writing them frame by frame.
//
// The right to read a connection is a token held by the reader goroutine or
// one waiter. A waiter takes it from the reader goroutine by interrupting
// its blocked read (a read deadline in the past), at a frame boundary; when
// it has its completion it puts the token back without waking the reader
// goroutine, because a waiter in a loop comes back within microseconds. The
// reader goroutine resumes Options.PollGrace (500 µs; 10 ms where ranks
// outnumber the CPUs, whose waiters come back when they get a CPU) after
// the last waiter left, or at once when a waiter needs it, so traffic
// nobody waits for (the target of RDMA WRITE and READ, say) is served at
// most that late.
// A waiter blocks only between frames or while the rest of a frame
// arrives, in a wait its ctx can interrupt, and handles a frame only once
// it is all here: buffered, for one that fits the 160 KiB read buffer, or
// queued in the socket, for one of up to 1 MiB (SO_RCVLOWAT wakes the
// waiter once when it is; its payload then goes straight from the socket
// into memory without blocking). A READ response larger than the read
// buffer (a rendezvous's data; one READ per message, so the two kernels'
// copies overlap), or a SEND (an eager message of up to 256 KiB) whose
// rest is not queued yet, it streams into memory instead, as it arrives,
// in reads its ctx and its CQ's other completions interrupt: then the
// frame is suspended where it is (softrc.ErrSuspended) and whoever reads
// the socket next finishes it before anything else, the reader goroutine
// at once. A SEND found queued whole is read at once: streaming it costs
// the system calls a waiter makes before it may block.
// Other larger frames, frames larger than the
// receive window the connection has grown so far (the peer could not send
// them whole before we read), and frames not all queued within 5 ms of
// the wait (the window the kernel offers may still be smaller, and the
// peer then waits for us to read as we wait for it) are left to the reader
// goroutine, which streams them into memory as they arrive. So a Wait
// returns when its ctx ends whatever the peer does, a frame is never lost
// half handled, and no frame waits on a window only its reading opens.
// A payload goes through the read buffer only as far as it was read with
// what came before it: the rest of one of 16 KiB or more is read from the
// socket straight into its destination. While frames larger than the
// buffer come, each header is read alone (with up to 192 bytes, so that
// an ACK sent ahead of it comes along), so that none of such a payload is
// copied twice, unless a look into the socket has just found no more than
// a few small frames' worth queued (1 KiB), which is read whole. A waiter
// that polls can do the same while frames with payloads of
// Options.HeaderAloneMin or more come (by default it does not: that cost
// 32 KiB ping-pongs twice their time), such as 64 KiB eager
// messages, when its look finds less than a buffer's worth queued, and
// reads the payload once it is queued (at once if that look found it
// there): one system call more, one copy fewer. A stream of such frames
// (a window of eager messages), which a look finds queued a buffer's worth
// at a time, is read through the buffer, as are smaller frames, read with
// whatever follows them, which saves more system calls than copies.
// Before it blocks, a waiter may poll its socket for Options.PollSpin
// (verbs.DeviceOptions.PollSpin; p2p sets the provider's 1 ms), so that a reply
// arriving within it is read without a wake-up through futex, epoll and the scheduler, which on a VM costs more
// than a small message. Each poll is one system call: a non-blocking read
// into the read buffer while small frames are expected, so the poll that
// finds one has read it too (cheaper than probing with ioctl(SIOCINQ) and
// then reading), and that ioctl for frames over
// 32 KiB, or after a frame that large, whose bytes it waits for whole
// instead of reading them in the pieces they arrive in. While it polls,
// the socket's low-water mark (SO_RCVLOWAT) stays above any frame that
// fits the read buffer, so that what arrives does not wake Go's network
// poller (an idle thread in epoll_wait) for bytes the waiter reads itself:
// on 2 CPUs that wake-up took a CPU from the polling ranks of a ping-pong
// about once per round trip. It stays raised between waits; whoever next
// waits for the socket in the network poller lowers it first. It polls the socket
// only, never the CQ's other producers' work: it stops when its CQ has a
// completion or its ctx ends. Without a CPU to itself (Options.PollYield,
// which p2p sets when the ranks on the host outnumber its CPUs) it gives
// the CPU to other processes (sched_yield) after each poll that finds
// nothing, as the process that sends its reply may need that core: Open
// MPI's oversubscribed ranks poll the same way. A waiter on a CQ that
// several links feed cannot drive them all; with PollYield it looks for
// arrived bytes as the crowded poll below does (Arrived), with sched_yield
// between looks, takes the whole frames that are there on its goroutine
// (a payload of 96 KiB or more, once such frames come, straight from the
// socket into place once all of it is queued, not through the read
// buffer) and looks for its completion, and parks only for work the links'
// goroutines must do (softrc.Config.YieldSpin). Without PollYield, it does not poll while
// its polls keep running out before their frame comes (a peer that computes, a busy
// machine): after each such miss in a row, twice as many waits (1, 2, 4,
// up to 64) sleep at once, until a poll finds its frame again. A waiter
// streaming a READ response polls the same way between the reads that
// take its payload, for as long as bytes keep coming within PollSpin of
// each other (streaming a SEND, it reads once 64 KiB or the rest is
// queued, looking with SIOCINQ: read as each segment came, a window of
// 256 KiB SENDs between two hosts ran at 0.72 of its rate): asleep in the network poller, it made every segment its
// sender hands the kernel wake it, an inter-processor interrupt on the
// sender's CPU (on a VM, an exit), which doubled the time the sender took
// to write 1 MiB. It probes with poll(2), which does not take the socket's
// lock (a read does, and kept the kernel from handling arriving segments),
// and not at all while a writer goroutine of the device writes, which may
// wait for the network poller that a polling goroutine keeps from running.
// A poller's and an inline writer's calls on the non-blocking socket (reads,
// writes, looks, polls of up to 256 KiB) are raw system calls, which Go's
// scheduler does not see: a rank preempted in the middle of one by a thread
// sharing its CPU would otherwise have its P handed to another thread at
// sysmon's next tick, a thread wake-up on that CPU each time.
//
// A waiter over several devices on a crowded host (p2p's crowded poll)
// looks for arrived bytes through its CQ's Arrived after each empty poll:
// the CQ watches all its links' sockets with one level-triggered epoll set
// (link.ControlFD), so a look is one epoll_wait however many links there
// are, and the whole frames that are there are taken on the waiter's
// goroutine (DriveQueued), their ACKs left to ride on the next frame sent
// or to go PollGrace later. Work only the link's goroutines can do (a
// frame larger than the read buffer, a write the socket did not take at
// once, which waits for Go's network poller) makes the waiter block, so
// that the scheduler, with nothing else to run, polls the network and runs
// them without the process sleeping.
package tcp
