package collectives

import "fmt"

// fingerprint is the Debug cross-check: before any data moves, every rank
// sends its view of the call (sequence number, collective, algorithm, op,
// element type, count, root) to every other rank and compares the full
// table. All ranks see the same table, so all report the same
// disagreement, by name, without waiting for the data exchange to go wrong.
func (c *call) fingerprint() error {
	p := c.n
	h := *c.h
	h.kind = kindFingerprint
	var mine [hdrLen]byte
	h.encode(mine[:])
	stages := make([][]byte, p)
	reqs := make([]*pendingReq, p)
	for r := 0; r < p; r++ {
		if r == c.me {
			continue
		}
		stages[r] = scratch.get(hdrLen + c.e.opts.inline())
		rq, err := c.e.g.Irecv(c.world(r), c.tag, stages[r])
		if err != nil {
			scratch.put(stages[r])
			return c.fail(r, err)
		}
		reqs[r] = c.track(rq, stages[r])
	}
	for r := 0; r < p; r++ {
		if r == c.me {
			continue
		}
		rq, err := c.e.g.Isend(c.world(r), c.tag, mine[:])
		if err != nil {
			return c.fail(r, err)
		}
		c.track(rq, nil)
	}
	table := make([]header, p)
	table[c.me] = *c.h
	for r := 0; r < p; r++ {
		if r == c.me {
			continue
		}
		n, err := c.waitReq(reqs[r].r)
		reqs[r].done = err == nil || c.ctx.Err() == nil
		if err != nil {
			return c.fail(r, err)
		}
		if !table[r].decode(stages[r][:n]) || table[r].kind != kindFingerprint {
			return c.invalid(fmt.Errorf("%w: rank %d sent no fingerprint: Options.Debug must be set on every rank", ErrInvalidArgument, c.world(r)))
		}
	}
	for _, rq := range c.pending {
		if !rq.done {
			if _, err := rq.wait(c); err != nil {
				return c.fail(-1, err)
			}
		}
	}
	known := make([]bool, p)
	for r := range known {
		known[r] = true
	}
	if m := tableMismatch(table, known, c.world); m != nil {
		return &Error{Op: c.op, Algorithm: c.alg.String(), Seq: c.seq, Rank: c.e.rank, Peer: m.otherThan(c.e.rank), Err: m}
	}
	return nil
}
