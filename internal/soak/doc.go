// Package soak draws random collectives and point-to-point exchanges, of
// random sizes, roots and ops, on random sub-communicators, and checks
// every element of their results: the body of comm's TestSoak and of the
// cross-host rank program's soak (internal/cluster/xcheck -soak).
//
//	rounds, err := soak.Run(ctx, c, time.Minute, 0, nil) // on every rank of c
//	if err != nil {
//		return fmt.Errorf("after %d rounds: %w", rounds, err)
//	}
//
// Run draws the rounds (Round) from rank 0's seed until rank 0 says stop;
// Exchange, one of the rounds it draws, is also the cross-host check's
// exchange of messages between every pair of ranks. Every rank of c must
// call them together; they are not safe for concurrent use on one
// communicator (its operations are ordered), and a failing check returns
// an error, never panics.
package soak
