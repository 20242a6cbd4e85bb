// Package faulty is a fault-injecting verbs provider, in the spirit of
// pebble's errorfs: it wraps any provider's devices and, on the test's
// command, fails posts, loses or delays completions, and drops
// connections, so that the layers above verbs can test their error and
// peer-loss paths.
//
//	inj := faulty.NewInjector()
//	dev, _ := loop.Open(ctx, loop.Options{})
//	dev = faulty.Wrap(dev, inj) // everything created on dev now obeys inj
//	...
//	inj.FailPosts(1, verbs.ErrQueueFull, nil)            // the next post fails
//	inj.DropCompletions(1, faulty.SendsOf(qp.Num()))     // a send completion is lost
//	inj.DelayCompletions(-1, 50*time.Millisecond, nil)   // every completion is late
//	inj.Disconnect(qp.Num())                             // the link to the peer dies
//
// Rules can be added or cleared at any time, from any goroutine; each
// applies to the posts or completions that happen after it was added.
//
// # What each fault looks like
//
//   - A failed post returns a *verbs.Error (Op "PostSend" or "PostRecv",
//     Index 0) wrapping the chosen error; nothing of that call is posted.
//   - A dropped completion is never returned by Poll, and does not wake
//     Wait. The request still executed: only its report is lost.
//   - A delayed completion, and every completion queued behind it on the
//     same CQ, is held back until its delay passes: the CQ stays FIFO, like
//     a slow device, and Wait wakes when it is due.
//   - A corrupted completion is delivered after a test-supplied function
//     changed it: a provider bug on demand, to check that a test notices.
//   - Disconnect drops a queue pair's connection as if the network failed.
//     If the wrapped provider's QP implements verbs.Disconnector, that does
//     the work (both sides notice, as the provider defines). Otherwise, or
//     when SynthesizeDisconnects(true) was called, the wrapper moves the QP
//     — and its peer, if the same injector wraps it — to ERR and reports the
//     first flushed send request of each as RETRY_EXC_ERR, the rest as
//     WR_FLUSH_ERR; if nothing was outstanding, the next send posted gets
//     RETRY_EXC_ERR. Synthesis tells send from receive completions by
//     request ID, so it assumes a QP's send and receive IDs differ.
//
// The wrapper changes nothing else: queue pair addresses are the inner
// provider's, so a wrapped QP connects to wrapped and unwrapped peers alike,
// and memory regions are the inner provider's own. With no rules it passes
// the conformance suite (verbs/verbstest) exactly as the wrapped provider
// does. A wrapped device and QP have an Inner method returning the
// provider's own object, for tests that need it.
package faulty
