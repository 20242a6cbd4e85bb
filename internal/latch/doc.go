// Package latch is a one-shot event whose channel is made only for
// somebody who blocks on it: most events of a call that completes at once
// are set before anybody waits, and then cost no allocation.
//
//	var l latch.Latch
//	go func() { result = compute(); l.Set() }()
//	select {
//	case <-l.Chan(): // result is ready
//	case <-ctx.Done():
//	}
//
// Set happens before every IsSet that reports true and before the close
// of every channel Chan returned, so what the setter wrote before Set is
// visible after either. The zero Latch is unset; all methods are safe for
// concurrent use. A Latch must not be copied after first use.
package latch
