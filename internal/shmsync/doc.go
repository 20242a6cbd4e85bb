// Package shmsync is how processes (or goroutines) that share memory wait
// for each other: a Bell that a waiter sleeps on and a writer rings, and a
// Policy that says how long a waiter spins and yields before it sleeps.
// It is the one wait/park/wake policy of the module, with the one ordering
// argument below; every polling phase is a Policy and every sleep follows
// the protocol's announce, re-check, sleep order.
//
// # Who uses what
//
//	user                          polls by            sleeps on
//	p2p blocking calls            Policy (Poller)     the CQ's Wait, or the request's channel
//	  (Endpoint.poll: Wait, Recv, Send, Probe, windows; Options.Spin/Yield,
//	  Gosched yields, within the spin too)
//	p2p rings (ring.go)           (the p2p poll)      a CQ, with Announce/Asleep on the
//	                                                  ring window's sleepers word
//	verbs/shm CQ.Wait             Policy (Poller)     its doorbell's Bell
//	verbs/shm CQ.WaitSleep        none                a socket, with Announce/Asleep
//	                                                  on the doorbell's parked word
//	collectives shared_memory     Policy (Poller)     the writer rank's Bell (Fenced
//	  (the region comm maps; its SharedRegion.WaitPolicy) where this process is Asymmetric)
//	verbs/ibv, softrc CQ.Wait     none of their own   the kernel's completion channel,
//	  (tcp, loop)                 (p2p's poll first)  or softrc's channel under its lock
//
// The ibv and softrc waits poll nothing themselves: p2p polls every CQ by
// its Policy before it blocks in one, so every path polls by a Policy
// before it sleeps. Over shm there are two in a row, p2p's (Gosched
// yields) and then the CQ's own (sched_yield, which gives the core to
// other processes, as Gosched cannot). The tcp driver's PollSpin, which
// reads its socket while it waits, is not a Policy: the reading is the
// work itself rather than a look at a word.
//
// # The protocol
//
// A Bell is two 32-bit words in shared memory, next to each other: seq,
// the futex word, and sleepers, the count of waiters that are asleep or
// about to be. The condition a waiter waits for is some other memory (a
// completion's sequence number, a round id, a flag) that a writer
// publishes with an atomic store.
//
//	waiter                                  writer
//	A1 sleepers += 1 (atomic add)           B1 publish the data (atomic store)
//	A2 s := seq (atomic load)               B2 if sleepers != 0 (atomic load):
//	A3 if cond() (atomic loads): stop       B3     seq += 1 (atomic add)
//	A4 futex_wait(seq, s)                   B4     futex_wake(seq)
//	A5 sleepers -= 1, go to A1 or return
//
// A waiter announces itself only when it is about to sleep (after the
// Policy's spin and yield): while it polls, a writer's B2 finds no sleeper
// and publishing costs a load, not a system call.
//
// # Why no wake-up is lost
//
// Go's atomics are sequentially consistent: all of them, in every
// goroutine and (for memory two processes map, on the same hardware) in
// every process, fall into one total order that respects each one's
// program order. (Not under the race detector: there an atomic store to
// memory outside Go's heap, such as every shared mapping, is a plain
// store with release order, and a load an acquire one, which the CPU may
// reorder as B1 then B2 below; Asleep does an atomic add there instead of
// B2's load, which restores the order. TestPublishOrderOutsideHeap is
// that pair of steps as a litmus test. The race detector cannot see these
// atomics as synchronisation either: the protocols that hand Go memory to
// a peer goroutine annotate their publications with internal/racesync.)
// Take that order. Either B1 comes before A3, and then A3
// sees the data and the waiter does not sleep; or A3 comes before B1, and
// then A1 < A2 < A3 < B1 < B2, so B2 sees the announcement and the writer
// goes on to B3 after A2: seq no longer holds s. futex_wait compares *seq
// with s and queues the waiter in one step, under the kernel's lock for
// that word, which futex_wake also takes: if B3 came first the comparison
// fails and A4 returns at once; otherwise the waiter is queued before B4
// looks for it. Either way the waiter does not stay asleep past B4.
//
// What this needs from the writer: the publication is an atomic store
// (or is followed by any atomic read-modify-write or store before B2);
// a plain store followed by a plain load of sleepers can be reordered by
// the CPU (store buffering, even on x86) and lose the wake-up. What it
// needs from the waiter: the announcement precedes the re-check, and the
// re-check precedes the sleep with the seq value loaded before the
// re-check (A2 before A3: loading it after would let B3 slip in between
// and the waiter sleep on the new value).
//
// # Light publishing
//
// The atomic store of B1 is a full fence on x86 (XCHG): it waits until the
// line it writes has come over from the waiter's core, which is polling
// it, and a writer that publishes many small messages in a row (p2p's
// rings) pays that wait for each of them in turn. Light publishing moves
// the fence to the waiter, which sleeps seldom: the writer stores with
// release order only (PublishLight, a plain store on amd64) and loads
// sleepers with a plain load (AsleepLight), so that the CPU may perform
// B2 before B1 is visible; the waiter, between A1 and A3, calls
// membarrier(2) (FenceHeavy), which runs a full barrier in every thread of
// every process registered for it (Asymmetric). If the writer's B2 loaded
// before the barrier ran in its thread, the barrier made its earlier B1
// visible, before membarrier returned and the waiter's A3 looks; if B2
// loaded after, A1 was visible by then (it came before the call) and B2
// sees the announcement. Both sides must be registered, or the barrier
// misses the writer. A Bell's waiter does this when its Policy is Fenced,
// and its writers then publish with PublishLight or PublishLight64 and
// ring with RingLight (the collectives' shared region, once every rank
// has said it fences).
//
// A waiter that finds it was off its CPU between two looks at the clock
// marks this process's CPUs contended for a while (Contended); waiters
// whose Policy.Contended is set then keep their CPU past their spin (no
// sched_yield, a later sleep), because on a CPU shared with a busy thread
// both a yield and a sleep cost that thread's time slice.
//
// Every sleep is also bounded (Policy.Nap), so a waiter re-checks
// conditions no writer rings for (a peer that died, a deadline).
// Cancelling the waiter's context rings its bell unconditionally (Kick),
// and Wait returns only once that ring is over, so that a caller may
// unmap the memory after Wait returns.
//
// # The same protocol with other wake-ups
//
// Announce, Withdraw and Asleep are the protocol's steps on a sleepers
// word alone, for waiters that block on something other than the Bell's
// futex:
//
// The p2p layer's rings: a receiver about to block in its completion
// queue adds itself to the sleepers word of its ring window (A1) and looks
// at the rings (A3); a sender stores the message's stamp (B1), loads the
// sleepers word (B2) and, when it is set, sends a frame through the queue
// pair (B3, B4), whose completion rings the receiver's CQ bell. Another
// goroutine may poll that frame, not the waiter, so its poller handles the
// messages it announces (p2p marks it with the ring position). A waiter
// that blocked before the sleepers word existed never announced itself:
// whoever installs the word counts such waiters in it, before any writer
// can publish.
//
// The shm provider's parked background waiter sleeps in Go's network
// poller on a datagram socket instead of futex(2) (it gives the
// goroutine's P back at once): it announces itself in a parked count (A1),
// re-checks (A3) and reads the socket; the writer loads the count after
// publishing (B2) and sends a datagram (B4). A datagram sent before the
// read waits in the socket, as a changed seq makes futex_wait return.
//
// The ibv and softrc providers' CQ waits arm the notification first
// (ibv_req_notify_cq, or counting the waiter under the CQ's lock, where a
// push looks for waiters), then poll once more, then block: the same
// announce, re-check, sleep order, with the kernel or the channel in the
// Bell's place.
package shmsync
