// Package soak draws random collectives and point-to-point exchanges, of
// random sizes, roots and ops, on random sub-communicators, and checks
// every element of their results: the body of comm's TestSoak and of the
// cross-host rank program's soak (internal/cluster/xcheck -soak).
//
//	rng := rand.New(rand.NewPCG(seed, 7)) // the same seed on every rank
//	for round := 0; round < 100; round++ {
//		if err := soak.Round(ctx, c, rng, round); err != nil {
//			return fmt.Errorf("round %d: %w", round, err)
//		}
//	}
//
// Every rank of c must call Round with the same sequence of draws; Round
// is not safe for concurrent use on one communicator (its collectives are
// ordered), and a failing check returns an error, never panics.
package soak
