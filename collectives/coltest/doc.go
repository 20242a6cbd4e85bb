// Package coltest is an in-memory fake of collectives.Group for tests and
// benchmarks: N ranks as goroutines, connected by mailboxes that match
// messages per (source, tag) in FIFO order (plus receives from any source,
// collectives.AnySourceReceiver), with optional one-sided windows
// (collectives.OneSided), host topology (collectives.Topology), link
// estimates (collectives.LinkInfo) and fault injection (Kill, FailAfter)
// that fails every pending and later operation of every rank, as the p2p
// layer's communicator-wide failure rule does.
//
//	w := coltest.NewWorld(4, coltest.Options{OneSided: true})
//	errs := w.Run(func(rank int, g collectives.Group) error {
//		e, err := collectives.New(g, collectives.Options{})
//		if err != nil {
//			return err
//		}
//		defer e.Close()
//		buf := []float32{float32(rank)}
//		return collectives.Allreduce(ctx, e, buf, reduce.Sum)
//	})
//
// Sends copy the payload at once (an eager protocol) and complete
// immediately; a receive whose context is cancelled completes with the
// context's error and is no longer matched.
package coltest
